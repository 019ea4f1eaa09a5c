// attnscope — core: the one linear map y = x · W + b of the library, BLAS-backed. The
// attention's projections (attention.cpp), the decoder's (decode.cpp) and a model's
// linear layers (lm) all call it, so they round alike.
#pragma once

#include <cstddef>

#include "attnscope/model/model.hpp"  // Layout

namespace attnscope {

// Y (rows, out; rows ldy apart) = X (rows, in; rows ldx apart) · W + b, with W contiguous
// in the math layout (in, out) or as torch's nn.Linear stores it (out, in) (then x · Wᵀ),
// and b (out) or nullptr. The bias is Y's starting value, to which one BLAS product adds
// x · W. The product runs on BLAS's own threads (blas_threads in the core); the caller
// splits rows among its threads when it wants.
void linear(const float* X, std::size_t rows, std::size_t ldx, const float* W, std::size_t in, std::size_t out,
            Layout layout, const float* b, float* Y, std::size_t ldy);
void linear(const double* X, std::size_t rows, std::size_t ldx, const double* W, std::size_t in, std::size_t out,
            Layout layout, const double* b, double* Y, std::size_t ldy);

}  // namespace attnscope
