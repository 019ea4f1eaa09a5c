// The parts of `attnscope check` (analysis/check.hpp) shared between its files:
//   check_theirs.cpp     reading their arrays: names to stages, input arrays against the bundle
//   check_axes.cpp       axis orders: a stage's axes, the order of each array, its cell map
//   check_compare.cpp    comparing: tolerances and precisions, theirs against the reference
//   check_pipeline.cpp   the classic pipeline recomputed, with one mistake switched on
//   check_mistakes.cpp   the catalogue of mistakes and the forms each takes in a run
//   check_diagnosis.cpp  which mistakes reproduce the first divergent stage
//   check_where.cpp      where a difference sits when none does
//   check.cpp            check_tensors: the three steps in order
#pragma once

#include <array>
#include <cctype>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "attnscope/analysis/check.hpp"
#include "attnscope/model/axes.hpp"

namespace attnscope::check_detail {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
// A masked cell (-inf in the reference) may hold a large negative number instead: the
// Annotated Transformer's masked_fill(mask == 0, -1e9). Softmax gives it weight 0 alike.
constexpr double kLargeNegative = -1e4;

inline std::string lower(std::string_view s) {
    std::string out(s);
    for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
    return out;
}

inline std::string join(const std::vector<std::string>& items, const std::string& sep = ", ") {
    std::string out;
    for (const auto& s : items) out += (out.empty() ? "" : sep) + s;
    return out;
}

inline std::string num(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3g", v);
    return buf;
}

inline std::size_t product(const std::vector<std::size_t>& shape) {
    std::size_t n = 1;
    for (std::size_t s : shape) n *= s;
    return n;
}

inline std::vector<std::size_t> unravel(std::size_t k, const std::vector<std::size_t>& shape) {
    std::vector<std::size_t> at(shape.size());
    for (std::size_t i = shape.size(); i-- > 0;) at[i] = k % shape[i], k /= shape[i];
    return at;
}

// ---------------------------------------------------------------------------------------
// Axis orders (check_axes.cpp)
// ---------------------------------------------------------------------------------------

// The stage's axes outermost first, the batch axis included (size 1 for a 2-D input), in
// the letters of {axes}.
Axes canonical_axes(const TraceView& ref, const StageView& s);
// An axis order of a stage, in {axes} letters (q and k mean t in a stage with one
// position axis), with its shape; none with `why` when it is not one.
std::optional<AxisReading> stage_layout(std::string_view order, const Axes& canon, std::string* why);
// For each cell of their array (C order), its offset in the reference stage.
std::vector<std::size_t> cell_map(const AxisReading& l, const Axes& canon);
// The axis order of one array of theirs: as {axes} says, or the only one its shape fits.
AxisReading resolve_layout(const TraceView& ref, const StageView& s, const std::string& where, const std::string& name,
                           const Array& a, const std::optional<std::string>& order);

// ---------------------------------------------------------------------------------------
// Comparing (check_compare.cpp)
// ---------------------------------------------------------------------------------------

struct Cmp {
    bool match = true;
    double max_abs = 0;
    std::size_t at = 0;  // offset in the reference's order
    double relative = 0;
    double needed = 0;  // max |Δ| / max(1, |ref|): the smallest atol = rtol that accepts every cell
    std::size_t bad = 0, large_negative = 0, nonfinite = 0;
};

// |theirs - ref| cell by cell (both in the reference's order). NaN equals NaN; a -inf of
// the reference is matched by -inf or by a large negative number. A cell with ±inf or NaN
// on one side only differs by inf, and makes the relative error and `needed` inf too.
Cmp compare(const std::vector<double>& theirs, const std::vector<double>& ref, Tolerance tol);

// The precisions a computation may have been done in: the unit roundoff's double (eps) and
// the default tolerance. Measured against float64 (|Δ| / max(1, |ref|), two heads, causal):
// float32 attention came within 1.3e-6 at T = 64 (tolerance 2e-5), float16 within 3.6e-3
// at T = 256 (1e-2), bfloat16 within 7.1e-2 at T = 64 (1e-1). Every other dtype (float64,
// JSON, integers) counts as float64.
struct Precision {
    std::string_view name;
    double eps, tol;
};
inline constexpr Precision kPrecisions[] = {
    {"float64", 0x1p-52, 1e-9}, {"float32", 0x1p-23, 2e-5}, {"float16", 0x1p-10, 1e-2}, {"bfloat16", 0x1p-7, 1e-1}};
const Precision& precision_info(const std::string& dtype);

// {rtol} alone sets atol too (|Δ| <= rtol · max(1, |ref|)); {atol} alone leaves rtol.
Tolerance tolerance_of(const Array& a, const CheckOptions& o);

// ---------------------------------------------------------------------------------------
// Their arrays (check_theirs.cpp)
// ---------------------------------------------------------------------------------------

struct Theirs {
    const Array* array = nullptr;
    std::string name;
    AxisReading layout;
    std::vector<std::size_t> map;  // their cell k -> reference offset
    std::vector<double> values;    // in the reference's order
    std::string precision;         // precision_of(its dtype, {dtype})
    Tolerance tol;
    std::string reading;  // why a name of two meanings was read as this stage ("" otherwise)
};

// A TransformerLens cache name without its prefix: "blocks.0.attn.hook_q" -> "q",
// "blocks.0.hook_attn_out" -> "attn_out"; other names as they are (lower case).
std::string without_hook_prefix(std::string_view name, bool* had_prefix = nullptr);
// "Q, K, ... or an alias: q, k, ..." for the message of a name that is none of them.
std::string names_expected();
// Their arrays: names -> stages, shapes -> axis orders, values -> our order. Input arrays
// (x, W_Q, ...) are checked against the bundle and listed in `inputs_found`.
std::map<Stage, Theirs> read_theirs(const TraceView& ref, const Bundle& inputs, const Bundle& theirs,
                                    const CheckOptions& options, std::vector<std::string>& inputs_found);
// One stage of the reference, and theirs compared with it when given (check_compare.cpp).
StageCheck check_stage(const StageView& s, const Theirs* t);

// ---------------------------------------------------------------------------------------
// The classic pipeline, with mistakes (check_pipeline.cpp)
// ---------------------------------------------------------------------------------------

// The stages the diagnosis computes (the classic pipeline and RoPE, bias, which pass
// through): every stage but sink_weight and head_output.
inline const StageSet kModelled = all_stages().reset(kSinkWeight).reset(kHeadOutput);

struct Dense {
    std::vector<std::size_t> shape;
    std::vector<double> v;
};
inline Dense dense(std::vector<std::size_t> shape, double fill = 0) {
    Dense d;
    d.v.assign(product(shape), fill);
    d.shape = std::move(shape);
    return d;
}

enum class MaskEdit {
    none,
    inverted,
    padding_inverted,
    causal_inverted,
    includes_next,
    excludes_self,
    upper,
    on_queries
};
enum class Fill { neg_inf, zero, after_softmax, ignored };
enum class RowPolicy { zero, nan, uniform };  // a softmax line with every cell masked
// How (B, T, n·D) becomes (B, n, T, D) and back: feature h·D + j of head h (right); the
// same memory read as (B, n, T, D) without a transpose (flat); a reshape to (B, T, D, n),
// so that head h gets the features j·n + h (interleaved).
enum class HeadSplit { right, flat, interleaved };

struct Mutation {
    std::string id, variant;
    Stage entry = kQ;
    std::optional<double> scale;
    bool scores_transposed = false;
    MaskEdit mask = MaskEdit::none;
    Fill fill = Fill::neg_inf;
    bool over_queries = false;
    bool values_are_keys = false;
    bool no_output_projection = false;
    std::array<bool, 4> transposed{};                              // W_Q, W_K, W_V, W_O
    std::array<bool, 4> no_bias{};                                 // b_Q, b_K, b_V, b_O
    HeadSplit split = HeadSplit::right, merge = HeadSplit::right;  // of Q, K, V; of the context
    RowPolicy policy = RowPolicy::zero;
};

// The sizes and inputs of the reference run, as the pipeline uses them.
struct Run {
    const Problem<double>& pr;
    std::size_t B = 1, H = 1, G = 1, Tq = 1, Tk = 1, Dk = 1, Dv = 1, Dout = 1;
    double scale = 1;
    StageSet present{};  // the stage exists in this run (and is modelled)
};

// The stages computed so far, by Stage (nullptr: none).
using Pipe = std::array<const Dense*, kStageCount>;

// b_Q, b_K, b_V, b_O (w = 0..3); whether W_Q, W_K, W_V, W_O is square (W_O: when there is one).
const std::optional<Tensor<double, 1>>& bias_of(const Problem<double>& pr, int w);
bool square(const Problem<double>& pr, int w);
// The mask rebuilt from its parts (padding, causal), with one of them edited.
Dense edited_mask(const Run& r, MaskEdit e, const Dense& ref_mask);
// Stage p computed from the stages before it (`cur`) under mutation m. Stages the
// diagnosis does not model (Q_rot, K_rot, bias) pass through as they are.
Dense step(Stage p, const Run& r, const Pipe& cur, const Mutation& m, bool& empty_lines);

// ---------------------------------------------------------------------------------------
// The catalogue (check_mistakes.cpp), the diagnosis (check_diagnosis.cpp), where a
// difference sits (check_where.cpp)
// ---------------------------------------------------------------------------------------

// The place of mistake `id` in the catalogue (its size when none).
std::size_t catalogue_index(const std::string& id);
// Every mistake that can happen in this run, with each of its forms.
std::vector<Mutation> mutations(const Run& r);

// The diagnosis of the first divergent stage: the mistakes that reproduce it, or where
// the difference sits.
void diagnose_first(const TraceView& ref, const Problem<double>& problem, const std::map<Stage, Theirs>& given,
                    CheckResult& result);

// Where their stage differs from the reference: how many cells, NaN, a factor or an
// offset, masked cells only, which batch items, heads and rows.
std::vector<Finding> describe(const TraceView& ref, const StageView& s, const Theirs& t, const Dense& r,
                              const Dense& ref_mask);
// Another reading of their array that matches: a transpose, or another axis order.
void describe_orders(const TraceView& ref, const StageView& s, const Theirs& t, const Dense& r,
                     std::vector<Finding>& out);

}  // namespace attnscope::check_detail
