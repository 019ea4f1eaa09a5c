// The classic pipeline recomputed in float64 for the diagnosis, with one mistake (a
// Mutation) switched on at a time: projections, scores, the mask, softmax, context, output.
#include <algorithm>
#include <cmath>

#include "check_internal.hpp"

namespace attnscope::check_detail {
namespace {

const Tensor<double, 2>& weight(const Problem<double>& pr, int w) {
    return w == 0 ? pr.W_Q : w == 1 ? pr.W_K : w == 2 ? pr.W_V : *pr.W_O;
}

// y = src · W (or · Wᵀ) (+ b): (rows, in) x (in, out) -> (rows, out).
std::vector<double> linear(const double* src, std::size_t rows, const Problem<double>& pr, int w, const Mutation& m) {
    const auto& W = weight(pr, w);
    const std::size_t in = W.shape()[0], out = W.shape()[1];
    const double* Wd = W.data();
    const auto& b = bias_of(pr, w);
    std::vector<double> y(rows * out, 0.0);
    for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t o = 0; o < out; ++o) {
            double s = (b && !m.no_bias[std::size_t(w)]) ? (*b)(o) : 0.0;
            for (std::size_t i = 0; i < in; ++i)
                s += src[r * in + i] * (m.transposed[std::size_t(w)] ? Wd[o * in + i] : Wd[i * out + o]);
            y[r * out + o] = s;
        }
    return y;
}

// Q, K or V: src · W (+ b) (B, T, n·D), split into n heads -> (B, n, T, D).
Dense project(const Run& r, int w, const Mutation& m) {
    const Tensor<double, 3>& src = w == 0 ? r.pr.x : r.pr.src();
    const std::size_t B = src.shape()[0], T = src.shape()[1], D = w == 2 ? r.Dv : r.Dk;
    const std::size_t out = weight(r.pr, w).shape()[1], n = out / D;
    const std::vector<double> y = linear(src.data(), B * T, r.pr, w, m);  // (B, T, n·D)
    Dense t = dense({B, n, T, D});
    if (m.split == HeadSplit::flat) {  // the same memory read as (B, n, T, D)
        t.v = y;
        return t;
    }
    const bool inter = m.split == HeadSplit::interleaved;  // (B, T, D, n) transposed to (B, n, T, D)
    for (std::size_t b = 0; b < B; ++b)
        for (std::size_t h = 0; h < n; ++h)
            for (std::size_t i = 0; i < T; ++i)
                for (std::size_t d = 0; d < D; ++d)
                    t.v[((b * n + h) * T + i) * D + d] = y[(b * T + i) * out + (inter ? d * n + h : h * D + d)];
    return t;
}

// scores = Q · Kᵀ · scale: (B,H,Tq,Dk) x (B,G,Dk,Tk) -> (B,H,Tq,Tk); query head h reads
// K/V head h / (H/G). Transposed: K · Qᵀ (Tq = Tk).
Dense scores(const Run& r, const Dense& Q, const Dense& K, double scale, bool transposed) {
    Dense s = dense({r.B, r.H, r.Tq, r.Tk});
    const std::size_t group = r.H / r.G;
    for (std::size_t b = 0; b < r.B; ++b)
        for (std::size_t h = 0; h < r.H; ++h) {
            const double* q = &Q.v[(b * r.H + h) * r.Tq * r.Dk];
            const double* k = &K.v[(b * r.G + h / group) * r.Tk * r.Dk];
            for (std::size_t i = 0; i < r.Tq; ++i)
                for (std::size_t j = 0; j < r.Tk; ++j) {
                    const double* a = transposed ? k + i * r.Dk : q + i * r.Dk;
                    const double* c = transposed ? q + j * r.Dk : k + j * r.Dk;
                    double dot = 0;
                    for (std::size_t d = 0; d < r.Dk; ++d) dot += a[d] * c[d];
                    s.v[((b * r.H + h) * r.Tq + i) * r.Tk + j] = dot * scale;
                }
        }
    return s;
}

// masked_scores: scores (+ bias), -inf (or 0) where the mask is false.
Dense masked(const Run& r, const Dense& s, const Dense* bias, const Dense& mask, Fill f) {
    Dense out = s;
    const std::size_t cells = r.Tq * r.Tk;
    for (std::size_t b = 0; b < r.B; ++b)
        for (std::size_t h = 0; h < r.H; ++h)
            for (std::size_t c = 0; c < cells; ++c) {
                const std::size_t k = (b * r.H + h) * cells + c;
                if (bias) out.v[k] += bias->v[k];
                if (mask.v[b * cells + c] == 0 && (f == Fill::neg_inf || f == Fill::zero))
                    out.v[k] = f == Fill::zero ? 0.0 : -kInf;
            }
    return out;
}

// Softmax of each line of n cells (stride apart), the row maximum subtracted; a line with
// every cell -inf follows `policy`. Returns whether there was such a line.
bool softmax_line(double* x, std::size_t n, std::size_t stride, RowPolicy policy) {
    double mx = -kInf;
    for (std::size_t i = 0; i < n; ++i) mx = std::max(mx, x[i * stride]);
    if (mx == -kInf) {
        const double fill = policy == RowPolicy::nan ? kNaN : policy == RowPolicy::uniform ? 1.0 / double(n) : 0.0;
        for (std::size_t i = 0; i < n; ++i) x[i * stride] = fill;
        return true;
    }
    double sum = 0;
    for (std::size_t i = 0; i < n; ++i) sum += (x[i * stride] = std::exp(x[i * stride] - mx));
    for (std::size_t i = 0; i < n; ++i) x[i * stride] /= sum;
    return false;
}

Dense weights(const Run& r, const Dense& ms, const Dense& mask, const Mutation& m, bool& empty_lines) {
    Dense w = ms;
    const std::size_t cells = r.Tq * r.Tk;
    for (std::size_t bh = 0; bh < r.B * r.H; ++bh) {
        double* x = &w.v[bh * cells];
        if (m.over_queries) {
            for (std::size_t j = 0; j < r.Tk; ++j) empty_lines |= softmax_line(x + j, r.Tq, r.Tk, m.policy);
        } else {
            for (std::size_t i = 0; i < r.Tq; ++i) empty_lines |= softmax_line(x + i * r.Tk, r.Tk, 1, m.policy);
        }
        if (m.fill == Fill::after_softmax)  // zeroed after the softmax, not renormalised
            for (std::size_t c = 0; c < cells; ++c)
                if (mask.v[(bh / r.H) * cells + c] == 0) x[c] = 0;
    }
    return w;
}

// context = weights · V: (B,H,Tq,Tk) x (B,G,Tk,D) -> (B,H,Tq,D).
Dense context(const Run& r, const Dense& w, const Dense& V) {
    const std::size_t D = V.shape[3], group = r.H / r.G;
    Dense c = dense({r.B, r.H, r.Tq, D});
    for (std::size_t b = 0; b < r.B; ++b)
        for (std::size_t h = 0; h < r.H; ++h) {
            const double* v = &V.v[(b * r.G + h / group) * r.Tk * D];
            for (std::size_t i = 0; i < r.Tq; ++i) {
                const double* wr = &w.v[((b * r.H + h) * r.Tq + i) * r.Tk];
                double* out = &c.v[((b * r.H + h) * r.Tq + i) * D];
                for (std::size_t j = 0; j < r.Tk; ++j)
                    for (std::size_t d = 0; d < D; ++d) out[d] += wr[j] * v[j * D + d];
            }
        }
    return c;
}

// output: heads concatenated (B, Tq, H·Dv), then · W_O (+ b_O).
Dense output(const Run& r, const Dense& c, const Mutation& m) {
    const std::size_t HD = r.H * r.Dv;
    std::vector<double> merged(r.B * r.Tq * HD);
    if (m.merge == HeadSplit::flat) {  // (B, H, Tq, Dv) memory read as (B, Tq, H·Dv)
        merged = c.v;
    } else {
        const bool inter = m.merge == HeadSplit::interleaved;  // transposed to (B, Tq, Dv, H), then reshaped
        for (std::size_t b = 0; b < r.B; ++b)
            for (std::size_t h = 0; h < r.H; ++h)
                for (std::size_t i = 0; i < r.Tq; ++i)
                    for (std::size_t d = 0; d < r.Dv; ++d)
                        merged[(b * r.Tq + i) * HD + (inter ? d * r.H + h : h * r.Dv + d)] =
                            c.v[((b * r.H + h) * r.Tq + i) * r.Dv + d];
    }
    Dense o;
    o.shape = {r.B, r.Tq, r.pr.W_O && !m.no_output_projection ? weight(r.pr, 3).shape()[1] : HD};
    o.v = r.pr.W_O && !m.no_output_projection ? linear(merged.data(), r.B * r.Tq, r.pr, 3, m) : merged;
    return o;
}

}  // namespace

