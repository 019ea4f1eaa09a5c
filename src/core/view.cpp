// TraceView: the stages of a Trace with their shapes, axis names and formulas.
#include "attnscope/core/view.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <sstream>

#include "attnscope/base/errors.hpp"
#include "attnscope/base/suggest.hpp"

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
                std::vector<std::string> known;
                for (const StageInfo& s : stage_table()) {
                    names += (names.empty() ? "" : ", ") + std::string(s.name);
                    known.emplace_back(s.name);
                }
                throw UsageError("{stages}: unknown stage '" + item + "'" + did_you_mean(item, known) +
                                 " (expected some of: " + names + ", or all, or none)");
            }
            chosen.set(*id);
        }
    }
    std::vector<std::string> ordered;
    for (Stage id : stages_in(chosen)) ordered.push_back(stage_name(id));
    return ordered;
}

namespace {

// The words after "with " in Q_rot's and K_rot's formulas.
template <typename T>
std::string rope_words(const Problem<T>& p) {
    char base[32];
    std::snprintf(base, sizeof base, "%g", p.spec.rope->base);
    return std::string(p.spec.rope->style == RopeStyle::half ? "pairs (j, j + R/2)" : "pairs (2j, 2j + 1)") +
           " of the first R = " + std::to_string(p.rope_dim) + " features rotated by position · " + base + "^(-2j/R)";
}

// masked_scores' formula: softcap(scores) + bias, -inf where the mask is false.
template <typename T>
std::string masked_words(const Problem<T>& p) {
    std::string logits = "scores";
    if (p.spec.softcap) {
        char cap[32];
        std::snprintf(cap, sizeof cap, "%g", *p.spec.softcap);
        logits = std::string(cap) + " · tanh(scores / " + cap + ")";
    }
    if (p.has_bias()) logits += " + bias";
    return logits + ", -inf where mask is false";
}

// The projections' formulas: given (run --qkv) or x / memory times a weight (+ bias),
// K and V split into K/V heads.
template <typename T>
std::string projection_words(Stage id, const Problem<T>& p, const Dims& d) {
    auto plus = [](const auto& bias, const char* name) { return bias ? std::string(" + ") + name : std::string(); };
    const bool given = p.given_q.has_value();  // run --qkv: Q, K, V read, not projected
    const std::string src = p.cross ? "memory" : "x";
    const std::string kv_split = d.G != d.H
                                     ? ", split into " + std::to_string(d.G) + " K/V head" + (d.G > 1 ? "s" : "") +
                                           ", each serving " + std::to_string(d.group()) + " query heads"
                                     : ", split into heads";
    if (id == kQ)
        return given ? "given (" + p.given_from + "), split into heads"
                     : "x · W_Q" + plus(p.b_Q, "b_Q") + ", split into heads";
    if (id == kK)
        return (given ? std::string("given") : src + " · W_K" + plus(p.b_K, "b_K")) + kv_split +
               (p.spec.zero_key ? " (key " + std::to_string(*p.spec.zero_key) + " set to 0: --zero-key)" : "");
    return (given ? std::string("given") : src + " · W_V" + plus(p.b_V, "b_V")) + kv_split;
}

// Stage id's formula in words, for this run (the one place formulas are written).
template <typename T>
std::string formula_of(Stage id, const Problem<T>& p, const Trace<T>& tr) {
    const bool gqa = tr.dims.G != tr.dims.H, wo = p.W_O.has_value(), bo = wo && p.b_O;
    switch (id) {
        case kQ:
        case kK:
        case kV:
            return projection_words(id, p, tr.dims);
        case kQRot:
            return "Q with " + rope_words(p) + " (RoPE)";
        case kKRot:
            return "K with " + rope_words(p) + " (RoPE)";
        case kScores: {
            char scale[64];
            std::snprintf(scale, sizeof scale, "%.6g", double(tr.scale));
            return std::string(p.rope_dim ? "Q_rot · K_rotᵀ" : "Q · Kᵀ") + " · scale, scale = " + scale + " (" +
                   p.scale_source + ")";
        }
        case kBias:
            return p.alibi_slopes ? std::string("ALiBi: slope m_h · (k_pos(j) - q_pos(i))") +
                                        (p.attn_bias ? " + the float attn_mask" : "")
                                  : std::string(p.attn_bias ? "the float attn_mask" : "");
        case kMask:
            return "true where query i may see key j " + p.mask.words();
        case kMaskedScores:
            return masked_words(p);
        case kWeights:
            return p.sinks ? "softmax over keys of masked_scores, the head's sink joining the denominator"
                           : "softmax over keys of masked_scores; each row sums to 1";
        case kSinkWeight:
            return "exp(sink_h - max) / the row's denominator: 1 - the row's sum of weights";
        case kContext:
            return gqa ? "weights · V of the head's K/V head: each row a weighted sum of value vectors"
                       : "weights · V: each row a weighted sum of value vectors";
        case kHeadOutput:
            return wo ? "context of head h · W_O rows h·Dv..(h+1)·Dv; their sum over heads" +
                            std::string(bo ? " + b_O" : "") + " is output"
                      : "context of head h in its own columns (no W_O given)";
        case kOutput:
            return wo ? "concat(heads) · W_O" + std::string(bo ? " + b_O" : "") : "concat(heads) (no W_O given)";
        case kStageCount:
            break;
    }
    return {};
}

// The view's header: what the run was, whichever stages it kept.
template <typename T>
TraceView header_of(const std::string& source, const Problem<T>& p, const Trace<T>& tr) {
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
    v.given_from = p.given_from;
    if (p.alibi_slopes) v.alibi_slopes.assign(p.alibi_slopes->begin(), p.alibi_slopes->end());
    if (p.sinks) v.sinks.assign(p.sinks->begin(), p.sinks->end());
    v.float_mask = p.attn_bias.has_value();
    v.has_out_proj = p.W_O.has_value();
    v.has_out_bias = p.W_O && p.b_O;
    return v;
}

}  // namespace

