// attnscope — core: a computed Trace as every later layer sees it, whatever its dtype:
// the stages in pipeline order, each with its axis names, shape, formula and data.
#pragma once

#include <algorithm>
#include <cstddef>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "attnscope/base/dtype.hpp"
#include "attnscope/core/attention.hpp"
#include "attnscope/model/model.hpp"

namespace attnscope {

// One stage as the reports see it: shape and axis names (the batch axis dropped for a
// 2-D input), the formula in words, and a borrowed pointer to its contiguous data.
struct StageView {
    Stage id;
    std::string name;
    std::string formula;
    std::vector<std::string> axes;  // "B", "H", "Tq", ...; "G" for K/V heads fewer than H
    std::size_t group = 1;          // query heads per head of a "G" axis (H / G)
    std::vector<std::size_t> shape;
    DType dtype;
    const void* data;

    double at(std::size_t flat_index) const;
    std::size_t size() const { return element_count(shape); }
};

// Everything a report shows about one run.
struct TraceView {
    std::string source;  // the bundle's file name
    std::string dtype;   // "float32" | "float64"
    Spec spec;
    Dims dims;
    bool batched = true;
    bool cross = false;
    MaskRule mask_rule;  // which keys each query may see (padding, causal): ask it, never recompute it
    double scale = 1;
    std::string scale_source;
    TokenLabels query_tokens, key_tokens;  // (B, Tq), (B, Tk); empty when not given
    std::vector<MaskedRow> fully_masked;
    std::vector<std::string> warnings;
    std::vector<StageView> stages;  // pipeline order
    std::string given_from;         // run --qkv: where Q, K and V came from and in which orders ("" otherwise)
    // What the bundle added, whichever stages were kept: ALiBi's slopes (H; empty without
    // ALiBi), a float attn_mask added to the scores, and the sink logits (H; empty without).
    std::vector<double> alibi_slopes, sinks;
    bool float_mask = false;
    // The run's facts, to ask rather than read from a formula's words: an output projection
    // W_O, its bias b_O (only with W_O), an additive bias (ALiBi and/or a float attn_mask).
    // The softcap is spec.softcap, RoPE spec.rope.
    bool has_out_proj = false, has_out_bias = false;
    bool has_bias() const { return !alibi_slopes.empty() || float_mask; }
    // A selected view (select_view): its batch items and query heads in the run's
    // numbering (empty: all), and the copies its stages point into.
    std::vector<std::size_t> selected_batches, selected_heads;
    std::shared_ptr<const void> owned;

    bool has_padding() const { return mask_rule.has_padding(); }
    const StageView* find(Stage id) const;   // nullptr when absent
    const StageView& stage(Stage id) const;  // std::logic_error when absent
    const StageView* find(const std::string& name) const;
    const StageView& stage(const std::string& name) const;
    // UsageError "{field}: needs the stage NAME" for the first of `needs` not in the view.
    void require(StageSet needs, const char* field) const;
};

// The view borrows from `trace`: keep the trace alive while the view is used.
template <typename T>
TraceView view_of(const std::string& source, const Problem<T>& problem, const Trace<T>& trace);

extern template TraceView view_of<float>(const std::string&, const Problem<float>&, const Trace<float>&);
extern template TraceView view_of<double>(const std::string&, const Problem<double>&, const Trace<double>&);

// The view cut to batch items `batches` and query heads `heads` (either empty: all), in
// the order given, for the outputs that write stages whole (--json, --dump): every stage
// with a B or H axis is copied with only those (a "G" axis keeps the K/V heads the chosen
// heads read); tokens keep the chosen items; dims, the mask rule and fully_masked keep
// the run's numbering (fully_masked only the chosen items' rows). Owns its copies.
TraceView select_view(const TraceView& view, const std::vector<std::size_t>& batches,
                      const std::vector<std::size_t>& heads);

// Checks a comma-separated stage list against the stage table (UsageError naming the
// field {stages} otherwise); "" or "all" means every stage every run has (the classic
// pipeline; a variant's stages are added by the run that has them), "none" no stage (e.g. only
// diagnostics or one cell). Pipeline order, whatever order they were asked in.
std::vector<std::string> parse_stage_list(const std::string& list);

// Whether the stage's matrices differ by head: a head axis ("H", or "G" for K/V heads)
// before its last two axes.
inline bool has_head_axis(const StageView& s) {
    const std::size_t lead = s.axes.size() >= 2 ? s.axes.size() - 2 : 0;
    return std::find(s.axes.begin(), s.axes.begin() + long(lead), "H") != s.axes.begin() + long(lead) ||
           std::find(s.axes.begin(), s.axes.begin() + long(lead), "G") != s.axes.begin() + long(lead);
}

// Offset of matrix (b, h) inside a stage whose last two axes form the matrix; h is a
// query head (a stage with K/V heads gives the matrix of the K/V head h reads).
inline std::size_t matrix_offset(const StageView& s, std::size_t b, std::size_t h) {
    const std::size_t nd = s.shape.size();
    const std::size_t matrix = s.shape[nd - 2] * s.shape[nd - 1];
    const bool has_heads = has_head_axis(s);
    const bool has_batch = !s.axes.empty() && s.axes[0] == "B";
    std::size_t heads = has_heads ? s.shape[has_batch ? 1 : 0] : 1;
    const std::size_t head = !has_heads ? 0 : s.axes[has_batch ? 1 : 0] == "G" ? h / s.group : h;
    return ((has_batch ? b : 0) * heads + head) * matrix;
}

}  // namespace attnscope
