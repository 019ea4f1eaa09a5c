// attnscope — model layer: the mask rule, i.e. which keys each query may see.
//
// One object holds every masking input of a run: the key padding (PyTorch's
// key_padding_mask polarity, true = PAD = ignored), the causal mask and its alignment.
// The core asks it while computing; the views and the HTML writer ask the same object
// to mark hidden cells. Nobody recomputes the rule elsewhere.
//
// Positions: key j sits at position j; query i at i (top-left alignment, like torch.tril)
// or at i + Tk - Tq (bottom-right: the queries are the last Tq of Tk positions, the
// KV-cache view). Causal: query i sees key j when pos(j) <= pos(i). Sliding windows,
// explicit positions and additive biases extend this object, not its callers.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <xtensor/xtensor.hpp>

namespace attnscope {

enum class CausalAlign { top_left, bottom_right };

class MaskRule {
   public:
    MaskRule() = default;  // nothing hidden
    // `key_padding`: (B, Tk), true = PAD, or none.
    MaskRule(std::size_t B, std::size_t Tq, std::size_t Tk, std::optional<xt::xtensor<bool, 2>> key_padding,
             bool causal, CausalAlign align);

    bool has_padding() const { return padding_.has_value(); }
    bool causal() const { return causal_; }
    CausalAlign align() const { return align_; }
    // Some key may be hidden from some query: without, masked_scores equals scores.
    bool masking() const { return has_padding() || causal_; }

    const std::optional<xt::xtensor<bool, 2>>& key_padding() const { return padding_; }  // (B, Tk), true = PAD
    bool padded(std::size_t b, std::size_t j) const { return padding_ && (*padding_)(b, j); }
    // Position of query i (keys sit at their index).
    long long query_position(std::size_t i) const;
    bool visible(std::size_t b, std::size_t i, std::size_t j) const;
    // Fills visible[0, Tk) for query i of batch item b; returns whether any key is visible.
    bool row(std::size_t b, std::size_t i, bool* visible) const;

    // In words, for headings: "causal: j <= i", "key j is not PAD", "not PAD, and j <= i + Tk - Tq".
    std::string causal_rule() const;

   private:
    std::size_t B_ = 0, Tq_ = 0, Tk_ = 0;
    std::optional<xt::xtensor<bool, 2>> padding_;  // (B, Tk), true = PAD
    bool causal_ = false;
    CausalAlign align_ = CausalAlign::top_left;
};

}  // namespace attnscope
