// Softmax rows, vectorised. The float path uses its own exp (Cephes' single-precision
// polynomial, within 2 ulp of libm on the softmax range x <= 0) written with GCC vector
// types, so it runs 8 lanes wide; target_clones builds an x86-64-v3 (AVX2 + FMA)
// version beside the portable SSE2 one and picks at load time, so the shipped binary
// needs no -march. And the library's one linear map x · W + b (linear.hpp), through BLAS.
#include "kernels.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "attnscope/core/linear.hpp"
#include "blas.hpp"

namespace attnscope::kernels {
namespace {

typedef float v8f __attribute__((vector_size(32)));
typedef int v8i __attribute__((vector_size(32)));

// exp(x) for x <= 0, lane by lane (V: 8 or 16 floats, VI: as many ints): exactly 0 for
// -inf and below exp's float range, NaN for NaN.
// (Vectors travel by reference: clang refuses 32-byte vector arguments in the SSE clone.)
template <typename V, typename VI>
inline __attribute__((always_inline)) void exp_lanes(V& x) {
    const V lo = V{} - 87.33654f;  // ln(2^-126): below it the result is not a normal float
    VI in_range = x > lo;
    V xc = in_range ? x : lo;
    // x = n ln2 + r, |r| <= ln2 / 2; n by round-to-nearest through the 1.5 * 2^23 trick.
    const V shifter = V{} + 12582912.0f;
    V n = (xc * 1.44269504088896341f + shifter) - shifter;
    V r = xc - n * 0.693359375f + n * 2.12194440e-4f;
    V p = V{} + 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    V y = p * r * r + r + 1.0f;
    VI e = (__builtin_convertvector(n, VI) + 127) << 23;  // 2^n as float bits
    V scale;
    std::memcpy(&scale, &e, sizeof scale);
    y = y * scale;
    y = in_range ? y : V{};
    x = x == x ? y : x;  // NaN stays NaN
}
inline void exp_nonpositive(v8f& x) { exp_lanes<v8f, v8i>(x); }

// Loads up to 8 floats from p (n < 8: the rest is `fill`).
inline void load8(v8f& x, const float* p, std::size_t n, float fill) {
    x = v8f{} + fill;
    std::memcpy(&x, p, std::min<std::size_t>(n, 8) * sizeof(float));
}

// e_j = exp(x_j - m) for n values (e may be x), 8 lanes; returns the lanes' sums of e. The
// tail is padded with -inf (exp gives 0).
inline __attribute__((always_inline)) v8f exp_shifted_lanes(const float* x, float m, float* e, std::size_t n) {
    v8f acc{};
    const std::size_t full = n / 8 * 8;
    for (std::size_t j = 0; j < full; j += 8) {
        v8f v;
        std::memcpy(&v, x + j, sizeof v);
        v -= m;
        exp_nonpositive(v);
        std::memcpy(e + j, &v, sizeof v);
        acc += v;
    }
    if (full < n) {
        v8f v;
        load8(v, x + full, n - full, -std::numeric_limits<float>::infinity());
        v -= m;
        exp_nonpositive(v);
        std::memcpy(e + full, &v, (n - full) * sizeof(float));
        acc += v;
    }
    return acc;
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
    // 3. exp(m - max), with 8 partial sums.
    const v8f acc = exp_shifted_lanes(w, mx, w, n);
    float sum = 0;
    for (int k = 0; k < 8; ++k) sum += acc[k];
    // 4. Normalise.
    const float inv = 1.0f / sum;
    for (std::size_t j = 0; j < n; ++j) w[j] *= inv;
    return true;
}

__attribute__((target_clones("arch=x86-64-v3", "default"))) void exp_shifted_f32(const float* x, float m, float* e,
                                                                                 std::size_t n) {
    exp_shifted_lanes(x, m, e, n);
}

// Vectors of 8 floats or 4 doubles, as wide as AVX2 registers.
template <typename T>
struct Lanes;
template <>
struct Lanes<float> {
    typedef float v __attribute__((vector_size(32)));
    static constexpr int n = 8;
};
template <>
struct Lanes<double> {
    typedef double v __attribute__((vector_size(32)));
    static constexpr int n = 4;
};

template <typename T>
inline __attribute__((always_inline)) T row_max_body(const T* x, std::size_t n) {
    typedef typename Lanes<T>::v V;
    constexpr std::size_t L = Lanes<T>::n;
    const T neg_inf = -std::numeric_limits<T>::infinity();
    V m[4];
    for (auto& v : m) v = V{} + neg_inf;
    const std::size_t full = n / (4 * L) * (4 * L);
    for (std::size_t j = 0; j < full; j += 4 * L)
        for (std::size_t k = 0; k < 4; ++k) {
            V v;
            std::memcpy(&v, x + j + k * L, sizeof v);
            m[k] = v > m[k] ? v : m[k];  // (NaN skipped)
        }
    m[0] = m[1] > m[0] ? m[1] : m[0], m[2] = m[3] > m[2] ? m[3] : m[2], m[0] = m[2] > m[0] ? m[2] : m[0];
    T r = neg_inf;
    for (std::size_t l = 0; l < L; ++l) r = m[0][l] > r ? m[0][l] : r;
    for (std::size_t j = full; j < n; ++j) r = x[j] > r ? x[j] : r;
    return r;
}

// The first k in [j, n) with x_k > t, or n, one value at a time.
template <typename T>
inline std::size_t first_above_from(const T* x, std::size_t j, std::size_t n, T t) {
    for (; j < n; ++j)
        if (x[j] > t) return j;
    return n;
}

// The first j < n with x_j > t, or n: 32 values at a time, by their largest (NaN skipped).
template <typename T>
inline __attribute__((always_inline)) std::size_t first_above_body(const T* x, std::size_t n, T t) {
    typedef typename Lanes<T>::v V;
    constexpr std::size_t L = Lanes<T>::n, C = 4 * L;
    std::size_t j = 0;
    for (; j + C <= n; j += C) {
        V a, b, c, d;
        std::memcpy(&a, x + j, sizeof a);
        std::memcpy(&b, x + j + L, sizeof b);
        std::memcpy(&c, x + j + 2 * L, sizeof c);
        std::memcpy(&d, x + j + 3 * L, sizeof d);
        a = b > a ? b : a, c = d > c ? d : c, a = c > a ? c : a;
        T r = a[0];
        for (std::size_t l = 1; l < L; ++l) r = a[l] > r ? a[l] : r;
        if (r > t) return first_above_from(x, j, n, t);  // (found within these 32)
    }
    return first_above_from(x, j, n, t);
}

// Where AVX2 is missing (with it, first_above_avx2 below).
std::size_t first_above_f32(const float* x, std::size_t n, float t) { return first_above_body(x, n, t); }

// With AVX2: 32 values by four compares and one mask test, no reduction across lanes.
__attribute__((target("avx2"))) std::size_t first_above_avx2(const float* x, std::size_t n, float t) {
    const __m256 tv = _mm256_set1_ps(t);
    std::size_t j = 0;
    for (; j + 32 <= n; j += 32) {
        const __m256 a = _mm256_cmp_ps(_mm256_loadu_ps(x + j), tv, _CMP_GT_OQ);  // (NaN: false)
        const __m256 b = _mm256_cmp_ps(_mm256_loadu_ps(x + j + 8), tv, _CMP_GT_OQ);
        const __m256 c = _mm256_cmp_ps(_mm256_loadu_ps(x + j + 16), tv, _CMP_GT_OQ);
        const __m256 d = _mm256_cmp_ps(_mm256_loadu_ps(x + j + 24), tv, _CMP_GT_OQ);
        if (_mm256_movemask_ps(_mm256_or_ps(_mm256_or_ps(a, b), _mm256_or_ps(c, d))))
            return first_above_from(x, j, n, t);  // (found within these 32)
    }
    return first_above_from(x, j, n, t);
}
__attribute__((target_clones("arch=x86-64-v3", "default"))) std::size_t first_above_f64(const double* x, std::size_t n,
                                                                                        double t) {
    return first_above_body(x, n, t);
}
__attribute__((target_clones("arch=x86-64-v3", "default"))) float row_max_f32(const float* x, std::size_t n) {
    return row_max_body(x, n);
}
__attribute__((target_clones("arch=x86-64-v3", "default"))) double row_max_f64(const double* x, std::size_t n) {
    return row_max_body(x, n);
}
// The fused exp and sums, V lanes wide (VI: as many ints).
template <typename V, typename VI>
inline __attribute__((always_inline)) ExpSums exp_sums_body(const float* x, float m, float d0, float step,
                                                            std::size_t n) {
    constexpr int L = sizeof(V) / sizeof(float);
    // x - m is clamped at -104 (below -87.3 exp gives 0): a hidden key's e (x - m) is 0, not NaN.
    const V floor = V{} - 104.0f;
    V d, ae{}, ad{}, ax{}, mx = V{} - std::numeric_limits<float>::infinity();
    for (int l = 0; l < L; ++l) d[l] = d0 + step * float(l);  // exact integers
    const V dstep = V{} + float(L) * step;
    const std::size_t full = n / L * L;
    for (std::size_t j = 0; j < full; j += L) {
        V t;
        std::memcpy(&t, x + j, sizeof t);
        mx = t > mx ? t : mx;  // (NaN skipped)
        t -= m;
        t = t < floor ? floor : t;  // (NaN stays NaN, and makes the sums NaN)
        V e = t;
        exp_lanes<V, VI>(e);
        ae += e;
        ad += e * d;
        ax += e * t;
        d += dstep;
    }
    ExpSums s;
    for (int l = 0; l < L; ++l) s.max = double(mx[l]) > s.max ? double(mx[l]) : s.max;
    for (std::size_t j = full; j < n; ++j) {
        s.max = double(x[j]) > s.max ? double(x[j]) : s.max;
        const float t = x[j] - m < -104.0f ? -104.0f : x[j] - m;
        v8f e = v8f{} + t;
        exp_nonpositive(e);
        s.e += double(e[0]), s.ed += double(e[0]) * double(d0 + step * float(j)), s.ex += double(e[0]) * double(t);
    }
    for (int l = 0; l < L; ++l) s.e += double(ae[l]), s.ed += double(ad[l]), s.ex += double(ax[l]);
    return s;
}

// 16 lanes in one AVX-512 register where the CPU has them (x86-64-v4: half the
// instructions of AVX2), else 8; chosen once, at the first call.
typedef float v16f __attribute__((vector_size(64)));
typedef int v16i __attribute__((vector_size(64)));

__attribute__((target("arch=x86-64-v4"))) ExpSums exp_sums_v4(const float* x, float m, float d0, float step,
                                                              std::size_t n) {
    return exp_sums_body<v16f, v16i>(x, m, d0, step, n);
}
__attribute__((target_clones("arch=x86-64-v3", "default"))) ExpSums exp_sums_v3(const float* x, float m, float d0,
                                                                                float step, std::size_t n) {
    return exp_sums_body<v8f, v8i>(x, m, d0, step, n);
}
bool has_avx512() {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

__attribute__((target_clones("arch=x86-64-v3", "default"))) void score_tile_v(const float* Q, std::size_t rows,
                                                                              std::size_t D, const float* Kp,
                                                                              std::size_t p0, std::size_t p1,
                                                                              float scale, float* S, std::size_t ldc) {
    for (std::size_t r0 = 0; r0 < rows; r0 += kRows)
        for (std::size_t p = p0; p < p1; ++p) {
            const float* A = Q + r0 * D;
            const float* B = Kp + p * D * kPanel;
            v8f c[kRows][2] = {};
            for (std::size_t d = 0; d < D; ++d) {
                v8f b0, b1;
                std::memcpy(&b0, B + d * kPanel, sizeof b0);
                std::memcpy(&b1, B + d * kPanel + 8, sizeof b1);
#pragma GCC unroll 6
                for (std::size_t r = 0; r < kRows; ++r) {
                    const float q = A[r * D + d];
                    const v8f a = {q, q, q, q, q, q, q, q};  // a broadcast (not 0 + q: -0 + 0 is not -0)
                    c[r][0] += a * b0;
                    c[r][1] += a * b1;
                }
            }
            float* out = S + r0 * ldc + (p - p0) * kPanel;
#pragma GCC unroll 6
            for (std::size_t r = 0; r < kRows; ++r) {
                const v8f lo = c[r][0] * scale, hi = c[r][1] * scale;
                std::memcpy(out + r * ldc, &lo, sizeof lo);
                std::memcpy(out + r * ldc + 8, &hi, sizeof hi);
            }
        }
}

}  // namespace

void pack_keys(const float* K, std::size_t n, std::size_t ld, std::size_t D, float* out) {
    const std::size_t panels = (n + kPanel - 1) / kPanel;
    for (std::size_t p = 0; p < panels; ++p)
        for (std::size_t k = 0; k < kPanel; ++k) {
            const std::size_t j = p * kPanel + k;
            float* to = out + p * D * kPanel + k;
            if (j < n)
                for (std::size_t d = 0; d < D; ++d) to[d * kPanel] = K[j * ld + d];
            else
                for (std::size_t d = 0; d < D; ++d) to[d * kPanel] = 0.0f;
        }
}

void score_tile(const float* Q, std::size_t rows, std::size_t D, const float* Kp, std::size_t p0, std::size_t p1,
                float scale, float* S, std::size_t ldc) {
    score_tile_v(Q, rows, D, Kp, p0, p1, scale, S, ldc);
}

void exp_shifted(const float* x, float m, float* e, std::size_t n) { exp_shifted_f32(x, m, e, n); }
void exp_shifted(const double* x, double m, double* e, std::size_t n) {
    for (std::size_t j = 0; j < n; ++j) e[j] = std::exp(x[j] - m);  // exp(-inf) = 0 exactly
}
float row_max(const float* x, std::size_t n) { return row_max_f32(x, n); }
double row_max(const double* x, std::size_t n) { return row_max_f64(x, n); }
std::size_t first_above(const float* x, std::size_t n, float t) {
    static const bool avx2 = (__builtin_cpu_init(), __builtin_cpu_supports("avx2"));
    return avx2 ? first_above_avx2(x, n, t) : first_above_f32(x, n, t);
}
std::size_t first_above(const double* x, std::size_t n, double t) { return first_above_f64(x, n, t); }
ExpSums exp_sums(const float* x, float m, float d0, float step, std::size_t n) {
    static const bool wide = has_avx512();
    return wide ? exp_sums_v4(x, m, d0, step, n) : exp_sums_v3(x, m, d0, step, n);
}
ExpSums exp_sums(const double* x, double m, double d0, double step, std::size_t n) {
    double ae[4] = {}, ad[4] = {}, ax[4] = {}, mx = -std::numeric_limits<double>::infinity();
    const std::size_t full = n / 4 * 4;
    for (std::size_t j = 0; j < full; j += 4)
        for (std::size_t l = 0; l < 4; ++l) {
            mx = x[j + l] > mx ? x[j + l] : mx;
            const double t = x[j + l] - m, e = std::exp(t);
            ae[l] += e, ad[l] += e * (d0 + step * double(j + l));
            ax[l] += e > 0 ? e * t : 0.0;  // a hidden key: 0, not 0 · -inf
        }
    ExpSums s;
    for (std::size_t j = full; j < n; ++j) {
        mx = x[j] > mx ? x[j] : mx;
        const double t = x[j] - m, e = std::exp(t);
        s.e += e, s.ed += e * (d0 + step * double(j)), s.ex += e > 0 ? e * t : 0.0;
    }
    for (std::size_t l = 0; l < 4; ++l) s.e += ae[l], s.ed += ad[l], s.ex += ax[l];
    s.max = mx;
    return s;
}

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

namespace attnscope {
namespace {

// Y = b (each row) + X · W or X · Wᵀ: the bias first, then one product with beta = 1.
template <typename T>
void linear_map(const T* X, std::size_t rows, std::size_t ldx, const T* W, std::size_t in, std::size_t out,
                Layout layout, const T* b, T* Y, std::size_t ldy) {
    if (b)
        for (std::size_t r = 0; r < rows; ++r) std::copy(b, b + out, Y + r * ldy);
    const bool torch = layout == Layout::torch;  // W (out, in): rows of W are outputs
    gemm<T>(false, torch, rows, out, in, T(1), X, ldx, W, torch ? in : out, b ? T(1) : T(0), Y, ldy);
}

}  // namespace

void linear(const float* X, std::size_t rows, std::size_t ldx, const float* W, std::size_t in, std::size_t out,
            Layout layout, const float* b, float* Y, std::size_t ldy) {
    linear_map(X, rows, ldx, W, in, out, layout, b, Y, ldy);
}
void linear(const double* X, std::size_t rows, std::size_t ldx, const double* W, std::size_t in, std::size_t out,
            Layout layout, const double* b, double* Y, std::size_t ldy) {
    linear_map(X, rows, ldx, W, in, out, layout, b, Y, ldy);
}

}  // namespace attnscope
