// Core: the attention computation, stage by stage. See attention.hpp for the shape legend.
#include "attnscope/attention.hpp"

#include "blas.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace attnscope {
namespace {

// Run-time check of a shape comment, so the comments cannot drift from the code.
template <typename E, std::size_t N>
void check_shape(const E& t, const std::array<std::size_t, N>& expected, const char* name) {
    const auto& s = t.shape();
    if (s.size() != N || !std::equal(s.begin(), s.end(), expected.begin()))
        throw std::logic_error(std::string("internal shape check failed for ") + name);
}

// Y (rows, n) = X (rows, in) · W (in, n) (+ b): one matrix product over all batch rows.
template <typename T>
void project(const T* X, std::size_t rows, std::size_t in, const xt::xtensor<T, 2>& W,
             const std::optional<xt::xtensor<T, 1>>& b, T* Y) {
    std::size_t n = W.shape(1);
    if (b) {
        for (std::size_t r = 0; r < rows; ++r) std::copy(b->begin(), b->end(), Y + r * n);
    }
    gemm<T>(false, false, rows, n, in, T(1), X, in, W.data(), n, b ? T(1) : T(0), Y, n);
}

// (B, T, H*D) -> (B, H, T, D): feature h*D + j belongs to head h.
template <typename T>
xt::xtensor<T, 4> split_heads(const std::vector<T>& flat, std::size_t B, std::size_t T_, std::size_t H, std::size_t D) {
    xt::xtensor<T, 4> out = xt::xtensor<T, 4>::from_shape({B, H, T_, D});
    for (std::size_t b = 0; b < B; ++b)
        for (std::size_t t = 0; t < T_; ++t)
            for (std::size_t h = 0; h < H; ++h) {
                const T* from = flat.data() + (b * T_ + t) * H * D + h * D;
                std::copy(from, from + D, &out(b, h, t, 0));
            }
    return out;
}

// Which K/V head serves query head h. Today every query head has its own; grouped-query
// attention (fewer K/V heads) changes only this mapping and the K/V head count.
inline std::size_t kv_head(std::size_t h) { return h; }

}  // namespace

xt::xtensor<bool, 3> attention_mask(const Dims& d, const xt::xtensor<bool, 2>* key_padding_mask, bool causal,
                                    CausalAlign align) {
    // Top-left: query i sees keys j <= i (torch.tril). Bottom-right: the queries are the
    // last Tq of Tk positions, so query i sits at i + Tk - Tq (the KV-cache view).
    xt::xtensor<bool, 3> mask = xt::xtensor<bool, 3>::from_shape({d.B, d.Tq, d.Tk});
    for (std::size_t b = 0; b < d.B; ++b)
        for (std::size_t i = 0; i < d.Tq; ++i) {
            // Visible keys j satisfy j <= i + offset; offset may be negative (Tq > Tk).
            long long last = align == CausalAlign::top_left ? (long long)i : (long long)i + (long long)d.Tk - (long long)d.Tq;
            for (std::size_t j = 0; j < d.Tk; ++j) {
                bool visible = !(key_padding_mask && (*key_padding_mask)(b, j));
                if (causal && (long long)j > last) visible = false;
                mask(b, i, j) = visible;
            }
        }
    return mask;
}