const std::optional<Tensor<double, 1>>& bias_of(const Problem<double>& pr, int w) {
    return w == 0 ? pr.b_Q : w == 1 ? pr.b_K : w == 2 ? pr.b_V : pr.b_O;
}

bool square(const Problem<double>& pr, int w) {
    if (w == 3 && !pr.W_O) return false;
    const auto& W = weight(pr, w);
    return W.shape()[0] == W.shape()[1];
}

Dense edited_mask(const Run& r, MaskEdit e, const Dense& ref_mask) {
    const MaskRule& rule = r.pr.mask;
    Dense m = dense({r.B, r.Tq, r.Tk});
    for (std::size_t b = 0; b < r.B; ++b)
        for (std::size_t i = 0; i < r.Tq; ++i)
            for (std::size_t j = 0; j < r.Tk; ++j) {
                const std::size_t k = (b * r.Tq + i) * r.Tk + j;
                const long long p = rule.query_position(i), jj = static_cast<long long>(j);
                const bool pad = rule.padded(b, j), past = !rule.causal() || jj <= p;
                bool v = !pad && past;
                switch (e) {
                    case MaskEdit::none:
                        break;
                    case MaskEdit::inverted:
                        v = ref_mask.v[k] == 0;
                        break;
                    case MaskEdit::padding_inverted:
                        v = pad && past;
                        break;
                    case MaskEdit::causal_inverted:
                        v = !pad && !past;
                        break;
                    case MaskEdit::includes_next:
                        v = !pad && jj <= p + 1;
                        break;
                    case MaskEdit::excludes_self:
                        v = !pad && jj < p;
                        break;
                    case MaskEdit::upper:
                        v = !pad && jj >= p;
                        break;
                    case MaskEdit::on_queries:
                        v = past && !rule.padded(b, i);
                        break;
                }
                m.v[k] = v ? 1.0 : 0.0;
            }
    return m;
}

