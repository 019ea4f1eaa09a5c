// attnscope — report: the result of `attnscope check` as text for a person and as one
// JSON document for a script (an autograder reads only that and the exit code).
#pragma once

#include <iosfwd>
#include <string>

#include "attnscope/analysis/check.hpp"
#include "attnscope/core/view.hpp"

namespace attnscope {

// One line per stage in pipeline order (matches / differs / not given), then the first
// divergent stage, then the diagnosis (or where the difference is). Their array names
// and file names are escaped.
void write_check_text(std::ostream& out, const CheckResult& result, const TraceView& ref, const std::string& theirs);

// {"verdict": "match"|"mismatch", "theirs": ..., "against": ..., "inputs_checked": [...],
//  "stages": {NAME: {"given": bool, "match": bool|null, "max_abs_diff": number|null,
//    "at": [...]|null, "axes": "bhtd"|null, and when given: "name", "dtype", "shape",
//    "at_reference", "precision" (the tolerance's: the coarser of dtype and --dtype),
//    "relative_error" (||theirs - ref|| / ||ref||), "rtol_needed" (the smallest
//    rtol = atol that accepts every cell), "rounding_level" (differs by no more than √eps of
//    its precision, float32 or less), "mismatched_cells", "nonfinite_cells" (±inf or NaN on
//    one side only), "cells", "tolerance": {"atol", "rtol"}}},
//  "first_divergent_stage": NAME|null, "diagnosis": [{"id", "stage", "max_abs_diff",
//  "variant", "title", "explanation", "fix", "also_reproduces", "does_not_reproduce"}],
//  "where": [{"kind", "detail"}], "note": "..."}
// max_abs_diff, relative_error and rtol_needed are always numbers (null only for a stage
// not given): an infinite one — a cell with ±inf or NaN on one side only — is written as
// the largest double, 1.7976931348623157e+308, since JSON has no infinity.
void write_check_json(std::ostream& out, const CheckResult& result, const TraceView& ref, const std::string& theirs);

}  // namespace attnscope