template <typename T>
Trace<T> attend(const Problem<T>& p) {
    // x        (B, Tq, Dm)       src (x or memory) (B, Tk, Dkv)
    // W_Q      (Dm, H*Dk)        W_K (Dkv, H*Dk)     W_V (Dkv, H*Dv)     W_O (H*Dv, Dout)
    const Dims& d = p.dims;
    const std::size_t B = d.B, H = d.H, Tq = d.Tq, Tk = d.Tk, Dk = d.Dk, Dv = d.Dv;
    Trace<T> tr;
    tr.dims = d;
    tr.batched = p.batched;
    tr.scale = p.scale;
    const xt::xtensor<T, 3>& src = p.src();

    // 1) Projections: (B*Tq, Dm) x (Dm, H*Dk) -> (B*Tq, H*Dk), then split into heads.
    std::vector<T> flat(B * std::max(Tq, Tk) * H * std::max(Dk, Dv));
    project(p.x.data(), B * Tq, d.Dm, p.W_Q, p.b_Q, flat.data());
    tr.Q = split_heads(flat, B, Tq, H, Dk);                                     // (B, H, Tq, Dk)
    project(src.data(), B * Tk, d.Dkv, p.W_K, p.b_K, flat.data());
    tr.K = split_heads(flat, B, Tk, H, Dk);                                     // (B, H, Tk, Dk)
    project(src.data(), B * Tk, d.Dkv, p.W_V, p.b_V, flat.data());
    tr.V = split_heads(flat, B, Tk, H, Dv);                                     // (B, H, Tk, Dv)
    // (Rotary position embeddings, when they come, rotate Q and K here, between the
    // projections and the scores, as a stage of their own.)
    check_shape(tr.Q, std::array{B, H, Tq, Dk}, "Q");
    check_shape(tr.K, std::array{B, H, Tk, Dk}, "K");
    check_shape(tr.V, std::array{B, H, Tk, Dv}, "V");

    // 2) Scores: (B,H,Tq,Dk) x (B,H,Dk,Tk) -> (B,H,Tq,Tk), times scale.
    tr.scores = xt::xtensor<T, 4>::from_shape({B, H, Tq, Tk});
    for (std::size_t b = 0; b < B; ++b)
        for (std::size_t h = 0; h < H; ++h)
            gemm<T>(false, true, Tq, Tk, Dk, p.scale, &tr.Q(b, h, 0, 0), Dk, &tr.K(b, kv_head(h), 0, 0), Dk, T(0),
                    &tr.scores(b, h, 0, 0), Tk);

    // 3) Mask: padding AND causal -> (B, Tq, Tk), true = may attend.
    tr.mask = attention_mask(d, p.key_padding_mask ? &*p.key_padding_mask : nullptr, p.spec.causal, p.spec.causal_align);
    for (std::size_t b = 0; b < B; ++b)
        for (std::size_t i = 0; i < Tq; ++i)
            if (std::none_of(&tr.mask(b, i, 0), &tr.mask(b, i, 0) + Tk, [](bool v) { return v; }))
                tr.fully_masked.push_back({b, i});

    // 4) Masked scores: -inf where the mask is false -> (B, H, Tq, Tk).
    // 5) Weights: softmax over keys, w_ij = exp(s_ij - max_j s) / sum_j exp(s_ij - max_j s).
    //    A row with every key masked gives all-zero weights, never NaN.
    const T neg_inf = -std::numeric_limits<T>::infinity();
    tr.masked_scores = xt::xtensor<T, 4>::from_shape({B, H, Tq, Tk});
    tr.weights = xt::xtensor<T, 4>::from_shape({B, H, Tq, Tk});
    for (std::size_t b = 0; b < B; ++b)
        for (std::size_t h = 0; h < H; ++h)
            for (std::size_t i = 0; i < Tq; ++i) {
                const T* s = &tr.scores(b, h, i, 0);
                const bool* m = &tr.mask(b, i, 0);
                T* ms = &tr.masked_scores(b, h, i, 0);
                T* w = &tr.weights(b, h, i, 0);
                T row_max = neg_inf;
                for (std::size_t j = 0; j < Tk; ++j) {
                    ms[j] = m[j] ? s[j] : neg_inf;
                    row_max = std::max(row_max, ms[j]);
                }
                if (row_max == neg_inf) {  // fully masked row
                    std::fill(w, w + Tk, T(0));
                    continue;
                }
                T sum = 0;
                for (std::size_t j = 0; j < Tk; ++j) {
                    w[j] = m[j] ? std::exp(ms[j] - row_max) : T(0);
                    sum += w[j];
                }
                for (std::size_t j = 0; j < Tk; ++j) w[j] /= sum;
            }

    // 6) Context: (B,H,Tq,Tk) x (B,H,Tk,Dv) -> (B,H,Tq,Dv): a weighted sum of values.
    tr.context = xt::xtensor<T, 4>::from_shape({B, H, Tq, Dv});
    for (std::size_t b = 0; b < B; ++b)
        for (std::size_t h = 0; h < H; ++h)
            gemm<T>(false, false, Tq, Dv, Tk, T(1), &tr.weights(b, h, 0, 0), Tk, &tr.V(b, kv_head(h), 0, 0), Dv, T(0),
                    &tr.context(b, h, 0, 0), Dv);

    // 7) Merge heads: (B, H, Tq, Dv) -> (B, Tq, H*Dv); then output = merged · W_O (+ b_O).
    std::vector<T> merged(B * Tq * H * Dv);
    for (std::size_t b = 0; b < B; ++b)
        for (std::size_t h = 0; h < H; ++h)
            for (std::size_t i = 0; i < Tq; ++i)
                std::copy(&tr.context(b, h, i, 0), &tr.context(b, h, i, 0) + Dv, merged.data() + (b * Tq + i) * H * Dv + h * Dv);
    tr.output = xt::xtensor<T, 3>::from_shape({B, Tq, d.Dout});
    if (p.W_O) {
        // (B*Tq, H*Dv) x (H*Dv, Dout) -> (B*Tq, Dout)
        project(merged.data(), B * Tq, H * Dv, *p.W_O, p.b_O, tr.output.data());
    } else {
        std::copy(merged.begin(), merged.end(), tr.output.begin());
    }
    check_shape(tr.output, std::array{B, Tq, d.Dout}, "output");
    return tr;
}

template Trace<float> attend<float>(const Problem<float>&);
template Trace<double> attend<double>(const Problem<double>&);

}  // namespace attnscope