template <typename T>
TraceView view_of(const std::string& source, const Problem<T>& p, const Trace<T>& tr) {
    TraceView v = header_of(source, p, tr);
    const DType dt = sizeof(T) == 4 ? DType::float32 : DType::float64;
    auto add = [&](Stage id, const auto& t) {
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
        s.formula = formula_of(id, p, tr);
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
    add(kQ, tr.Q), add(kK, tr.K), add(kV, tr.V), add(kQRot, tr.Q_rot), add(kKRot, tr.K_rot);
    add(kScores, tr.scores), add(kBias, tr.bias), add(kMask, tr.mask), add(kMaskedScores, tr.masked());
    add(kWeights, tr.weights), add(kSinkWeight, tr.sink_weight), add(kContext, tr.context);
    add(kHeadOutput, tr.head_output), add(kOutput, tr.output);
    return v;
}

namespace {

std::vector<std::size_t> all_indices(std::size_t n) {
    std::vector<std::size_t> r(n);
    for (std::size_t k = 0; k < n; ++k) r[k] = k;
    return r;
}

// Per axis of `s`, the indices kept: the chosen ones on B, H and G (a K/V head for each
// chosen query head), every one elsewhere. `last`: the last axis cut (s.shape.size()
// when none is, and the stage is kept as it is).
struct KeptAxes {
    std::vector<std::vector<std::size_t>> keep;
    std::size_t last;
};
KeptAxes kept_axes(const StageView& s, const std::vector<std::size_t>& b_list, const std::vector<std::size_t>& h_list,
                   bool cut_batches, bool cut_heads) {
    KeptAxes k{std::vector<std::vector<std::size_t>>(s.shape.size()), s.shape.size()};
    for (std::size_t a = 0; a < s.shape.size(); ++a) {
        std::vector<std::size_t>& keep = k.keep[a];
        if (s.axes[a] == "B" && cut_batches) {
            keep = b_list;
        } else if (s.axes[a] == "H" && cut_heads) {
            keep = h_list;
        } else if (s.axes[a] == "G" && cut_heads) {
            for (std::size_t h : h_list)
                if (std::find(keep.begin(), keep.end(), h / s.group) == keep.end()) keep.push_back(h / s.group);
        } else {
            keep = all_indices(s.shape[a]);
            continue;
        }
        k.last = a;
    }
    return k;
}

// The kept part of `s` (k.last < its rank): the contiguous blocks below the last axis cut,
// copied in C order; `shape` becomes the kept extents.
std::vector<unsigned char> copy_kept(const StageView& s, const KeptAxes& k, std::vector<std::size_t>& shape) {
    const std::size_t last = k.last;
    std::size_t block = dtype_size(s.dtype);
    for (std::size_t a = last + 1; a < s.shape.size(); ++a) block *= s.shape[a];
    shape.assign(s.shape.size(), 0);
    std::size_t blocks = 1;
    for (std::size_t a = 0; a < s.shape.size(); ++a) shape[a] = k.keep[a].size();
    for (std::size_t a = 0; a <= last; ++a) blocks *= shape[a];
    std::vector<unsigned char> data(blocks * block);
    std::vector<std::size_t> idx(last + 1, 0);
    const auto* from = static_cast<const unsigned char*>(s.data);
    for (std::size_t b = 0; b < blocks; ++b) {
        std::size_t offset = 0;  // block index in the source
        for (std::size_t a = 0; a <= last; ++a) offset = offset * s.shape[a] + k.keep[a][idx[a]];
        if (block) std::memcpy(data.data() + b * block, from + offset * block, block);
        for (std::size_t a = last + 1; a-- > 0;) {
            if (++idx[a] < shape[a]) break;
            idx[a] = 0;
        }
    }
    return data;
}

// The tokens of the chosen batch items, and the fully masked rows among them.
void select_items(const TraceView& v, const std::vector<std::size_t>& b_list, TraceView& out) {
    const auto pick = [&b_list](const TokenLabels& t) {
        if (t.empty()) return t;
        std::vector<std::vector<std::string>> lists;
        for (std::size_t b : b_list) lists.push_back(t[b]);
        return TokenLabels::per_item(std::move(lists));
    };
    out.query_tokens = pick(v.query_tokens);
    out.key_tokens = pick(v.key_tokens);
    out.fully_masked.clear();
    for (const MaskedRow& r : v.fully_masked)
        if (std::find(b_list.begin(), b_list.end(), r.batch) != b_list.end()) out.fully_masked.push_back(r);
}

}  // namespace

TraceView select_view(const TraceView& v, const std::vector<std::size_t>& batches,
                      const std::vector<std::size_t>& heads) {
    TraceView out = v;
    out.selected_batches = batches;
    out.selected_heads = heads;
    if (batches.empty() && heads.empty()) return out;
    const auto b_list = batches.empty() ? all_indices(v.dims.B) : batches;
    const auto h_list = heads.empty() ? all_indices(v.dims.H) : heads;
    auto store = std::make_shared<std::vector<std::vector<unsigned char>>>();
    store->reserve(v.stages.size());
    for (StageView& s : out.stages) {
        // 1) Per axis the indices kept; 2) the kept blocks copied, when an axis is cut.
        const KeptAxes k = kept_axes(s, b_list, h_list, !batches.empty(), !heads.empty());
        if (k.last == s.shape.size()) continue;
        std::vector<std::size_t> shape;
        store->push_back(copy_kept(s, k, shape));
        s.shape = std::move(shape);
        s.data = store->back().data();
    }
    // 3) Tokens of the chosen items; the fully masked rows among them.
    if (!batches.empty()) select_items(v, b_list, out);
    out.owned = store;
    return out;
}

template TraceView view_of<float>(const std::string&, const Problem<float>&, const Trace<float>&);
template TraceView view_of<double>(const std::string&, const Problem<double>&, const Trace<double>&);

}  // namespace attnscope
