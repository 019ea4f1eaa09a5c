// The operations of a block, in float64: linear maps, LayerNorm and RMSNorm, activations.
#include <cmath>
#include <numbers>

#include "../core/blas.hpp"
#include "attnscope/base/errors.hpp"
#include "lm.hpp"

namespace attnscope::lm {

Tensor<double, 2> apply(const Linear& l, const Tensor<double, 2>& x) {
    // x (T, in) · W (in, out), or x (T, in) · Wᵀ for W stored (out, in) -> (T, out)
    const std::size_t T = x.shape(0);
    if (x.shape(1) != l.in)
        throw RuntimeFailure("linear map: input width " + std::to_string(x.shape(1)) + ", expected " +
                             std::to_string(l.in));
    Tensor<double, 2> y = Tensor<double, 2>::from_shape({T, l.out});
    gemm<double>(false, l.torch, T, l.out, l.in, 1.0, x.data(), l.in, l.w.data(), l.torch ? l.in : l.out, 0.0, y.data(),
                 l.out);
    if (!l.b.empty())
        for (std::size_t t = 0; t < T; ++t)
            for (std::size_t o = 0; o < l.out; ++o) y(t, o) += l.b[o];
    return y;
}

void apply(const Norm& n, Tensor<double, 2>& x) {
    const std::size_t T = x.shape(0), D = x.shape(1);
    for (std::size_t t = 0; t < T; ++t) {
        double* row = &x(t, 0);
        double mean = 0;
        if (!n.rms) {
            for (std::size_t d = 0; d < D; ++d) mean += row[d];
            mean /= double(D);
        }
        double sq = 0;  // mean((x - mean)²), or mean(x²) for RMSNorm
        for (std::size_t d = 0; d < D; ++d) sq += (row[d] - mean) * (row[d] - mean);
        const double inv = 1.0 / std::sqrt(sq / double(D) + n.eps);
        for (std::size_t d = 0; d < D; ++d) row[d] = (row[d] - mean) * inv * n.w[d] + (n.rms ? 0.0 : n.b[d]);
    }
}

void activate(Activation a, Tensor<double, 2>& x) {
    const double c = std::sqrt(2.0 / std::numbers::pi);
    for (double& v : x) {
        switch (a) {
            case Activation::gelu_tanh:
                v = 0.5 * v * (1.0 + std::tanh(c * (v + 0.044715 * v * v * v)));
                break;
            case Activation::gelu_erf:
                v = 0.5 * v * (1.0 + std::erf(v / std::numbers::sqrt2));
                break;
            case Activation::silu:
                v = v / (1.0 + std::exp(-v));
                break;
            case Activation::relu:
                v = v > 0 ? v : 0.0;
                break;
        }
    }
}

}  // namespace attnscope::lm
