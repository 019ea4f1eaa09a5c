// The operations of a block, in the run's precision T (float or double): linear maps,
// LayerNorm and RMSNorm, activations.
#include <cmath>
#include <numbers>

#include "attnscope/base/errors.hpp"
#include "attnscope/core/linear.hpp"
#include "lm.hpp"

namespace attnscope::lm {

template <class T>
Tensor<T, 2> apply(const Linear<T>& l, const Tensor<T, 2>& x) {
    // x (T, in) · W (in, out), or x (T, in) · Wᵀ for W stored (out, in) -> (T, out)
    const std::size_t n = x.shape(0);
    if (x.shape(1) != l.in)
        throw RuntimeFailure("linear map: input width " + std::to_string(x.shape(1)) + ", expected " +
                             std::to_string(l.in));
    Tensor<T, 2> y = Tensor<T, 2>::from_shape({n, l.out});
    linear(x.data(), n, l.in, l.w.data(), l.in, l.out, l.torch ? Layout::torch : Layout::math,
           l.b.empty() ? nullptr : l.b.data(), y.data(), l.out);
    return y;
}

template <class T>
void apply(const Norm<T>& n, Tensor<T, 2>& x) {
    const std::size_t R = x.shape(0), D = x.shape(1);
    const T eps = T(n.eps);
    for (std::size_t t = 0; t < R; ++t) {
        T* row = &x(t, 0);
        T mean = 0;
        if (!n.rms) {
            for (std::size_t d = 0; d < D; ++d) mean += row[d];
            mean /= T(D);
        }
        T sq = 0;  // mean((x - mean)²), or mean(x²) for RMSNorm
        for (std::size_t d = 0; d < D; ++d) sq += (row[d] - mean) * (row[d] - mean);
        const T inv = T(1) / std::sqrt(sq / T(D) + eps);
        for (std::size_t d = 0; d < D; ++d) row[d] = (row[d] - mean) * inv * n.w[d] + (n.rms ? T(0) : n.b[d]);
    }
}

template <class T>
void activate(Activation a, Tensor<T, 2>& x) {
    const T c = T(std::sqrt(2.0 / std::numbers::pi)), half = T(0.5), one = T(1), cube = T(0.044715);
    for (T& v : x) {
        switch (a) {
            case Activation::gelu_tanh:
                v = half * v * (one + std::tanh(c * (v + cube * v * v * v)));
                break;
            case Activation::gelu_erf:
                v = half * v * (one + std::erf(v / std::numbers::sqrt2_v<T>));
                break;
            case Activation::silu:
                v = v / (one + std::exp(-v));
                break;
            case Activation::relu:
                v = v > 0 ? v : T(0);
                break;
        }
    }
}

template Tensor<float, 2> apply<float>(const Linear<float>&, const Tensor<float, 2>&);
template Tensor<double, 2> apply<double>(const Linear<double>&, const Tensor<double, 2>&);
template void apply<float>(const Norm<float>&, Tensor<float, 2>&);
template void apply<double>(const Norm<double>&, Tensor<double, 2>&);
template void activate<float>(Activation, Tensor<float, 2>&);
template void activate<double>(Activation, Tensor<double, 2>&);

}  // namespace attnscope::lm
