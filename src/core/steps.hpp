// Core: the steps of attention that the full run (attend), its per-row summaries and the
// KV-cache decoder share, written once: RoPE's rotation and the logit rewrite
// (softcap -> bias -> mask). ALiBi's term is model.hpp's alibi_term (Problem::bias_row).
#pragma once

#include <cmath>
#include <cstddef>
#include <limits>
#include <memory>
#include <optional>
#include <vector>

#include "attnscope/model/model.hpp"

namespace attnscope::steps {

// RoPE: in each head's first R features, pair (j, j + R/2) (half) or (2j, 2j + 1)
// (interleaved) rotates by the angle position · inv_freq_j, inv_freq_j = θ^(-2j/R) (or a
// scaled RoPE's own frequencies), both in the run's precision; cos and sin are multiplied by
// the rope's attention factor (1 unless scaled).
template <typename T>
class RopeRotation {
   public:
    RopeRotation(const Rope& rope, std::size_t R)
        : R_(R), interleaved_(rope.style == RopeStyle::interleaved), factor_(T(rope.attention_factor)) {
        inv_freq_.resize(R / 2);
        for (std::size_t j = 0; j < R / 2; ++j)
            inv_freq_[j] = rope.inv_freq.empty() ? T(1) / std::pow(T(rope.base), T(2 * j) / T(R)) : T(rope.inv_freq[j]);
    }

    // row: (heads, D) features of one position, D >= R; rotated in place.
    void operator()(T* row, std::size_t heads, std::size_t D, long long position) const {
        const std::size_t half = R_ / 2;
        for (std::size_t j = 0; j < half; ++j) {
            const T angle = T(position) * inv_freq_[j];
            const T c = std::cos(angle) * factor_, sn = std::sin(angle) * factor_;
            for (std::size_t h = 0; h < heads; ++h) {
                T& x1 = row[h * D + (interleaved_ ? 2 * j : j)];
                T& x2 = row[h * D + (interleaved_ ? 2 * j + 1 : j + half)];
                const T a = x1, b = x2;
                x1 = a * c - b * sn;
                x2 = b * c + a * sn;
            }
        }
    }

   private:
    std::size_t R_;
    bool interleaved_;
    T factor_;                 // cos and sin multiplied by it (1 but for a scaled RoPE)
    std::vector<T> inv_freq_;  // (R/2)
};

// Per-head RMSNorm in place: `rows` rows of `heads` heads of D features, each head's
// features x -> x / sqrt(mean(x²) + eps) · w (w: D), in the run's precision.
template <typename T>
void head_rms_norm(T* data, std::size_t rows, std::size_t heads, std::size_t D, const T* w, T eps) {
    for (std::size_t r = 0; r < rows * heads; ++r) {
        T* x = data + r * D;
        T sq = 0;
        for (std::size_t d = 0; d < D; ++d) sq += x[d] * x[d];
        const T inv = T(1) / std::sqrt(sq / T(D) + eps);
        for (std::size_t d = 0; d < D; ++d) x[d] = x[d] * inv * w[d];
    }
}

// The logit rewrite of one query row over n keys, in the run's precision:
//   logits = softcap(scores) + bias, softcap(s) = cap · tanh(s / cap)
//   scores (n), bias (n) or null, out (n) (may be scores: in place)
//   visible (n) or null: a key whose bias is -inf is hidden (visible[j] := false)
//   hide: out := -inf where visible is false (else the softmax reads `visible`)
template <typename T>
struct LogitRewrite {
    std::optional<T> cap;  // softcap's C, when the run has one

    template <typename P>
    static LogitRewrite of(const P& problem) {
        return {problem.spec.softcap ? std::optional<T>(T(*problem.spec.softcap)) : std::nullopt};
    }

    void operator()(const T* scores, const T* bias, bool* visible, bool hide, T* out, std::size_t n) const {
        constexpr T neg_inf = -std::numeric_limits<T>::infinity();
        for (std::size_t j = 0; j < n; ++j) {
            T v = scores[j];
            if (cap) v = *cap * std::tanh(v / *cap);
            if (bias) {
                v += bias[j];
                if (visible && bias[j] == neg_inf) visible[j] = false;
            }
            out[j] = hide && !visible[j] ? neg_inf : v;
        }
    }
};

// Growable storage of flags a bool* can point into (std::vector<bool> packs bits;
// a char buffer read through bool* is undefined behaviour). Contents are not kept on growth.
class Flags {
   public:
    bool* data() { return flags_.get(); }
    bool* resize(std::size_t n) {
        if (n > size_) flags_ = std::make_unique<bool[]>(n), size_ = n;
        return flags_.get();
    }

   private:
    std::unique_ptr<bool[]> flags_;
    std::size_t size_ = 0;
};

}  // namespace attnscope::steps
