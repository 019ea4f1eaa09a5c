// attnscope — model layer: the mask rule, i.e. which keys each query may see.
//
// One object holds every masking input of a run: the key padding (PyTorch's
// key_padding_mask polarity, true = PAD = ignored), the causal mask and its alignment, a
// sliding window, a boolean attn_mask, and the positions all of them (and RoPE and
// ALiBi) use. The core asks it while computing; the views and the HTML writer ask the
// same object to mark hidden cells. Nobody recomputes the rule elsewhere.
//
// Positions: key j sits at position j; query i at i (top-left alignment, like torch.tril)
// or at i + Tk - Tq (bottom-right: the queries are the last Tq of Tk positions, the
// KV-cache view); a bundle's q_positions / k_positions replace them. Causal: query i sees
// key j when k_pos(j) <= q_pos(i). A window W keeps q_pos(i) - W < k_pos(j) (with causal:
// the W latest keys, the query's own included, Mistral's rule), else |q_pos - k_pos| < W.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <xtensor/xtensor.hpp>

namespace attnscope {

enum class CausalAlign { top_left, bottom_right };

// Everything a mask rule is made of. Position tables have one row per batch item, or one
// row that every item shares.
struct MaskParts {
    std::optional<xt::xtensor<bool, 2>> key_padding;  // (B, Tk), true = PAD
    bool causal = false;
    CausalAlign align = CausalAlign::top_left;
    std::optional<std::size_t> window;
    std::optional<xt::xtensor<long long, 2>> q_positions;  // (1 or B, Tq); default from `align`
    std::optional<xt::xtensor<long long, 2>> k_positions;  // (1 or B, Tk); default 0..Tk-1
    std::optional<xt::xtensor<bool, 3>> allow;             // boolean attn_mask (1 or B, Tq, Tk), true = may attend
    // The last `extra_keys` keys (nn.MultiheadAttention's <bias_kv>, <zero>) are always
    // visible; the alignment places the queries among the others.
    std::size_t extra_keys = 0;
};

class MaskRule {
   public:
    MaskRule() = default;  // nothing hidden
    // B: the batch the rule serves (its parts carry it in their shapes; the rule keeps Tq, Tk).
    MaskRule(std::size_t B, std::size_t Tq, std::size_t Tk, MaskParts parts);
    // The classic rule: key padding and the causal mask.
    MaskRule(std::size_t B, std::size_t Tq, std::size_t Tk, std::optional<xt::xtensor<bool, 2>> key_padding,
             bool causal, CausalAlign align);

    bool has_padding() const { return p_.key_padding.has_value(); }
    bool causal() const { return p_.causal; }
    CausalAlign align() const { return p_.align; }
    const std::optional<std::size_t>& window() const { return p_.window; }
    bool has_attn_mask() const { return p_.allow.has_value(); }
    bool explicit_positions() const { return p_.q_positions || p_.k_positions; }
    // Some key may be hidden from some query: without, masked_scores equals scores.
    bool masking() const { return has_padding() || p_.causal || p_.window || p_.allow; }

    const std::optional<xt::xtensor<bool, 2>>& key_padding() const { return p_.key_padding; }  // (B, Tk), true = PAD
    bool padded(std::size_t b, std::size_t j) const { return p_.key_padding && (*p_.key_padding)(b, j); }
    // Positions of query i and key j of batch item b.
    long long query_position(std::size_t b, std::size_t i) const;
    long long key_position(std::size_t b, std::size_t j) const;
    long long query_position(std::size_t i) const { return query_position(0, i); }
    bool visible(std::size_t b, std::size_t i, std::size_t j) const;
    // Fills visible[0, Tk) for query i of batch item b; returns whether any key is visible.
    bool row(std::size_t b, std::size_t i, bool* visible) const;
    // The same for keys [lo, hi) only: visible[0, hi - lo).
    bool row(std::size_t b, std::size_t i, std::size_t lo, std::size_t hi, bool* visible) const;
    // Keys [first, last) outside which query i of item b sees none: narrowed by the causal
    // mask and the window when positions are the default ones, else [0, Tk).
    std::pair<std::size_t, std::size_t> key_span(std::size_t b, std::size_t i) const;
    // Whether key_span is exactly the keys a query sees (no padding, attn_mask, explicit
    // positions or appended keys): then no per-key flags are needed.
    bool span_exact() const { return !has_padding() && !p_.allow && !explicit_positions() && !p_.extra_keys; }

    // In words, for headings: "causal: j <= i", "key j is not PAD", "not PAD, and j <= i + Tk - Tq".
    std::string causal_rule() const;
    // The whole rule in words: "(not PAD, and causal: j <= i, and within 4 positions)".
    std::string words() const;

   private:
    std::size_t Tq_ = 0, Tk_ = 0;
    MaskParts p_;
};

}  // namespace attnscope
