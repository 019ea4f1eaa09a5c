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
