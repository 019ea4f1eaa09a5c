// ggml's tensor types and their dequantization (io/gguf.hpp).
//
// Block layouts and formulas as ggml defines them (ggml-common.h's block_* structs,
// ggml-quants.c's dequantize_row_*): every block is read byte by byte (little-endian,
// any alignment), and each value is computed in float32 in the same order of operations,
// so the results are ggml's bit for bit. This file is compiled with -ffp-contract=off:
// a fused multiply-add would round once where ggml rounds twice.
#include <array>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "attnscope/io/gguf.hpp"
#include "bytes.hpp"

namespace attnscope {
namespace {

using io_detail::bf16_to_float;
using io_detail::half_to_float;

constexpr std::uint32_t kQK = 32;    // elements per block of the simple quantizations
constexpr std::uint32_t kQKK = 256;  // elements per super-block of the k-quants

// Every type a GGUF file may name (ggml.h's ggml_type; numbers 4, 5, 31-33 and 36-38 are
// gone from ggml and refused as unknown).
constexpr GgmlType kTypes[] = {
    {0, "F32", 1, 4, true},           {1, "F16", 1, 2, true},           {2, "Q4_0", kQK, 18, true},
    {3, "Q4_1", kQK, 20, true},       {6, "Q5_0", kQK, 22, true},       {7, "Q5_1", kQK, 24, true},
    {8, "Q8_0", kQK, 34, true},       {9, "Q8_1", kQK, 36, false},      {10, "Q2_K", kQKK, 84, true},
    {11, "Q3_K", kQKK, 110, true},    {12, "Q4_K", kQKK, 144, true},    {13, "Q5_K", kQKK, 176, true},
    {14, "Q6_K", kQKK, 210, true},    {15, "Q8_K", kQKK, 292, false},   {16, "IQ2_XXS", kQKK, 66, false},
    {17, "IQ2_XS", kQKK, 74, false},  {18, "IQ3_XXS", kQKK, 98, false}, {19, "IQ1_S", kQKK, 50, false},
    {20, "IQ4_NL", kQK, 18, false},   {21, "IQ3_S", kQKK, 110, false},  {22, "IQ2_S", kQKK, 82, false},
    {23, "IQ4_XS", kQKK, 136, false}, {24, "I8", 1, 1, true},           {25, "I16", 1, 2, true},
    {26, "I32", 1, 4, true},          {27, "I64", 1, 8, true},          {28, "F64", 1, 8, true},
    {29, "IQ1_M", kQKK, 56, false},   {30, "BF16", 1, 2, true},         {34, "TQ1_0", kQKK, 54, false},
    {35, "TQ2_0", kQKK, 66, false},   {39, "MXFP4", kQK, 17, false},    {40, "NVFP4", 64, 36, false},
    {41, "Q1_0", 128, 18, false},
};

using U8 = const unsigned char*;

float f16_at(U8 p) { return half_to_float(std::uint16_t(p[0] | p[1] << 8)); }

// ---- the 32-element blocks ----------------------------------------------------------------

// Q4_0: d (f16), qs[16]; element j is (qs[j] & 15) - 8, element j + 16 is (qs[j] >> 4) - 8,
// each times d. Q4_1 adds m (f16 after d) instead of subtracting 8.
void q4_0(U8 b, float* y) {
    const float d = f16_at(b);
    for (int j = 0; j < 16; ++j) {
        y[j] = float((b[2 + j] & 0x0f) - 8) * d;
        y[j + 16] = float((b[2 + j] >> 4) - 8) * d;
    }
}
void q4_1(U8 b, float* y) {
    const float d = f16_at(b), m = f16_at(b + 2);
    for (int j = 0; j < 16; ++j) {
        y[j] = float(b[4 + j] & 0x0f) * d + m;
        y[j + 16] = float(b[4 + j] >> 4) * d + m;
    }
}
// Q5_0: d, qh (32 high bits, little-endian), qs[16]: the low nibbles as Q4_0's, bit j of qh
// the fifth bit of element j, bit j + 16 that of element j + 16; minus 16, times d. Q5_1:
// d, m, qh, qs; plus m.
void q5_0(U8 b, float* y) {
    const float d = f16_at(b);
    const std::uint32_t qh =
        std::uint32_t(io_detail::load_le(std::string_view(reinterpret_cast<const char*>(b), 6), 2, 4));
    for (int j = 0; j < 16; ++j) {
        const int h0 = int((qh >> j) << 4 & 0x10), h1 = int(qh >> (j + 12) & 0x10);
        y[j] = float(((b[6 + j] & 0x0f) | h0) - 16) * d;
        y[j + 16] = float(((b[6 + j] >> 4) | h1) - 16) * d;
    }
}
void q5_1(U8 b, float* y) {
    const float d = f16_at(b), m = f16_at(b + 2);
    const std::uint32_t qh =
        std::uint32_t(io_detail::load_le(std::string_view(reinterpret_cast<const char*>(b), 8), 4, 4));
    for (int j = 0; j < 16; ++j) {
        const int h0 = int((qh >> j) << 4 & 0x10), h1 = int(qh >> (j + 12) & 0x10);
        y[j] = float((b[8 + j] & 0x0f) | h0) * d + m;
        y[j + 16] = float((b[8 + j] >> 4) | h1) * d + m;
    }
}
// Q8_0: d, qs[32] (int8); element j is qs[j] times d.
void q8_0(U8 b, float* y) {
    const float d = f16_at(b);
    for (int j = 0; j < 32; ++j) y[j] = float(std::int8_t(b[2 + j])) * d;
}

// ---- the k-quants (256-element super-blocks) ------------------------------------------------

// Q2_K: scales[16] (low nibble a scale, high nibble a min), qs[64] (2 bits each), d, dmin.
// 16 groups of 16: dl = d * scale, ml = dmin * min, element = dl * q - ml.
void q2_k(U8 b, float* y) {
    const U8 scales = b, qs = b + 16;
    const float d = f16_at(b + 80), min = f16_at(b + 82);
    int is = 0;
    for (int n = 0; n < 2; ++n) {  // two halves of 128, each from 32 bytes of qs
        const U8 q = qs + 32 * n;
        for (int shift = 0; shift < 8; shift += 2)
            for (int half = 0; half < 2; ++half) {
                const int sc = scales[is++];
                const float dl = d * float(sc & 0xf), ml = min * float(sc >> 4);
                for (int l = 0; l < 16; ++l) *y++ = dl * float((q[l + 16 * half] >> shift) & 3) - ml;
            }
    }
}

// Q3_K's 16 six-bit scales, unpacked from its 12 bytes as ggml does (kmask1 0x03030303,
// kmask2 0x0f0f0f0f over four little-endian words): the low 4 bits from bytes 0-7, the
// high 2 from bytes 8-11.
std::array<int, 16> q3_k_scales(U8 s) {
    std::uint32_t aux[3];
    for (int k = 0; k < 3; ++k)
        aux[k] = std::uint32_t(s[4 * k] | s[4 * k + 1] << 8 | s[4 * k + 2] << 16) | std::uint32_t(s[4 * k + 3]) << 24;
    const std::uint32_t m1 = 0x03030303, m2 = 0x0f0f0f0f, tmp = aux[2];
    const std::uint32_t w[4] = {(aux[0] & m2) | ((tmp >> 0 & m1) << 4), (aux[1] & m2) | ((tmp >> 2 & m1) << 4),
                                (aux[0] >> 4 & m2) | ((tmp >> 4 & m1) << 4),
                                (aux[1] >> 4 & m2) | ((tmp >> 6 & m1) << 4)};
    std::array<int, 16> out{};
    for (int k = 0; k < 16; ++k) out[std::size_t(k)] = int(std::int8_t(std::uint8_t(w[k / 4] >> (8 * (k % 4)))));
    return out;
}

// Q3_K: hmask[32], qs[64], scales[12], d. 16 groups of 16: dl = d * (scale - 32),
// element = dl * (q2 - (high bit set ? 0 : 4)).
void q3_k(U8 b, float* y) {
    const U8 hm = b, qs = b + 32;
    const std::array<int, 16> sc = q3_k_scales(b + 96);
    const float d_all = f16_at(b + 108);
    int is = 0;
    unsigned m = 1;
    for (int n = 0; n < 2; ++n) {
        const U8 q = qs + 32 * n;
        for (int shift = 0; shift < 8; shift += 2, m <<= 1)
            for (int half = 0; half < 2; ++half) {
                const float dl = d_all * float(sc[std::size_t(is++)] - 32);
                for (int l = 0; l < 16; ++l) {
                    const int k = l + 16 * half;
                    *y++ = dl * float(((q[k] >> shift) & 3) - ((hm[k] & m) ? 0 : 4));
                }
            }
    }
}

// The j-th (0..7) six-bit scale and min of Q4_K and Q5_K, from their 12 bytes.
void scale_min_k4(int j, U8 q, int& sc, int& m) {
    if (j < 4) {
        sc = q[j] & 63;
        m = q[j + 4] & 63;
    } else {
        sc = (q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4);
        m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

// Q4_K: d, dmin, scales[12], qs[128]. 8 groups of 32: element = d * scale * q - dmin * min,
// as (d * scale) * q - (dmin * min); the low nibbles of 32 bytes, then their high nibbles.
// Q5_K: d, dmin, scales[12], qh[32], qs[128]: the fifth bit of group g's element l is bit
// g of qh[l], worth 16.
void q45_k(U8 b, float* y, bool five) {
    const float d = f16_at(b), min = f16_at(b + 2);
    const U8 scales = b + 4, qh = b + 16, ql = five ? b + 48 : b + 16;
    for (int g = 0; g < 8; g += 2) {
        int sc = 0, m = 0;
        const U8 q = ql + 16 * g;  // 32 bytes per pair of groups
        for (int h = 0; h < 2; ++h) {
            scale_min_k4(g + h, scales, sc, m);
            const float d1 = d * float(sc), m1 = min * float(m);
            for (int l = 0; l < 32; ++l) {
                const int low = h == 0 ? q[l] & 0xf : q[l] >> 4;
                const int high = five && (qh[l] >> (g + h) & 1) ? 16 : 0;
                *y++ = d1 * float(low + high) - m1;
            }
        }
    }
}

// Q6_K: ql[128], qh[64], scales[16] (int8), d. Each half of 128 takes 64 bytes of ql and
// 32 of qh; element = d * scale * (six bits - 32), as (d * scale) * q.
void q6_k(U8 b, float* y) {
    const float d = f16_at(b + 208);
    for (int n = 0; n < 2; ++n, y += 128) {
        const U8 ql = b + 64 * n, qh = b + 128 + 32 * n;
        const U8 sc = b + 192 + 8 * n;
        for (int l = 0; l < 32; ++l) {
            const int is = l / 16;
            const int q1 = ((ql[l] & 0xf) | ((qh[l] >> 0 & 3) << 4)) - 32;
            const int q2 = ((ql[l + 32] & 0xf) | ((qh[l] >> 2 & 3) << 4)) - 32;
            const int q3 = ((ql[l] >> 4) | ((qh[l] >> 4 & 3) << 4)) - 32;
            const int q4 = ((ql[l + 32] >> 4) | ((qh[l] >> 6 & 3) << 4)) - 32;
            y[l] = d * float(std::int8_t(sc[is])) * float(q1);
            y[l + 32] = d * float(std::int8_t(sc[is + 2])) * float(q2);
            y[l + 64] = d * float(std::int8_t(sc[is + 4])) * float(q3);
            y[l + 96] = d * float(std::int8_t(sc[is + 6])) * float(q4);
        }
    }
}

using BlockFn = void (*)(U8, float*);
void q4_k(U8 b, float* y) { q45_k(b, y, false); }
void q5_k(U8 b, float* y) { q45_k(b, y, true); }

// The block function of a quantized readable type, or null for the plain ones.
BlockFn block_fn(std::uint32_t id) {
    switch (id) {
        case 2:
            return q4_0;
        case 3:
            return q4_1;
        case 6:
            return q5_0;
        case 7:
            return q5_1;
        case 8:
            return q8_0;
        case 10:
            return q2_k;
        case 11:
            return q3_k;
        case 12:
            return q4_k;
        case 13:
            return q5_k;
        case 14:
            return q6_k;
        default:
            return nullptr;
    }
}

}  // namespace

const GgmlType* ggml_type(std::uint32_t id) {
    for (const GgmlType& t : kTypes)
        if (t.id == id) return &t;
    return nullptr;
}

std::string_view ggml_readable_types() {
    return "F32, F16, BF16, F64, I8, I16, I32, I64, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K or Q6_K";
}

void ggml_dequantize(const GgmlType& type, const char* blocks, std::size_t count, float* out) {
    const U8 p = reinterpret_cast<U8>(blocks);
    if (type.id == 0) {
        std::memcpy(out, blocks, count * 4);
        return;
    }
    if (type.id == 1 || type.id == 30) {
        for (std::size_t k = 0; k < count; ++k) {
            const auto h = std::uint16_t(p[2 * k] | p[2 * k + 1] << 8);
            out[k] = type.id == 1 ? half_to_float(h) : bf16_to_float(h);
        }
        return;
    }
    const BlockFn fn = block_fn(type.id);
    if (!fn) return;
    for (std::size_t b = 0; b < count / type.block; ++b) fn(p + b * type.block_bytes, out + b * type.block);
}

}  // namespace attnscope
