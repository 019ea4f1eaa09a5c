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

// {"verdict": "match"|"mismatch", "theirs": ..., "against": ..., "stages": {NAME: {"given": bool,
// "match": bool|null, "max_abs_diff": x|null, "at": [...]|null, "axes": "bhtd"|null, ...}},
// "first_divergent_stage": NAME|null, "diagnosis": [{"id", "stage", "max_abs_diff",
// "explanation", ...}], "where": [{"kind", "detail"}], "note": "..."}
void write_check_json(std::ostream& out, const CheckResult& result, const TraceView& ref, const std::string& theirs);

}  // namespace attnscope
