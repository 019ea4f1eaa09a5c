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
        case DType::int64:
            return double(static_cast<const std::int64_t*>(data)[k]);
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
        chosen = classic_stages();  // the stages every run has
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
    const std::string mask_words = "true where query i may see key j " + p.mask.words();

    auto add = [&](Stage id, std::string formula, const auto& t) {
        if (!tr.kept[id]) return;
        const StageInfo& info = stage_info(id);
        std::vector<std::string> axes(info.axes.begin(), info.axes.begin() + long(info.rank));
        StageView s;
        // K/V heads are an axis of their own only when fewer than the query heads.
        for (auto& a : axes)
            if (a == "G" && tr.dims.G == tr.dims.H) a = "H";
        s.group = tr.dims.group();
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
    const Dims& d = tr.dims;
    const bool gqa = d.G != d.H;
    const std::string kv_split = gqa ? ", split into " + std::to_string(d.G) + " K/V head" + (d.G > 1 ? "s" : "") +
                                           ", each serving " + std::to_string(d.group()) + " query heads"
                                     : ", split into heads";
    add(kQ, "x · W_Q" + plus(p.b_Q, "b_Q") + ", split into heads", tr.Q);
    add(kK,
        src + " · W_K" + plus(p.b_K, "b_K") + kv_split +
            (p.spec.zero_key ? " (key " + std::to_string(*p.spec.zero_key) + " set to 0: --zero-key)" : ""),
        tr.K);
    add(kV, src + " · W_V" + plus(p.b_V, "b_V") + kv_split, tr.V);
    std::string rope_words;
    if (p.rope_dim) {
        char base[32];
        std::snprintf(base, sizeof base, "%g", p.spec.rope->base);
        rope_words = std::string(p.spec.rope->style == RopeStyle::half ? "pairs (j, j + R/2)" : "pairs (2j, 2j + 1)") +
                     " of the first R = " + std::to_string(p.rope_dim) + " features rotated by position · " + base +
                     "^(-2j/R)";
    }
    add(kQRot, "Q with " + rope_words + " (RoPE)", tr.Q_rot);
    add(kKRot, "K with " + rope_words + " (RoPE)", tr.K_rot);
    add(kScores,
        std::string(p.rope_dim ? "Q_rot · K_rotᵀ" : "Q · Kᵀ") + " · scale, scale = " + scale_buf + " (" +
            p.scale_source + ")",
        tr.scores);
    std::string bias_words;
    if (p.alibi_slopes) bias_words = "ALiBi: slope m_h · (k_pos(j) - q_pos(i))";
    if (p.attn_bias) bias_words += std::string(bias_words.empty() ? "" : " + ") + "the float attn_mask";
    add(kBias, bias_words, tr.bias);
    add(kMask, mask_words, tr.mask);
    std::string logits = "scores";
    if (p.spec.softcap) {
        char cap[32];
        std::snprintf(cap, sizeof cap, "%g", *p.spec.softcap);
        logits = std::string(cap) + " · tanh(scores / " + cap + ")";
    }
    if (p.has_bias()) logits += " + bias";
    add(kMaskedScores, logits + ", -inf where mask is false", tr.masked());
    add(kWeights,
        p.sinks ? std::string("softmax over keys of masked_scores, the head's sink joining the denominator")
                : std::string("softmax over keys of masked_scores; each row sums to 1"),
        tr.weights);
    add(kSinkWeight, "exp(sink_h - max) / the row's denominator: 1 - the row's sum of weights", tr.sink_weight);
    add(kContext,
        gqa ? "weights · V of the head's K/V head: each row a weighted sum of value vectors"
            : "weights · V: each row a weighted sum of value vectors",
        tr.context);
    add(kHeadOutput,
        p.W_O ? "context of head h · W_O rows h·Dv..(h+1)·Dv; their sum over heads" + plus(p.b_O, "b_O") + " is output"
              : std::string("context of head h in its own columns (no W_O given)"),
        tr.head_output);
    add(kOutput, p.W_O ? "concat(heads) · W_O" + plus(p.b_O, "b_O") : std::string("concat(heads) (no W_O given)"),
        tr.output);
    return v;
}

template TraceView view_of<float>(const std::string&, const Problem<float>&, const Trace<float>&);
template TraceView view_of<double>(const std::string&, const Problem<double>&, const Trace<double>&);

}  // namespace attnscope