Dense step(Stage p, const Run& r, const Pipe& cur, const Mutation& m, bool& empty_lines) {
    const Dense& Qs = r.present[kQRot] ? *cur[kQRot] : *cur[kQ];
    const Dense& Ks = r.present[kKRot] ? *cur[kKRot] : *cur[kK];
    switch (p) {
        case kQ:
            return project(r, 0, m);
        case kK:
            return project(r, 1, m);
        case kV:
            return project(r, 2, m);
        case kQRot:
            return *cur[kQ];  // (RoPE is not modelled: the faithfulness check says so)
        case kKRot:
            return *cur[kK];
        case kScores:
            return scores(r, Qs, Ks, m.scale.value_or(r.scale), m.scores_transposed);
        case kBias:
            return *cur[kBias];
        case kMask:
            return m.mask == MaskEdit::none ? *cur[kMask] : edited_mask(r, m.mask, *cur[kMask]);
        case kMaskedScores:
            return masked(r, *cur[kScores], r.present[kBias] ? cur[kBias] : nullptr, *cur[kMask], m.fill);
        case kWeights:
            return weights(r, *cur[kMaskedScores], *cur[kMask], m, empty_lines);
        case kContext:
            return context(r, *cur[kWeights], m.values_are_keys ? *cur[kK] : *cur[kV]);
        case kOutput:
            return output(r, *cur[kContext], m);
        case kSinkWeight:
        case kHeadOutput:
        case kStageCount:
            break;
    }
    return {};
}

}  // namespace attnscope::check_detail
