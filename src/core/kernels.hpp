// Hot loops of the core on contiguous rows. Internal to the library.
#pragma once

#include <cstddef>

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

}  // namespace attnscope::kernels
