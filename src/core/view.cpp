// TraceView: the stages of a Trace with their shapes, axis names and formulas.
#include "attnscope/base/errors.hpp"
#include "attnscope/core/view.hpp"

#include <algorithm>
#include <cstdio>
#include <sstream>

namespace attnscope {

double StageView::at(std::size_t k) const {
    switch (dtype) {
        case DType::float32: return double(static_cast<const float*>(data)[k]);
        case DType::float64: return static_cast<const double*>(data)[k];
        case DType::boolean: return static_cast<const bool*>(data)[k] ? 1.0 : 0.0;
    }
    return 0;
}

const StageView* TraceView::find(const std::string& name) const {
    for (const auto& s : stages)
        if (s.name == name) return &s;
    return nullptr;
}

const StageView& TraceView::stage(const std::string& name) const {
    if (const StageView* s = find(name)) return *s;
    throw std::logic_error("no stage " + name);
}

void TraceView::require(std::initializer_list<const char*> names, const char* option) const {
    for (const char* n : names)
        if (!find(n)) throw UsageError(std::string(option) + ": needs the stage " + n);
}

std::vector<std::string> parse_stage_list(const std::string& list) {
    std::vector<std::string> out;
    if (list == "none") return out;
    if (list.empty() || list == "all") {
        for (auto n : kStageNames) out.emplace_back(n);
        return out;
    }
    std::stringstream ss(list);
    std::string item;
    while (std::getline(ss, item, ',')) {
        if (std::find(kStageNames.begin(), kStageNames.end(), item) == kStageNames.end()) {
            std::string names;
            for (auto n : kStageNames) names += (names.empty() ? "" : ", ") + std::string(n);
            throw UsageError("--stages: unknown stage '" + item + "' (expected some of: " + names + ")");
        }
        if (std::find(out.begin(), out.end(), item) == out.end()) out.push_back(item);
    }
    // Pipeline order, whatever order they were asked in.
    std::vector<std::string> ordered;
    for (auto n : kStageNames)
        if (std::find(out.begin(), out.end(), n) != out.end()) ordered.emplace_back(n);
    return ordered;
}

template <typename T>
TraceView view_of(const std::string& source, const Problem<T>& p, const Trace<T>& tr) {
    TraceView v;
    v.source = source;
    v.dtype = sizeof(T) == 4 ? "float32" : "float64";
    v.spec = p.spec;
    v.dims = tr.dims;
    v.batched = tr.batched;
    v.cross = p.cross;
    v.has_padding = p.key_padding_mask.has_value();
    if (v.has_padding) v.key_padding.assign(p.key_padding_mask->begin(), p.key_padding_mask->end());
    v.scale = double(tr.scale);
    v.scale_source = p.scale_source;
    v.query_tokens = p.query_tokens;
    v.key_tokens = p.key_tokens;
    v.fully_masked = tr.fully_masked;
    v.warnings = p.warnings;

    const DType dt = sizeof(T) == 4 ? DType::float32 : DType::float64;
    const std::string src = p.cross ? "memory" : "x";
    auto plus = [](const auto& bias, const char* name) { return bias ? std::string(" + ") + name : std::string(); };
    char scale_buf[64];
    std::snprintf(scale_buf, sizeof scale_buf, "%.6g", double(tr.scale));
    std::string mask_words = "true where query i may see key j";
    const std::string causal_rule =
        p.spec.causal_align == CausalAlign::top_left ? "j <= i" : "j <= i + Tk - Tq";
    if (v.has_padding && p.spec.causal) mask_words += " (not PAD, and " + causal_rule + ")";
    else if (v.has_padding) mask_words += " (key j is not PAD)";
    else if (p.spec.causal) mask_words += " (causal: " + causal_rule + ")";
    else mask_words += " (no mask given: all true)";

    auto add = [&](const char* name, std::string formula, std::vector<std::string> axes, const auto& t, DType dtype) {
        if (!tr.kept[stage_index(name)]) return;
        StageView s;
        s.name = name;
        s.formula = std::move(formula);
        s.shape.assign(t.shape().begin(), t.shape().end());
        if (!tr.batched) {  // a 2-D input gives results without the batch axis
            s.shape.erase(s.shape.begin());
            axes.erase(axes.begin());
        }
        s.axes = std::move(axes);
        s.dtype = dtype;
        s.data = t.data();
        v.stages.push_back(std::move(s));
    };
    add("Q", "x · W_Q" + plus(p.b_Q, "b_Q") + ", split into heads", {"B", "H", "Tq", "Dk"}, tr.Q, dt);
    add("K", src + " · W_K" + plus(p.b_K, "b_K") + ", split into heads" +
                 (p.spec.zero_key ? " (key " + std::to_string(*p.spec.zero_key) + " set to 0: --zero-key)" : ""),
        {"B", "H", "Tk", "Dk"}, tr.K, dt);
    add("V", src + " · W_V" + plus(p.b_V, "b_V") + ", split into heads", {"B", "H", "Tk", "Dv"}, tr.V, dt);
    add("scores", "Q · Kᵀ · scale, scale = " + std::string(scale_buf) + " (" + p.scale_source + ")",
        {"B", "H", "Tq", "Tk"}, tr.scores, dt);
    add("mask", mask_words, {"B", "Tq", "Tk"}, tr.mask, DType::boolean);
    add("masked_scores", "scores, -inf where mask is false", {"B", "H", "Tq", "Tk"}, tr.masked(), dt);
    add("weights", "softmax over keys of masked_scores; each row sums to 1",
        {"B", "H", "Tq", "Tk"}, tr.weights, dt);
    add("context", "weights · V: each row a weighted sum of value vectors", {"B", "H", "Tq", "Dv"}, tr.context, dt);
    add("output",
        p.W_O ? "concat(heads) · W_O" + plus(p.b_O, "b_O") : std::string("concat(heads) (no W_O given)"),
        {"B", "Tq", "Dout"}, tr.output, dt);
    return v;
}

template TraceView view_of<float>(const std::string&, const Problem<float>&, const Trace<float>&);
template TraceView view_of<double>(const std::string&, const Problem<double>&, const Trace<double>&);

}  // namespace attnscope
