// attnscope — analysis: the check of someone's own attention tensors (`attnscope check`).
//
// Their tensors (any subset of the stages, named as we name them or by a common alias,
// in any of the usual axis orders) are compared with the float64 reference trace of the
// same inputs. The first stage that differs is diagnosed: it is recomputed under each
// mistake of a catalogue (no 1/sqrt(Dk), softmax over the wrong axis, the mask inverted,
// keys used as values, ...) and every mistake that reproduces their tensor within the
// tolerance is reported, best first. When none does, the difference is described: which
// rows, heads or cells it sits in, a constant factor, a transpose, another axis order.
//
// Shape legend as in attention.hpp (B, H, G, Tq, Tk, Dk, Dv, Dout). Axis orders are
// written in the letters b (batch), h (head), t (position), d (feature), q and k (the
// query and key axes of score-like stages); a merged axis in parentheses: "bt(hd)" is
// (B, T, H·D) (the grammar of model/axes.hpp).
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "attnscope/core/view.hpp"
#include "attnscope/io/array.hpp"
#include "attnscope/model/axes.hpp"
#include "attnscope/model/model.hpp"

namespace attnscope {

// A cell of theirs matches the reference r when |theirs - r| <= max(atol, rtol * |r|).
// The defaults follow the precision theirs was computed in (the coarser of the array's
// dtype and {dtype}): float64 (and JSON, integers) 1e-9, float32 2e-5, float16 1e-2,
// bfloat16 1e-1, i.e. |Δ| <= tol · max(1, |r|).
struct Tolerance {
    double atol = 1e-9, rtol = 1e-9;
};
Tolerance default_tolerance(const std::string& precision);

// The precision an array of dtype `dtype` was computed in when {dtype} says `computed`:
// the coarser of the two ("float32" for a float64 array of a float32 computation, "float16"
// for a float16 array whatever {dtype} says); the array's own dtype when neither is coarser.
std::string precision_of(const std::string& dtype, const std::string& computed);

struct CheckOptions {
    std::optional<double> rtol, atol;         // override the precision's defaults (atol follows rtol)
    std::string computed = "float64";         // {dtype}: the precision theirs was computed in
    std::map<std::string, std::string> axes;  // their array name -> axis order ("bthd", "bt(hd)", "bhqk")
};

// One stage of the reference and, when given, how theirs compares.
struct StageCheck {
    Stage id;
    std::string name;  // our stage name
    bool given = false;
    // When given:
    std::string their_name;  // as spelled in THEIRS
    std::string dtype;       // theirs: "float32", "float64", "json", ...
    std::string precision;   // the precision its tolerance follows (precision_of)
    std::string axes;        // their axis order as recognised, e.g. "bthd", "bt(hd)", "htd"
    std::string reading;     // why their name was read as this stage (a bare attn_scores), or ""
    std::vector<std::size_t> their_shape;
    Tolerance tol;
    bool match = false;
    double max_abs_diff = 0;                // the largest |theirs - ref| (inf: ±inf or NaN on one side only)
    std::vector<std::size_t> at;            // where, as an index of THEIR array (empty when equal)
    std::vector<std::size_t> at_ref;        // the same cell as an index of the reference stage
    std::vector<std::string> ref_axes;      // the reference stage's axis names ("B", "H", "Tq", ...)
    std::vector<std::size_t> ref_shape;     // and its shape
    double theirs_at = 0, ref_at = 0;       // the two numbers at that cell
    double relative_error = 0;              // ||theirs - ref|| / ||ref||; inf when a cell differs infinitely
    double rtol_needed = 0;                 // max |theirs - ref| / max(1, |ref|): the smallest rtol = atol
                                            // that accepts the stage (inf as above)
    bool rounding_level = false;            // differs, but by no more than √eps of its precision
                                            // (float32, float16, bfloat16): rounding, not a bug
    std::size_t mismatched = 0, cells = 0;  // cells outside the tolerance, of all
    std::size_t nonfinite = 0;              // cells with ±inf or NaN on one side only
    std::size_t large_negative_fill = 0;    // masked cells holding e.g. -1e9 instead of -inf (accepted)
};

// A catalogued mistake that reproduces their first divergent stage.
struct Diagnosis {
    std::string id;
    Stage stage;                         // the stage it was checked on (the first divergent)
    double max_abs_diff = 0;             // |theirs - the mistake's result| at most, on that stage
    std::string variant;                 // which form of the mistake, e.g. "W_Q and W_K transposed" (may be empty)
    std::vector<std::string> also;       // later stages they gave that the mistake reproduces as well
    std::vector<std::string> not_later;  // later stages they gave that it does not reproduce
    std::string title, explanation, fix;
};

// Where a difference sits, when no mistake of the catalogue reproduces it.
struct Finding {
    std::string kind;    // "rows", "heads", "batch", "masked-cells", "factor", "offset", "transpose", "axes", ...
    std::string detail;  // one sentence
};

struct CheckResult {
    std::vector<StageCheck> stages;   // every stage of the reference run, pipeline order
    std::vector<std::string> inputs;  // input arrays found in THEIRS (x, W_Q, ...), equal to the bundle's
    std::optional<Stage> first_divergent;
    std::vector<Diagnosis> diagnosis;  // best first; empty when no mistake fits
    std::vector<Finding> where;        // when none fits: where the difference concentrates
    std::string no_diagnosis;          // why the catalogue could not be tried (empty when it was)
    // Every stage given matches (check_tensors refuses THEIRS without a stage: nothing
    // compared is never a match).
    bool matches() const;
};

// One mistake of the catalogue: a stable id, a title, what goes wrong and the fix.
struct Mistake {
    std::string_view id, title, explanation, fix;
};
const std::vector<Mistake>& mistake_catalogue();

// The stage an array of theirs names: our names and the common aliases, case-insensitive
// (q/query, k/key, v/value, logits, attn/attn_weights/probs/p_attn/attention/pattern,
// z/attn_output_per_head, out/attn_output/attn_out), and TransformerLens's hook names with
// or without their prefix (blocks.0.attn.hook_q, hook_attn_scores — after the causal mask,
// so masked_scores —, hook_pattern, hook_z, hook_result, blocks.0.hook_attn_out). A bare
// attn_scores (no hook_ prefix) is read by its content in check_tensors: masked_scores
// when a cell holds -inf or a fill value, scores otherwise.
std::optional<Stage> stage_of_name(std::string_view name);

// The axis orders a stage is recognised in, for a run of these sizes (help and messages):
// "bhtd (1, 2, 6, 4)", ...
std::vector<std::string> accepted_orders(const TraceView& ref, Stage stage);

// Compares their arrays with the reference run `ref` of `problem` (float64, every stage
// kept) and diagnoses the first divergent stage. `inputs`: the bundle the reference was
// computed from (input arrays in THEIRS are checked against it). InputError naming the
// array for an unknown name, THEIRS without any stage (only inputs, e.g. the bundle itself), two arrays for one stage,
// a shape that fits no axis order or more than one, an {axes} entry that names no array or does not fit, an input array
// that differs from the bundle's (tensors from another bundle).
CheckResult check_tensors(const TraceView& ref, const Problem<double>& problem, const Bundle& inputs,
                          const Bundle& theirs, const CheckOptions& options);

}  // namespace attnscope
