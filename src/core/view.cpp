// TraceView: the stages of a Trace with their shapes, axis names and formulas.
#include "attnscope/core/view.hpp"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "attnscope/base/errors.hpp"

namespace attnscope {

double StageView::at(std::size_t k) const {
    switch (dtype) {
        case DType::float32:
            return double(static_cast<const float*>(data)[k]);
        case DType::float64:
            return static_cast<const double*>(data)[k];
        case DType::boolean:
            return static_cast<const bool*>(data)[k] ? 1.0 : 0.0;
    }
    return 0;
}

const StageView* TraceView::find(Stage id) const {
    for (const auto& s : stages)
        if (s.id == id) return &s;
    return nullptr;
}

const StageView& TraceView::stage(Stage id) const {
    if (const StageView* s = find(id)) return *s;
    throw std::logic_error("no stage " + stage_name(id));
}

const StageView* TraceView::find(const std::string& name) const {
    const auto id = find_stage(name);
    return id ? find(*id) : nullptr;
}

const StageView& TraceView::stage(const std::string& name) const {
    if (const StageView* s = find(name)) return *s;
    throw std::logic_error("no stage " + name);
}

void TraceView::require(StageSet needs, const char* field) const {
    for (Stage id : stages_in(needs))
        if (!find(id)) throw UsageError("{" + std::string(field) + "}: needs the stage " + stage_name(id));
}

std::vector<std::string> parse_stage_list(const std::string& list) {
    StageSet chosen;
    if (list == "none") return {};
    if (list.empty() || list == "all") {
        chosen = all_stages();
    } else {
        std::stringstream ss(list);
        std::string item;
        while (std::getline(ss, item, ',')) {
            const auto id = find_stage(item);
            if (!id) {
                std::string names;
                for (const StageInfo& s : stage_table()) names += (names.empty() ? "" : ", ") + std::string(s.name);
                throw UsageError("{stages}: unknown stage '" + item + "' (expected some of: " + names + ")");
            }
            chosen.set(*id);
        }
    }
    std::vector<std::string> ordered;
    for (Stage id : stages_in(chosen)) ordered.push_back(stage_name(id));
    return ordered;
}

namespace {

// The mask rule in words, for the mask stage's formula.
std::string mask_rule_words(const MaskRule& m) {
    if (m.has_padding() && m.causal()) return "(not PAD, and " + m.causal_rule() + ")";
    if (m.has_padding()) return "(key j is not PAD)";
    if (m.causal()) return "(causal: " + m.causal_rule() + ")";
    return "(no mask given: all true)";
}

}  // namespace

template <typename T>
TraceView view_of(const std::string& source, const Problem<T>& p, const Trace<T>& tr) {
    TraceView v;
    v.source = source;
    v.dtype = sizeof(T) == 4 ? "float32" : "float64";
    v.spec = p.spec;
    v.dims = tr.dims;
    v.batched = tr.batched;
    v.cross = p.cross;
    v.mask_rule = p.mask;
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
    const std::string mask_words = "true where query i may see key j " + mask_rule_words(p.mask);

    auto add = [&](Stage id, std::string formula, const auto& t) {
        if (!tr.kept[id]) return;
        const StageInfo& info = stage_info(id);
        std::vector<std::string> axes(info.axes.begin(), info.axes.begin() + long(info.rank));
        StageView s;
        s.id = id;
        s.name = info.name;
        s.formula = std::move(formula);
        s.shape.assign(t.shape().begin(), t.shape().end());
        if (!tr.batched) {  // a 2-D input gives results without the batch axis
            s.shape.erase(s.shape.begin());
            axes.erase(axes.begin());
        }
        s.axes = std::move(axes);
        s.dtype = info.value == ValueKind::boolean ? DType::boolean : dt;
        s.data = t.data();
        v.stages.push_back(std::move(s));
    };
    add(kQ, "x · W_Q" + plus(p.b_Q, "b_Q") + ", split into heads", tr.Q);
    add(kK,
        src + " · W_K" + plus(p.b_K, "b_K") + ", split into heads" +
            (p.spec.zero_key ? " (key " + std::to_string(*p.spec.zero_key) + " set to 0: --zero-key)" : ""),
        tr.K);
    add(kV, src + " · W_V" + plus(p.b_V, "b_V") + ", split into heads", tr.V);
    add(kScores, "Q · Kᵀ · scale, scale = " + std::string(scale_buf) + " (" + p.scale_source + ")", tr.scores);
    add(kMask, mask_words, tr.mask);
    add(kMaskedScores, "scores, -inf where mask is false", tr.masked());
    add(kWeights, "softmax over keys of masked_scores; each row sums to 1", tr.weights);
    add(kContext, "weights · V: each row a weighted sum of value vectors", tr.context);
    add(kOutput, p.W_O ? "concat(heads) · W_O" + plus(p.b_O, "b_O") : std::string("concat(heads) (no W_O given)"),
        tr.output);
    return v;
}

template TraceView view_of<float>(const std::string&, const Problem<float>&, const Trace<float>&);
template TraceView view_of<double>(const std::string&, const Problem<double>&, const Trace<double>&);

}  // namespace attnscope
