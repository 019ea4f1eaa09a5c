// --cell: one weight's arithmetic, from q_i · k_j to key j's share of the output row.
#include <cmath>
#include <cstdio>
#include <limits>
#include <ostream>

#include "attnscope/base/errors.hpp"
#include "attnscope/report/report.hpp"
#include "text_util.hpp"

namespace attnscope {

using namespace text;

void check_cell(const CellRef& c, const Dims& d) {
    auto check = [](std::size_t i, std::size_t n, const char* what) {
        if (i >= n)
            throw UsageError("{cell}: " + std::string(what) + " " + std::to_string(i) +
                             " does not exist (expected 0.." + std::to_string(n - 1) + ")");
    };
    check(c.batch, d.B, "batch item");
    check(c.head, d.H, "head");
    check(c.query, d.Tq, "query");
    check(c.key, d.Tk, "key");
}

namespace {

// The cell being explained: the run, its batch item, head, query and key, how numbers are
// printed, and what the run has beyond the classic pipeline.
struct CellWalk {
    const TraceView& v;
    std::size_t b, h, i, j;
    int decimals;
    Variants has;
    std::string f(double x) const { return format_number(x, decimals); }
    // "[b][h][i][j]" (no batch index for a 2-D input)
    std::string index() const {
        return (v.batched ? "[" + std::to_string(b) + "]" : std::string()) + "[" + std::to_string(h) + "][" +
               std::to_string(i) + "][" + std::to_string(j) + "]";
    }
    long long q_pos() const { return v.mask_rule.query_position(b, i); }
    long long k_pos() const { return v.mask_rule.key_position(b, j); }
};

// Grouped-query attention: which K/V head the query head reads.
void write_group(std::ostream& out, const CellWalk& c) {
    const Dims& d = c.v.dims;
    const std::size_t g = d.kv_head(c.h);
    out << "\n  query head " << c.h << " reads K/V head g = h / (H/G) = " << c.h << " / " << d.group() << " = " << g
        << " (" << serves(d, g) << ")\n";
}

// 0) RoPE: each pair of q_i and k_j turned by its angle, before -> after (Q -> Q_rot, K -> K_rot).
void write_rope(std::ostream& out, const CellWalk& c) {
    const Dims& d = c.v.dims;
    const Rope& rope = *c.v.spec.rope;
    const std::size_t R = rope.dim.value_or(d.Dk), half = R / 2;
    const bool interleaved = rope.style == RopeStyle::interleaved;
    out << "\n  0) RoPE: pair " << (interleaved ? "(2p, 2p + 1)" : "(p, p + R/2)") << " of the first R = " << R
        << " features turns by angle = pos · " << option_num(rope.base) << "^(-2p/R); (a, b) -> (a cos - b sin, "
        << "b cos + a sin)\n";
    const auto side = [&](Stage before_id, Stage after_id, std::size_t row, long long pos, const char* who) {
        const StageView &X = c.v.stage(before_id), &Y = c.v.stage(after_id);
        const std::size_t xo = matrix_offset(X, c.b, c.h) + row * d.Dk, yo = matrix_offset(Y, c.b, c.h) + row * d.Dk;
        out << "     " << who << " at position " << pos << ":\n";
        const std::size_t shown_pairs = std::min<std::size_t>(half, 8);
        for (std::size_t p = 0; p < shown_pairs; ++p) {
            const std::size_t a = interleaved ? 2 * p : p, bb = interleaved ? 2 * p + 1 : p + half;
            const double angle = double(pos) * rope.frequency(p, R);
            out << "       pair (d" << a << ", d" << bb << ") angle " << c.f(angle) << ": (" << c.f(X.at(xo + a))
                << ", " << c.f(X.at(xo + bb)) << ") -> (" << c.f(Y.at(yo + a)) << ", " << c.f(Y.at(yo + bb)) << ")\n";
        }
        if (shown_pairs < half) out << "       … (" << half - shown_pairs << " more pairs)\n";
    };
    side(kQ, kQRot, c.i, c.q_pos(), "q_i");
    side(kK, kKRot, c.j, c.k_pos(), "k_j");
}

// 1) q_i · k_j, term by term (the rotated vectors with RoPE). Returns the sum.
double write_dot(std::ostream& out, const CellWalk& c) {
    const Dims& d = c.v.dims;
    const StageView &Q = c.v.stage(c.has.rope ? kQRot : kQ), &K = c.v.stage(c.has.rope ? kKRot : kK);
    const std::size_t qo = matrix_offset(Q, c.b, c.h) + c.i * d.Dk, ko = matrix_offset(K, c.b, c.h) + c.j * d.Dk;
    out << "\n  1) score before scaling: q_i · k_j = sum over the Dk = " << d.Dk << " features"
        << (c.has.rope ? " (rotated: Q_rot, K_rot)" : "") << '\n';
    double dot = 0;
    for (std::size_t k = 0; k < d.Dk; ++k) {
        const double a = Q.at(qo + k), e = K.at(ko + k);
        dot += a * e;
        out << "       " << pad_right("d" + std::to_string(k) + ":", 5) << pad_left(c.f(a), 10) << " × "
            << pad_left(c.f(e), 10) << " = " << pad_left(c.f(a * e), 10) << '\n';
    }
    out << "     sum = " << c.f(dot) << '\n';
    return dot;
}

// 2) × scale, and the stored score.
void write_scale(std::ostream& out, const CellWalk& c, double dot, double score) {
    const TraceView& v = c.v;
    char scale[32];
    std::snprintf(scale, sizeof scale, "%.6g", v.scale);
    out << "  2) × scale " << scale << " (" << v.scale_source << ") = " << c.f(dot * v.scale) << '\n';
    out << "     stored: scores" << c.index() << " = " << c.f(score) << '\n';
}

// The logit before masking: softcap and bias (when the run has them), checked against
// masked_scores where the key is visible. Returns the logit.
double write_logit(std::ostream& out, const CellWalk& c, double score) {
    if (!c.has.softcap && !c.has.bias) return score;
    double logit = score;
    if (c.has.softcap) {
        const double C = *c.v.spec.softcap;
        logit = C * std::tanh(score / C);
        out << "     softcap: C · tanh(s / C) = " << short_num(C) << " · tanh(" << c.f(score) << " / " << short_num(C)
            << ") = " << c.f(logit) << '\n';
    }
    if (c.has.bias) {
        const double bias = at_bhij(c.v.stage(kBias), c.b, c.h, c.i, c.j);
        const long long delta = c.k_pos() - c.q_pos();
        const auto m = alibi_slope(c.v, c.h);
        if (c.has.alibi && m)
            out << "     bias: ALiBi m_" << c.h << " · (k_pos - q_pos) = " << short_num(*m) << " · (" << c.k_pos()
                << " - " << c.q_pos() << ") = " << c.f(*m * double(delta)) << '\n';
        else if (c.has.alibi)
            out << "     bias: ALiBi m_" << c.h << " · (k_pos - q_pos), k_pos - q_pos = " << c.k_pos() << " - "
                << c.q_pos() << " = " << delta << ", plus the float attn_mask\n";
        else
            out << "     bias: the float attn_mask's value for this (query, key)" << '\n';
        out << "     stored: bias" << c.index() << " = " << c.f(bias) << '\n';
        out << "     logit = " << (c.has.softcap ? c.f(logit) : c.f(score)) << " + (" << c.f(bias)
            << ") = " << c.f(logit + bias) << '\n';
        logit += bias;
    }
    return logit;
}

// The parts of the mask rule for this (query, key), each with its numbers. The verdict is
// the rule's own (MaskRule::visible), never these lines'.
void write_mask_parts(std::ostream& out, const CellWalk& c) {
    const MaskRule& rule = c.v.mask_rule;
    const long long q = c.q_pos(), k = c.k_pos();
    auto yes = [](bool t) { return t ? "true" : "false"; };
    if (c.j >= c.v.dims.Tk - c.v.dims.extra_keys) {
        out << "     key " << c.j << " is appended after the source ("
            << "add_bias_kv / add_zero_attn): always visible\n";
        return;
    }
    bool others = true;  // every part shown here lets the key through
    if (rule.has_padding()) {
        out << "     padding: key " << c.j << (rule.padded(c.b, c.j) ? " is PAD" : " is not PAD") << '\n';
        others = others && !rule.padded(c.b, c.j);
    }
    if (c.has.positions || rule.window() || rule.causal())
        out << "     positions: q_pos = " << q << ", k_pos = " << k << '\n';
    if (rule.causal()) {
        out << "     causal: k_pos <= q_pos: " << k << " <= " << q << " is " << yes(k <= q) << '\n';
        others = others && k <= q;
    }
    if (rule.window()) {
        const long long W = (long long)*rule.window();
        const bool in = rule.causal() ? q - W < k : (q - k < W && k - q < W);
        if (rule.causal())
            out << "     window " << W << ": q_pos - " << W << " < k_pos: " << q << " - " << W << " = " << q - W
                << " < " << k << " is " << yes(in) << '\n';
        else
            out << "     window " << W << ": |q_pos - k_pos| < " << W << ": |" << q << " - " << k
                << "| = " << std::llabs(q - k) << " < " << W << " is " << yes(in) << '\n';
        others = others && in;
    }
    if (rule.has_attn_mask()) {
        const bool seen = rule.visible(c.b, c.i, c.j);
        out << "     boolean attn_mask: "
            << (!others ? "(not needed: already hidden)"
                : seen  ? "allows it"
                        : "blocks it")
            << '\n';
    }
}

// 3) the mask: the mask rule's verdict, and a -inf bias. Returns whether key j is seen.
bool write_mask(std::ostream& out, const CellWalk& c, double logit) {
    const bool by_rule = c.v.mask_rule.visible(c.b, c.i, c.j);
    const bool visible = sees(c.v, c.b, c.h, c.i, c.j);
    out << "  3) mask: key " << c.j << " is " << (visible ? "visible to" : "hidden from") << " query " << c.i << '\n';
    if (c.has.window || c.has.bool_mask || c.has.positions || c.has.bias || c.v.dims.extra_keys) {
        write_mask_parts(out, c);
        out << "     the mask rule: " << (by_rule ? "visible" : "hidden") << '\n';
        if (by_rule && !visible) out << "     but the bias is -inf: that hides the key too\n";
    }
    out << "     "
        << (visible ? "the masked score stays " + c.f(logit) : "the masked score is -inf: the weight is exactly 0");
    if (c.has.softcap || c.has.bias)
        out << "    [masked_scores = " << c.f(at_bhij(c.v.stage(kMaskedScores), c.b, c.h, c.i, c.j)) << "]";
    out << '\n';
    return visible;
}

// "the 2 visible keys" of row i (hidden ones add exp(-inf) = 0), or "the 5 keys" when
// every key of the row is visible.
std::string visible_keys_words(const CellWalk& c) {
    const std::size_t Tk = c.v.dims.Tk;
    std::size_t n = 0;
    for (std::size_t k = 0; k < Tk; ++k) n += sees(c.v, c.b, c.h, c.i, k);
    return "the " + std::to_string(n) + (n < Tk ? " visible" : "") + (n == 1 ? " key" : " keys");
}

// 4) the row max, exp, the row sum and the weight, checked against the stored weight w.
void write_softmax(std::ostream& out, const CellWalk& c, double logit, bool visible, double w) {
    const RowMax r = row_max(c.v.stage(kMaskedScores), c.b, c.h, c.i);
    if (r.max == -std::numeric_limits<double>::infinity()) {
        out << "  4) every key of query " << c.i << " is masked: the whole row of weights is 0 (not NaN)\n";
        return;
    }
    const double e = visible ? std::exp(logit - r.max) : 0.0;
    out << "  4) row max over the visible keys = " << c.f(r.max) << " (key " << r.arg << " '"
        << clip_label(axis_label(c.v, "Tk", c.b, r.arg)) << "')\n";
    out << "     exp(" << (visible ? c.f(logit) : "-inf") << " - (" << c.f(r.max) << ")) = " << c.f(e) << '\n';
    out << "     row sum of exp(m - max) over " << visible_keys_words(c) << " = " << c.f(r.sum) << '\n';
    out << "     weight = " << c.f(e) << " / " << c.f(r.sum) << " = " << c.f(e / r.sum) << "    [weights = " << c.f(w)
        << "]\n";
}

// 4) with a sink: its logit joins the denominator; the sink's share of the row.
void write_sink_softmax(std::ostream& out, const CellWalk& c, double logit, bool visible, double w) {
    const RowMax r = row_max(c.v.stage(kMaskedScores), c.b, c.h, c.i);
    const double stored_share = at_bhi(c.v.stage(kSinkWeight), c.b, c.h, c.i);
    const auto s = sink_logit(c.v, c.h);
    if (r.max == -std::numeric_limits<double>::infinity()) {
        out << "  4) every key of query " << c.i << " is masked: the whole row of weights is 0 (not NaN) and the "
            << "sink takes it all    [sink_weight = " << c.f(stored_share) << "]\n";
        return;
    }
    if (!s) {
        out << "  4) the sink takes " << c.f(stored_share) << " of the row; the keys share the rest\n";
        return;
    }
    const double M = std::max(r.max, *s), keys = r.sum * std::exp(r.max - M), sink = std::exp(*s - M);
    const double e = visible ? std::exp(logit - M) : 0.0, denom = keys + sink;
    out << "  4) row max over the visible keys = " << c.f(r.max) << " (key " << r.arg << " '"
        << clip_label(axis_label(c.v, "Tk", c.b, r.arg)) << "'); head " << c.h << "'s sink logit s_h = " << c.f(*s)
        << " (read back from sink_weight)\n";
    out << "     M = max(row max, s_h) = " << c.f(M) << '\n';
    out << "     exp(" << (visible ? c.f(logit) : "-inf") << " - (" << c.f(M) << ")) = " << c.f(e) << '\n';
    out << "     denominator: sum of exp(m - M) over " << visible_keys_words(c) << " " << c.f(keys)
        << " + exp(s_h - M) " << c.f(sink) << " = " << c.f(denom) << '\n';
    out << "     weight = " << c.f(e) << " / " << c.f(denom) << " = " << c.f(e / denom) << "    [weights = " << c.f(w)
        << "]\n";
    out << "     sink's share = " << c.f(sink) << " / " << c.f(denom) << " = " << c.f(sink / denom)
        << "    [sink_weight = " << c.f(stored_share) << "]: the row's weights sum to 1 - " << c.f(stored_share)
        << '\n';
}

// 5) the value's share w · v_j of the context row.
void write_share(std::ostream& out, const CellWalk& c, double w) {
    const Dims& d = c.v.dims;
    const StageView &V = c.v.stage(kV), &C = c.v.stage(kContext);
    const std::size_t vo = matrix_offset(V, c.b, c.h) + c.j * d.Dv, co = matrix_offset(C, c.b, c.h) + c.i * d.Dv;
    out << "  5) value v_j" << (c.has.gqa ? " (of K/V head " + std::to_string(d.kv_head(c.h)) + ")" : std::string())
        << ", key " << c.j << "'s share w_ij · v_j, and context row " << c.i << " (all shares):\n";
    out << "       " << pad_right("", 4) << pad_left("v_j", 10) << "  " << pad_left("w·v_j", 10) << "  "
        << pad_left("context", 10) << '\n';
    for (std::size_t k = 0; k < d.Dv; ++k)
        out << "       d" << pad_right(std::to_string(k), 3) << pad_left(c.f(V.at(vo + k)), 10) << "  "
            << pad_left(c.f(w * V.at(vo + k)), 10) << "  " << pad_left(c.f(C.at(co + k)), 10) << '\n';
}

// The stages a cell of this run reads: the classic ones, and each variant's the run has.
StageSet cell_needs(const Variants& has) {
    StageSet needs = StageSet().set(kQ).set(kK).set(kV).set(kScores).set(kMaskedScores).set(kWeights).set(kContext);
    if (has.rope) needs.set(kQRot).set(kKRot);
    if (has.bias) needs.set(kBias);
    if (has.sinks) needs.set(kSinkWeight);
    return needs;
}

}  // namespace

void write_cell(std::ostream& out, const TraceView& v, const CellRef& c, int decimals) {
    const Variants has = variants_of(v);
    v.require(cell_needs(has), "cell");
    check_cell(c, v.dims);
    const CellWalk walk{v, c.batch, c.head, c.query, c.key, decimals, has};
    const std::string qi = clip_label(axis_label(v, "Tq", c.batch, c.query));
    const std::string kj = clip_label(axis_label(v, "Tk", c.batch, c.key));
    out << "\n== one cell: " << (v.batched ? "batch " + std::to_string(c.batch) + ", " : std::string()) << "head "
        << c.head << ", query " << c.query << " '" << qi << "', key " << c.key << " '" << kj << "'\n";
    // The score and the weight as stored, at (b, h, i, j).
    const double score = at_bhij(v.stage(kScores), c.batch, c.head, c.query, c.key);
    const double w = at_bhij(v.stage(kWeights), c.batch, c.head, c.query, c.key);
    if (has.gqa) write_group(out, walk);
    if (has.rope) write_rope(out, walk);
    const double dot = write_dot(out, walk);
    write_scale(out, walk, dot, score);
    const double logit = write_logit(out, walk, score);
    const bool visible = write_mask(out, walk, logit);
    if (has.sinks)
        write_sink_softmax(out, walk, logit, visible, w);
    else
        write_softmax(out, walk, logit, visible, w);
    write_share(out, walk, w);
}

}  // namespace attnscope
