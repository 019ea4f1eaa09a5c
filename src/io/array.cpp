// Arrays as read: shape spelling, byte counts, and copying their numbers out.
#include "attnscope/io/array.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "attnscope/base/errors.hpp"
#include "bytes.hpp"

namespace attnscope {

std::string shape_str(const std::vector<std::size_t>& shape) {
    std::string s = "(";
    for (std::size_t i = 0; i < shape.size(); ++i) {
        if (i) s += ", ";
        s += std::to_string(shape[i]);
    }
    if (shape.size() == 1) s += ",";
    return s + ")";
}

std::string format_bytes(std::size_t bytes) {
    const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    double v = double(bytes);
    int u = 0;
    while (v >= 1024 && u < 6) v /= 1024, ++u;
    char buf[48];
    if (u == 0)
        std::snprintf(buf, sizeof buf, "%zu bytes", bytes);
    else
        std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
    return buf;
}

// ---- numbers of an Array ----------------------------------------------------------------
namespace {

template <typename S>
S load_at(const char* p, std::size_t k) {
    S v;
    std::memcpy(&v, p + k * sizeof(S), sizeof(S));
    return v;
}

// Counts the numbers in src[0, m) that are NaN or beyond `largest` in magnitude; `base`
// is the array index of src[0]. A vectorisable test first: most chunks hold none.
template <typename S>
void scan(const S* src, std::size_t m, std::size_t base, S largest, NonFinite& nf) {
    unsigned any = 0;
    for (std::size_t k = 0; k < m; ++k) any |= !(std::fabs(src[k]) <= largest);
    if (!any) return;
    for (std::size_t k = 0; k < m; ++k)
        if (!(std::fabs(src[k]) <= largest) && nf.count++ == 0) {
            nf.first = base + k;
            nf.first_value = double(src[k]);
        }
}

// Copies m stored numbers of type S (unaligned bytes at p) to out[b, b + m) as T, and
// scans them for values NaN, infinite or beyond `largest`.
constexpr std::size_t kChunk = 2048;  // numbers per step: a chunk is scanned while in cache
template <typename S, typename T>
void copy_stored(const char* p, T* out, std::size_t m, std::size_t b, S largest, NonFinite& nf) {
    if constexpr (std::is_same_v<S, T>) {
        std::memcpy(out + b, p, m * sizeof(S));
        scan(out + b, m, b, largest, nf);
    } else {
        S buf[kChunk];
        std::memcpy(buf, p, m * sizeof(S));
        for (std::size_t k = 0; k < m; ++k) out[b + k] = static_cast<T>(buf[k]);
        scan(buf, m, b, largest, nf);
    }
}

// Copies m stored half-precision numbers (float16 or bfloat16, unaligned bytes at p,
// widened exactly by `to_float`) to out[b, b + m) as T, and scans them as floats.
template <typename T, typename F>
void copy_halves(const char* p, T* out, std::size_t m, std::size_t b, F to_float, NonFinite& nf) {
    std::uint16_t bits[kChunk];
    float buf[kChunk];
    std::memcpy(bits, p, m * sizeof(std::uint16_t));
    for (std::size_t k = 0; k < m; ++k) buf[k] = to_float(bits[k]);
    for (std::size_t k = 0; k < m; ++k) out[b + k] = static_cast<T>(buf[k]);
    scan(buf, m, b, std::numeric_limits<float>::max(), nf);
}

}  // namespace

double Array::value(std::size_t k) const {
    switch (held) {
        case Held::float32:
            return double(load_at<float>(stored.data(), k));
        case Held::float64:
            return load_at<double>(stored.data(), k);
        case Held::float16:
            return io_detail::half_to_double(load_at<std::uint16_t>(stored.data(), k));
        case Held::bfloat16:
            return io_detail::bf16_to_double(load_at<std::uint16_t>(stored.data(), k));
        case Held::doubles:
            break;
    }
    return values[k];
}

std::vector<double> Array::doubles() const {
    std::vector<double> out(count());
    copy_numbers<double>(*this, out.data());
    return out;
}

template <typename T>
NonFinite copy_numbers(const Array& a, T* out) {
    // Chunk by chunk, so each chunk is scanned while it is still in cache. Stored bytes
    // need not be aligned (an .npz member starts anywhere): they are only memcpy'd.
    const std::size_t n = a.count();
    const T largest = std::numeric_limits<T>::max();
    NonFinite nf;
    for (std::size_t b = 0; b < n; b += kChunk) {
        const std::size_t m = std::min(kChunk, n - b);
        switch (a.held) {
            case Array::Held::doubles: {
                const double* v = a.values.data() + b;
                for (std::size_t k = 0; k < m; ++k) out[b + k] = static_cast<T>(v[k]);
                scan(v, m, b, double(largest), nf);
                break;
            }
            case Array::Held::float32:
                // A float within float's range is within T's: the test is float's own.
                copy_stored<float>(a.stored.data() + b * sizeof(float), out, m, b, std::numeric_limits<float>::max(),
                                   nf);
                break;
            case Array::Held::float64:
                copy_stored<double>(a.stored.data() + b * sizeof(double), out, m, b, double(largest), nf);
                break;
            case Array::Held::float16:
                copy_halves(a.stored.data() + b * 2, out, m, b, io_detail::half_to_float, nf);
                break;
            case Array::Held::bfloat16:
                copy_halves(a.stored.data() + b * 2, out, m, b, io_detail::bf16_to_float, nf);
                break;
        }
    }
    return nf;
}

template NonFinite copy_numbers<float>(const Array&, float*);
template NonFinite copy_numbers<double>(const Array&, double*);

}  // namespace attnscope
