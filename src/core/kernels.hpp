// Hot loops of the core on contiguous rows. Internal to the library.
#pragma once

#include <cmath>
#include <cstddef>
#include <limits>

namespace attnscope::kernels {

// One row of masked softmax over n keys.
//   s        scores row                           (n)
//   visible  true where the key may be seen, or nullptr when every key may be
//   masked   out: s with -inf where not visible   (n), or nullptr when not wanted
//   w        out: softmax over the visible keys    (n); may alias s
// w_j = exp(m_j - max) / sum_k exp(m_k - max) with m = masked scores. Returns false,
// with w all zero, when no key is visible. NaN in s propagates to the whole row.
bool masked_softmax_row(const float* s, const bool* visible, float* masked, float* w, std::size_t n);
bool masked_softmax_row(const double* s, const bool* visible, double* masked, double* w, std::size_t n);

// e_j = exp(x_j - m) for n values x_j <= m + 64: exactly 0 where x_j is -inf, NaN for NaN.
// (float: the same exp as the softmax's.)
void exp_shifted(const float* x, float m, float* e, std::size_t n);
void exp_shifted(const double* x, double m, double* e, std::size_t n);

// The largest of n values, NaN skipped; -inf when there is none.
float row_max(const float* x, std::size_t n);
double row_max(const double* x, std::size_t n);
// The first j < n with x_j > t, or n.
std::size_t first_above(const float* x, std::size_t n, float t);
std::size_t first_above(const double* x, std::size_t n, double t);

// Over n keys with logits x_j and distances d_j = d0 + step·j, with e_j = exp(x_j - m)
// (0 for -inf, and for float below its normal range; x_j - m may exceed 0 by up to 64):
// Σ e_j, Σ e_j d_j and Σ e_j (x_j - m), in one pass, each summed in the values' precision
// (16 or 8 lanes) and added up in double; and the largest x_j (NaN skipped; -inf for none).
struct ExpSums {
    double e = 0, ed = 0, ex = 0, max = -std::numeric_limits<double>::infinity();
};
ExpSums exp_sums(const float* x, float m, float d0, float step, std::size_t n);
ExpSums exp_sums(const double* x, double m, double d0, double step, std::size_t n);

// Scores of a tile of queries against keys packed in panels of kPanel (float).
//   pack_keys:  K (n keys, row stride ld, D features) -> out, ceil(n / kPanel) panels of
//               D x kPanel values (key k of a panel at feature d: out[(p·D + d)·kPanel + k]),
//               keys past n zero
//   score_tile: S[r, k] = scale · Σ_d Q[r, d] · K[16·p0 + k, d] for rows r < rows (a multiple
//               of kRows; Q contiguous, D per row) and the keys of panels [p0, p1); S's
//               rows have stride ldc >= (p1 - p0)·kPanel.
// Register tiles of kRows x kPanel accumulate in 8-lane vectors (AVX2 + FMA where the CPU
// has them): each of a query's features is read once per panel, each key's once per kRows.
constexpr std::size_t kPanel = 16, kRows = 6;
void pack_keys(const float* K, std::size_t n, std::size_t ld, std::size_t D, float* out);
void score_tile(const float* Q, std::size_t rows, std::size_t D, const float* Kp, std::size_t p0, std::size_t p1,
                float scale, float* S, std::size_t ldc);

// One row of softmax with a sink (gpt-oss): the head's sink logit s joins the denominator
// only. w_j = exp(m_j - M) / (sum_k exp(m_k - M) + exp(s - M)), M = max(max_k m_k, s);
// the sink's share (*sink_share, when wanted) is the rest of 1. Arguments as for
// masked_softmax_row; a row with no visible key gives all of it to the sink. Returns
// whether any key was visible.
template <typename T>
bool sink_softmax_row(const T* s, const bool* visible, T* masked, T* w, std::size_t n, T sink, T* sink_share) {
    const T neg_inf = -std::numeric_limits<T>::infinity();
    T mx = neg_inf;
    bool any = false;
    for (std::size_t j = 0; j < n; ++j) {
        const bool seen = !visible || visible[j];
        const T v = seen ? s[j] : neg_inf;
        any |= seen;
        if (masked) masked[j] = v;
        w[j] = v;
        mx = v > mx ? v : mx;
    }
    const T M = mx > sink ? mx : sink;
    T sum = 0;
    for (std::size_t j = 0; j < n; ++j) {
        w[j] = std::exp(w[j] - M);
        sum += w[j];
    }
    const T c = std::exp(sink - M), total = sum + c;
    for (std::size_t j = 0; j < n; ++j) w[j] /= total;
    if (sink_share) *sink_share = c / total;
    return any;
}

}  // namespace attnscope::kernels
