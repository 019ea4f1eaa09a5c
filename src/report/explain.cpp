// --explain: each stage narrated as a lecture would, with the real shapes and numbers.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "attnscope/report/report.hpp"
#include "text_util.hpp"

namespace attnscope {
namespace {

using namespace text;

std::string tuple(std::initializer_list<std::size_t> dims) {
    std::string s = "(";
    for (std::size_t d : dims) s += (s.size() > 1 ? ", " : "") + std::to_string(d);
    return s + ")";
}

std::string num(double v) { return short_num(v); }

// Range [min, max] of the finite values of a stage.
std::pair<double, double> finite_range(const StageView& s) {
    double lo = std::numeric_limits<double>::infinity(), hi = -lo;
    for (std::size_t k = 0; k < s.size(); ++k) {
        double x = s.at(k);
        if (std::isfinite(x)) lo = std::min(lo, x), hi = std::max(hi, x);
    }
    return {lo, hi};
}

// A shape of the run written with its sizes, the batch size first when x is batched:
// shape(v, {Tq, Dk}) is "(2, 6, 4)" or "(6, 4)".
std::string shape(const TraceView& v, std::initializer_list<std::size_t> rest) {
    const std::string t = tuple(rest);
    return v.batched ? "(" + std::to_string(v.dims.B) + ", " + t.substr(1) : t;
}

// Q, K, V: the projection, the head split, and what queries, keys and values are for.
// K and V split into G K/V heads when fewer than the query heads (grouped-query attention).
std::vector<std::string> explain_projection(const TraceView& v, const StageView& s) {
    const Dims& d = v.dims;
    const std::string src = v.cross ? "memory" : "x";
    const bool q = s.id == kQ, is_v = s.id == kV;
    const std::size_t T = q ? d.Tq : d.Tk, in = q ? d.Dm : d.Dkv, D = is_v ? d.Dv : d.Dk;
    const bool grouped = !q && variants_of(v).gqa;
    const std::size_t heads = grouped ? d.G : d.H;
    std::vector<std::string> L;
    if (!v.given_from.empty())  // run --qkv
        L.push_back(s.name + " is given, not computed: " + v.given_from +
                    ". The run starts here (no x, no weights); laid out as " + shape(v, {T, heads * D}) +
                    " (feature h*" + std::to_string(D) + " + j of head h), then split into " +
                    (grouped ? "G = " + std::to_string(d.G) + " K/V heads" : "H = " + std::to_string(d.H) + " heads") +
                    " -> " + shape(v, {heads, T, D}) + ".");
    else
        L.push_back(s.name + " = " + (q ? "x" : src) + " · W_" + s.name + ": " + shape(v, {T, in}) + " @ " +
                    tuple({in, heads * D}) + " -> " + shape(v, {T, heads * D}) + ", then split into " +
                    (grouped ? "G = " + std::to_string(d.G) + " K/V heads" : "H = " + std::to_string(d.H) + " heads") +
                    " of " + (is_v ? "Dv" : "Dk") + " = " + std::to_string(D) + " columns (feature h*" +
                    std::to_string(D) + " + j belongs to head h) -> " + shape(v, {heads, T, D}) + ".");
    if (grouped)
        L.push_back("Grouped-query attention: the " + std::to_string(d.H) + " query heads share " +
                    std::to_string(d.G) + " K/V head" + (d.G > 1 ? "s" : "") +
                    "; query head h reads K/V head g = h / (H/G) = h / " + std::to_string(d.group()) + ": " +
                    sharing_line(d) + ". " + s.name + " is " + std::to_string(d.H / d.G) +
                    " times smaller than with a K/V head per query head.");
    if (q) L.push_back("Each query row is what that position is looking for.");
    if (s.id == kK)
        L.push_back(
            std::string("Keys come from ") +
            (v.cross ? "the encoder memory (cross-attention)." : "the same sequence as the queries (self-attention).") +
            " A key is an address for matching: keys only shape the weights.");
    if (is_v) L.push_back("A value is the payload: the output is a weighted sum of value rows, never of keys.");
    return L;
}

// Q_rot, K_rot: RoPE's pairs, their angles, and one pair of the run rotated.
std::vector<std::string> explain_rope(const TraceView& v, const StageView& s) {
    const Dims& d = v.dims;
    const Rope& rope = *v.spec.rope;
    const bool q = s.id == kQRot, half = rope.style == RopeStyle::half;
    const std::size_t R = rope.dim.value_or(d.Dk), D = d.Dk;
    std::vector<std::string> L;
    L.push_back(s.name + " = " + (q ? "Q" : "K") + " rotated by position (RoPE): in each head's first R = " +
                std::to_string(R) + " of Dk = " + std::to_string(D) + " features, " +
                (half ? "feature j pairs with j + R/2 (rotate_half, Llama)" : "feature 2j pairs with 2j + 1 (GPT-J)") +
                ", and pair j turns by the angle pos · " + option_num(rope.base) +
                "^(-2j/R): (a, b) -> (a cos - b sin, b cos + a sin)." +
                (R < D ? " Features " + std::to_string(R) + ".." + std::to_string(D - 1) + " pass through." : ""));
    // One pair of the run: the second position (the first turns by 0), head 0, pair 0.
    const StageView* before = v.find(q ? kQ : kK);
    const std::size_t T = q ? d.Tq : d.Tk, t = T > 1 ? 1 : 0;
    if (before && R >= 2) {
        const long long pos = q ? v.mask_rule.query_position(0, t) : v.mask_rule.key_position(0, t);
        const std::size_t a = 0, b = half ? R / 2 : 1;
        const std::size_t o = matrix_offset(s, 0, 0) + t * D, ob = matrix_offset(*before, 0, 0) + t * D;
        const double angle = double(pos) * std::pow(rope.base, 0.0);
        L.push_back(std::string("E.g. ") + (v.batched ? "batch 0, " : "") + (q ? "query " : "key ") +
                    std::to_string(t) + " '" + clip_label(axis_label(v, q ? "Tq" : "Tk", 0, t)) + "' at position " +
                    std::to_string(pos) + ", head 0, pair (d" + std::to_string(a) + ", d" + std::to_string(b) +
                    "): angle " + std::to_string(pos) + " · 1 = " + num(angle) + " rad, (" + num(before->at(ob + a)) +
                    ", " + num(before->at(ob + b)) + ") -> (" + num(s.at(o + a)) + ", " + num(s.at(o + b)) + ").");
    }
    if (q)
        L.push_back(
            "Rotating both queries and keys by their positions makes q · k depend on the positions only "
            "through k_pos - q_pos: the scores see relative positions.");
    return L;
}

// The key_padding_mask that hides key J besides the run's own padding, as JSON ((Tk,), or
// (B, Tk) for a batched x); empty when too long to type.
std::string mask_hiding(const TraceView& v, std::size_t J) {
    const std::size_t Tk = v.dims.source_keys();
    if (Tk > 24 || v.dims.B > 4) return {};
    const auto& pad = v.mask_rule.key_padding();
    std::string rows;
    for (std::size_t b = 0; b < (v.batched ? v.dims.B : 1); ++b) {
        std::string row = "[";
        for (std::size_t j = 0; j < Tk; ++j)
            row += std::string(j ? ", " : "") + (j == J || (pad && (*pad)(b, j)) ? "1" : "0");
        rows += (b ? ", " : "") + row + "]";
    }
    return v.batched ? "[" + rows + "]" : rows;
}

// One row of the run with key J visible worked out: its logit, the row's max and sum, its weight.
std::string zeroed_row(const TraceView& v, std::size_t J) {
    const StageView *m = v.find(kMaskedScores), *w = v.find(kWeights);
    if (!m || !w || J >= v.dims.Tk) return {};
    for (std::size_t i = 0; i < v.dims.Tq; ++i) {
        if (!sees(v, 0, 0, i, J)) continue;
        const RowMax r = row_max(*m, 0, 0, i);
        const double mJ = at_bhij(*m, 0, 0, i, J), e = std::exp(mJ - r.max);
        return std::string("E.g. ") + (v.batched ? "batch 0, " : "") + "head 0, query " + std::to_string(i) + " '" +
               clip_label(axis_label(v, "Tq", 0, i)) + "': m_iJ = " + num(mJ) + ", the row's max " + num(r.max) +
               " (key " + std::to_string(r.arg) + " '" + clip_label(axis_label(v, "Tk", 0, r.arg)) +
               "'), sum_j exp(m_ij - max) = " + num(r.sum) + ": w_iJ = exp(" + num(mJ) + " - " + num(r.max) + ") / " +
               num(r.sum) + " = " + num(e / r.sum) + " (stored " + num(at_bhij(*w, 0, 0, i, J)) + "), not 0.";
    }
    return "Every query has key " + std::to_string(J) + " masked already: its weights are 0 by the mask.";
}

}  // namespace

std::vector<std::string> zero_key_story(const TraceView& v) {
    if (!v.spec.zero_key) return {};
    const std::size_t J = *v.spec.zero_key;
    const std::string key = "key " + std::to_string(J) + " '" + clip_label(axis_label(v, "Tk", 0, J)) + "'";
    std::vector<std::string> L;
    L.push_back(key + " is the zero vector, so its score column is q_i · 0 = 0 for every query and head" +
                (variants_of(v).bias ? " (plus the bias)" : "") +
                "; its weights are exp(0 - max_j m_ij) / sum_j exp(m_ij - max_j m_ij), not 0: a score of 0 still "
                "competes with the others.");
    if (std::string row = zeroed_row(v, J); !row.empty()) L.push_back(row);
    L.push_back("Masking " + key +
                " instead makes its scores -inf: exp(-inf) = 0, its weights are exactly 0 and the other keys share "
                "the whole row.");
    const std::string mask = mask_hiding(v, J), file = "mask" + std::to_string(J) + ".json";
    L.push_back(mask.empty()
                    ? "To try it: a key_padding_mask file with 1 at key " + std::to_string(J) +
                          " (--key_padding_mask FILE) in place of --zero-key " + std::to_string(J) + "."
                    : "To try it: echo '" + mask + "' > " + file + ", then the same command with --key_padding_mask " +
                          file + " in place of --zero-key " + std::to_string(J) + ".");
    return L;
}

namespace {

// scores: the product per head and for all heads, the shared width, the scale and the range.
std::vector<std::string> explain_scores(const TraceView& v, const StageView& s) {
    const Dims& d = v.dims;
    std::vector<std::string> L;
    const bool rope = variants_of(v).rope;
    L.push_back(std::string(rope ? "scores = Q_rot · K_rotᵀ" : "scores = Q · Kᵀ") + ": per head " +
                tuple({d.Tq, d.Dk}) + " @ " + tuple({d.Dk, d.Tk}) + " -> " + tuple({d.Tq, d.Tk}) + "; all heads " +
                shape(v, {d.H, d.Tq, d.Dk}) + " @ " + shape(v, {d.H, d.Dk, d.Tk}) + " -> " +
                shape(v, {d.H, d.Tq, d.Tk}) + ": one row per query, one column per key.");
    if (variants_of(v).gqa)
        L.push_back("Query head h is matched against the keys of K/V head h / " + std::to_string(d.group()) + " (" +
                    sharing_line(d) + "); the shared keys are read in place, never copied.");
    L.push_back("Queries and keys share one width, Dk = " + std::to_string(d.Dk) +
                ", so each score is a dot product q_i · k_j.");
    auto [lo, hi] = finite_range(s);
    std::string before = "unknown (the scale is 0)";
    if (v.scale != 0) {
        const double a = lo / v.scale, b = hi / v.scale;  // a negative scale swaps the ends
        before = "[" + num(std::min(a, b)) + ", " + num(std::max(a, b)) + "]";
    }
    L.push_back("Scaled by " + num(v.scale) + " = " + v.scale_source +
                " (dividing by sqrt(Dk) keeps scores from growing " + "with width). Range before scaling " + before +
                ", after [" + num(lo) + ", " + num(hi) + "].");
    return L;
}

// Up to 8 numbers "[0, 1, 2, …]" of positions along an axis of batch item 0.
std::string position_list(const TraceView& v, bool queries) {
    const std::size_t n = queries ? v.dims.Tq : v.dims.Tk;
    std::string s = "[";
    for (std::size_t k = 0; k < n && k < 8; ++k)
        s += (k ? ", " : "") +
             std::to_string(queries ? v.mask_rule.query_position(0, k) : v.mask_rule.key_position(0, k));
    return s + (n > 8 ? ", …]" : "]");
}

// The window's rule in words with one query row of the run as the example.
std::string window_example(const TraceView& v) {
    const std::string W = std::to_string(*v.mask_rule.window());
    const std::size_t i = v.dims.Tq - 1;
    std::string seen;
    for (std::size_t j = 0; j < v.dims.Tk; ++j)
        if (v.mask_rule.visible(0, i, j)) seen += (seen.empty() ? "" : ", ") + std::to_string(j);
    return "Sliding window W = " + W + ": " +
           (v.mask_rule.causal() ? "query i sees only the " + W + " latest keys, q_pos - " + W + " < k_pos <= q_pos"
                                 : "query i sees key j only when |q_pos - k_pos| < " + W) +
           ". E.g. " + (v.batched ? "batch 0, " : "") + "query " + std::to_string(i) + " '" +
           clip_label(axis_label(v, "Tq", 0, i)) + "' at q_pos " + std::to_string(v.mask_rule.query_position(0, i)) +
           " sees keys " + (seen.empty() ? "none" : seen) + " of " + std::to_string(v.dims.Tk) + ".";
}

// mask: where it comes from, how many pairs it hides, its polarity and alignment.
std::vector<std::string> explain_mask(const TraceView& v, const StageView& s) {
    const Dims& d = v.dims;
    const Variants r = variants_of(v);
    std::vector<std::string> L;
    std::size_t visible = 0;
    for (std::size_t k = 0; k < s.size(); ++k) visible += s.at(k) != 0;
    std::string what;
    for (const auto& [on, part] : {std::pair{v.has_padding(), "key padding"},
                                   {v.mask_rule.causal(), "causal"},
                                   {r.window, "a sliding window"},
                                   {r.bool_mask, "a boolean attn_mask"}})
        if (on) what += (what.empty() ? "" : " AND ") + std::string(part);
    L.push_back("mask: true where query i may see key j; from " + (what.empty() ? "nothing (no mask given)" : what) +
                ". " + std::to_string(visible) + " of " + std::to_string(s.size()) +
                " (query, key) pairs are visible, " + std::to_string(s.size() - visible) + " hidden.");
    if (v.has_padding())
        L.push_back("key_padding_mask marks PAD keys with 1; the mask shown here is the opposite (1 = may attend).");
    if (r.positions)
        L.push_back("Positions come from the bundle: q_pos = " + position_list(v, true) +
                    ", k_pos = " + position_list(v, false) + (v.batched ? " (batch 0)." : "."));
    else if (!positions_words(v).empty() && !v.mask_rule.causal())
        L.push_back("The " + positions_words(v) + ".");
    if (v.mask_rule.causal()) {
        if (r.positions)
            L.push_back("Causal: query i sees the keys with k_pos(j) <= q_pos(i), only the past.");
        else
            L.push_back(v.spec.causal_align == CausalAlign::top_left
                            ? "Causal, top-left: query i sees keys j <= i, only the past (a decoder)."
                            : "Causal, bottom-right: query i sits at position i + Tk - Tq = i + " +
                                  std::to_string((long long)d.Tk - (long long)d.Tq) + " and sees keys up to there.");
    }
    if (r.window) L.push_back(window_example(v));
    if (r.bool_mask)
        L.push_back(std::string("A boolean attn_mask, read as ") +
                    (v.spec.attn_mask_means == MaskMeans::block ? "true = blocked (--attn-mask-means block, "
                                                                  "nn.MultiheadAttention)"
                                                                : "true = may attend (--attn-mask-means allow, "
                                                                  "scaled_dot_product_attention)") +
                    ": a pair it blocks is hidden whatever the other masks say.");
    if (const StageView* bias = v.find(kBias)) {
        std::size_t hidden = 0;
        for (std::size_t k = 0; k < bias->size(); ++k)
            hidden += bias->at(k) == -std::numeric_limits<double>::infinity();
        if (hidden)
            L.push_back(
                "A -inf in the bias hides a key too: " + std::to_string(hidden) +
                " (head, query, key) cells of the bias are -inf; this mask shows them true, masked_scores -inf.");
    }
    if (!v.fully_masked.empty())
        L.push_back(std::to_string(v.fully_masked.size()) +
                    " query row(s) see no key at all; their weights will be all 0" +
                    (r.sinks ? " (the sink takes the whole row)." : "."));
    return L;
}

// bias: ALiBi's slopes with one cell worked out, and/or the float attn_mask.
std::vector<std::string> explain_bias(const TraceView& v, const StageView& s) {
    const Dims& d = v.dims;
    const Variants r = variants_of(v);
    std::vector<std::string> L;
    L.push_back("bias: an additive term per (head, query, key), added to the scores before the softmax: " +
                shape(v, {d.H, d.Tq, d.Tk}) + ". A lower bias lowers the key's weight; -inf hides it.");
    if (r.alibi) {
        std::string slopes;
        for (std::size_t h = 0; h < d.H && h < 8; ++h)
            if (const auto m = alibi_slope(v, h))
                slopes += (slopes.empty() ? "" : ", ") + std::string("m_") + std::to_string(h) + " = " + num(*m);
        L.push_back(
            "ALiBi: bias = m_h · (k_pos - q_pos), a fixed slope per head (2^(-8(h+1)/H) unless the bundle gives "
            "alibi_slopes): a key k_pos - q_pos positions away loses m_h per position, no position embedding "
            "needed." +
            (slopes.empty() ? std::string() : " Slopes: " + slopes + (d.H > 8 ? ", …" : "") + "."));
        const std::size_t i = d.Tq - 1, j = 0;
        if (const auto m = alibi_slope(v, 0)) {
            const long long qp = v.mask_rule.query_position(0, i), kp = v.mask_rule.key_position(0, j);
            L.push_back(std::string("E.g. ") + (v.batched ? "batch 0, " : "") + "head 0, query " + std::to_string(i) +
                        " (q_pos " + std::to_string(qp) + "), key " + std::to_string(j) + " (k_pos " +
                        std::to_string(kp) + "): " + num(*m) + " · (" + std::to_string(kp) + " - " +
                        std::to_string(qp) + ") = " + num(*m * double(kp - qp)) + "; stored " +
                        num(at_bhij(s, 0, 0, i, j)) + ".");
        }
    }
    if (r.float_mask) {
        std::size_t hidden = 0;
        double lo = std::numeric_limits<double>::infinity(), hi = -lo;
        for (std::size_t k = 0; k < s.size(); ++k) {
            const double x = s.at(k);
            if (x == -std::numeric_limits<double>::infinity()) ++hidden;
            if (std::isfinite(x)) lo = std::min(lo, x), hi = std::max(hi, x);
        }
        L.push_back(std::string(r.alibi ? "Plus the float attn_mask" : "The float attn_mask") +
                    ", added as it is (PyTorch broadcasts its (Tq, Tk), (B or H, Tq, Tk) or (B, H, Tq, Tk) shape): " +
                    std::to_string(hidden) + " of " + std::to_string(s.size()) + " cells are -inf (their keys hidden)" +
                    (lo <= hi ? ", the finite ones in [" + num(lo) + ", " + num(hi) + "]." : "."));
    }
    return L;
}

// masked_scores: softcap and bias when the run has them, then -inf where hidden.
std::vector<std::string> explain_masked(const TraceView& v) {
    const Variants r = variants_of(v);
    std::vector<std::string> L;
    if (r.softcap) {
        const double C = *v.spec.softcap;
        std::string example;
        if (const StageView* s = v.find(kScores)) {
            double big = 0;
            for (std::size_t k = 0; k < s->size(); ++k)
                if (std::isfinite(s->at(k)) && std::fabs(s->at(k)) > std::fabs(big)) big = s->at(k);
            example = " E.g. the score farthest from 0, " + num(big) + " -> " + num(C) + " · tanh(" + num(big) + " / " +
                      num(C) + ") = " + num(C * std::tanh(big / C)) + ".";
        }
        L.push_back("Soft-capping first: s -> C · tanh(s / C), C = " + num(C) +
                    ", squashes every score into (-C, C) and leaves small ones almost unchanged (Gemma 2)." + example);
    }
    if (r.bias)
        L.push_back(std::string("Then the bias is added: ") + (r.softcap ? "softcap(scores)" : "scores") + " + bias.");
    L.push_back(std::string("masked_scores: the ") + (r.softcap || r.bias ? "result" : "scores") +
                " with -inf wherever the mask is false" + (r.bias ? " (or the bias is -inf)" : "") +
                ". exp(-inf) = 0, so those keys get a weight of exactly 0, whatever their score was.");
    return L;
}

// The smallest and largest row sum of the weights.
std::pair<double, double> row_sums(const TraceView& v, const StageView& w) {
    double lo = std::numeric_limits<double>::infinity(), hi = -lo;
    const std::size_t Tk = v.dims.Tk;
    for (std::size_t k = 0; k + Tk <= w.size(); k += Tk) {
        double sum = 0;
        for (std::size_t j = 0; j < Tk; ++j) sum += w.at(k + j);
        lo = std::min(lo, sum), hi = std::max(hi, sum);
    }
    return {lo, hi};
}

std::vector<std::string> explain_softmax(const TraceView& v, const StageView& s);

// weights: the softmax, then what --zero-key did.
std::vector<std::string> explain_weights(const TraceView& v, const StageView& s) {
    std::vector<std::string> L = explain_softmax(v, s);
    for (auto& line : zero_key_story(v)) L.push_back(std::move(line));
    return L;
}

// weights: softmax along each row, and why the row maximum is subtracted; the sink.
std::vector<std::string> explain_softmax(const TraceView& v, const StageView& s) {
    if (!variants_of(v).sinks)
        return {"weights = softmax over the key axis (along each row of " + std::to_string(v.dims.Tk) +
                    " keys, not over values): w_ij = exp(m_ij - max_j m_ij) / sum_j exp(m_ij - max_j m_ij).",
                "Subtracting the row maximum changes nothing mathematically and keeps exp from overflowing. Each row "
                "sums to 1; a row with every key masked is all 0 (not NaN)."};
    const auto [lo, hi] = row_sums(v, s);
    return {
        "weights = softmax over the key axis with a sink: the head's sink logit s_h joins the denominator and "
        "nothing else, w_ij = exp(m_ij - M) / (sum_j exp(m_ij - M) + exp(s_h - M)), M = max(max_j m_ij, s_h).",
        "The sink takes sink_weight of each row, so a row sums to 1 - sink_weight (here from " + num(lo) + " to " +
            num(hi) + "): a head can attend to nothing. A row with every key masked is all 0 and its sink_weight 1."};
}

// sink_weight: the sink's share, the logits read back, one row worked out.
std::vector<std::string> explain_sink(const TraceView& v, const StageView& s) {
    std::vector<std::string> L;
    double lo = std::numeric_limits<double>::infinity(), hi = -lo;
    for (std::size_t k = 0; k < s.size(); ++k) lo = std::min(lo, s.at(k)), hi = std::max(hi, s.at(k));
    L.push_back(
        "sink_weight = exp(s_h - M) / (sum_j exp(m_ij - M) + exp(s_h - M)): the share of each row of "
        "weights that goes to no key (an attention sink, gpt-oss); 1 - sink_weight is what the keys share. "
        "Range [" +
        num(lo) + ", " + num(hi) + "].");
    std::string logits;
    for (std::size_t h = 0; h < v.dims.H && h < 8; ++h)
        if (const auto sh = sink_logit(v, h))
            logits += (logits.empty() ? "" : ", ") + std::string("s_") + std::to_string(h) + " = " + num(*sh);
    if (!logits.empty())
        L.push_back("The sink logits, read back from sink_weight, weights and masked_scores: " + logits +
                    (v.dims.H > 8 ? ", …" : "") + ".");
    const StageView* m = v.find(kMaskedScores);
    const auto sh = sink_logit(v, 0);
    if (m && sh) {
        const RowMax r = row_max(*m, 0, 0, 0);
        const double M = std::max(r.max, *sh), e = std::exp(*sh - M);
        const double denom = (std::isfinite(r.max) ? r.sum * std::exp(r.max - M) : 0.0) + e;
        L.push_back(std::string("E.g. ") + (v.batched ? "batch 0, " : "") + "head 0, query 0: M = max(" + num(r.max) +
                    ", " + num(*sh) + ") = " + num(M) + ", exp(s_0 - M) = " + num(e) + ", denominator " + num(denom) +
                    ", sink_weight = " + num(e / denom) + " (stored " + num(at_bhi(s, 0, 0, 0)) + ").");
    }
    return L;
}

// context: the product per head and for all heads.
std::vector<std::string> explain_context(const TraceView& v) {
    const Dims& d = v.dims;
    std::vector<std::string> L = {"context = weights · V: per head " + tuple({d.Tq, d.Tk}) + " @ " +
                                  tuple({d.Tk, d.Dv}) + " -> " + tuple({d.Tq, d.Dv}) + "; all heads " +
                                  shape(v, {d.H, d.Tq, d.Tk}) + " @ " + shape(v, {d.H, d.Tk, d.Dv}) + " -> " +
                                  shape(v, {d.H, d.Tq, d.Dv}) + ". Row i is a weighted average of the value rows."};
    const Variants r = variants_of(v);
    if (r.gqa)
        L.push_back("Query head h mixes the values of K/V head h / " + std::to_string(d.group()) + ": " +
                    sharing_line(d) + ".");
    if (r.sinks)
        L.push_back(
            "With a sink the weights of a row sum to 1 - sink_weight: the context row shrinks toward 0 by "
            "the sink's share.");
    return L;
}

// head_output: each head's share of the output, and their sum worked out for one number.
std::vector<std::string> explain_head_output(const TraceView& v, const StageView& s) {
    const Dims& d = v.dims;
    std::vector<std::string> L;
    if (!v.has_out_proj)
        return {
            "head_output: without W_O, head h's context in its own columns h·Dv..(h+1)·Dv - 1 of Dout = H·Dv "
            "(0 elsewhere): the sum over heads is the concatenation, output."};
    L.push_back("head_output[b, t, h] = context_h[b, t] · W_O[h·Dv : (h+1)·Dv]: per head " + tuple({d.Tq, d.Dv}) +
                " @ " + tuple({d.Dv, d.Dout}) + " -> " + tuple({d.Tq, d.Dout}) + "; all heads -> " +
                shape(v, {d.Tq, d.H, d.Dout}) +
                ". concat(heads) · W_O is the same as the sum of each head's context times its own rows of W_O: "
                "sum over h of head_output + b_O = output.");
    if (const StageView* out = v.find(kOutput)) {
        std::string terms;
        double sum = 0;
        for (std::size_t h = 0; h < d.H && h < 8; ++h) terms += (h ? " + " : "") + num(s.at(h * d.Dout));
        for (std::size_t h = 0; h < d.H; ++h) sum += s.at(h * d.Dout);
        const double o = out->at(0);
        L.push_back(std::string("E.g. ") + (v.batched ? "batch 0, " : "") + "query 0, feature 0: " + terms +
                    (d.H > 8 ? " + …" : "") + " = " + num(sum) + "; output " + num(o) +
                    (v.has_out_bias ? " (the difference " + num(o - sum) + " is b_O[0])." : "."));
    }
    return L;
}

// output: the heads concatenated, then W_O when the run has one; the sum of head_output.
std::vector<std::string> explain_output(const TraceView& v) {
    const Dims& d = v.dims;
    const std::string concat = shape(v, {d.Tq, d.H * d.Dv});
    std::vector<std::string> L;
    if (v.has_out_proj)
        L.push_back("Heads concatenated: " + shape(v, {d.H, d.Tq, d.Dv}) + " -> " + concat + ", then · W_O: " + concat +
                    " @ " + tuple({d.H * d.Dv, d.Dout}) + " -> " + shape(v, {d.Tq, d.Dout}) + ".");
    else
        L.push_back("Heads concatenated: " + shape(v, {d.H, d.Tq, d.Dv}) + " -> " + concat +
                    " (then · W_O when one is given). Multi-head attention gives each head its own key space.");
    if (v.find(kHeadOutput)) L.push_back("It is also the sum over heads of head_output (plus b_O when given).");
    return L;
}

}  // namespace

std::vector<std::string> explain_stage(const TraceView& v, const StageView& s) {
    switch (s.id) {
        case kQ:
        case kK:
        case kV:
            return explain_projection(v, s);
        case kQRot:
        case kKRot:
            return v.spec.rope ? explain_rope(v, s) : std::vector<std::string>{};
        case kBias:
            return explain_bias(v, s);
        case kSinkWeight:
            return explain_sink(v, s);
        case kHeadOutput:
            return explain_head_output(v, s);
        case kScores:
            return explain_scores(v, s);
        case kMask:
            return explain_mask(v, s);
        case kMaskedScores:
            return explain_masked(v);
        case kWeights:
            return explain_weights(v, s);
        case kContext:
            return explain_context(v);
        case kOutput:
            return explain_output(v);
        case kStageCount:
            break;
    }
    return {};
}

}  // namespace attnscope
