// attnscope — model layer: the attention spec and the weight set, validated.
//
// make_problem() takes named arrays (from any file format) and a Spec, checks every
// shape against every other, and returns typed tensors ready for the core. No
// arithmetic happens before every check has passed; each error names the array,
// the file, what was expected and what was found.
//
// Weight layout. attnscope uses the math layout (in, out): Q = x · W_Q. PyTorch's
// nn.Linear and nn.MultiheadAttention store (out, in); reading those is the explicit
// choice Layout::torch (--layout torch), which also reads an nn.MultiheadAttention
// state dict (in_proj_weight, in_proj_bias, out_proj.weight, out_proj.bias, or
// q_proj_weight / k_proj_weight / v_proj_weight). Nothing is ever transposed on a guess.
//
// key_padding_mask follows PyTorch: 1/true = PAD = this key is ignored.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>
#include <xtensor/xtensor.hpp>

#include "attnscope/base/buffer.hpp"
#include "attnscope/io/array.hpp"
#include "attnscope/model/mask.hpp"

namespace attnscope {

enum class Layout { math, torch };

// What to compute, apart from the arrays.
struct Spec {
    std::size_t heads = 1;
    std::optional<double> scale;  // default 1/sqrt(Dk)
    std::string scale_text;       // how `scale` was given, for reports: "none", "0.5" (may be empty)
    bool causal = false;
    CausalAlign causal_align = CausalAlign::top_left;  // bottom_right: query i sits at i + Tk - Tq
    Layout layout = Layout::math;
    // Experiments
    double temperature = 1;               // default scale becomes 1/(sqrt(Dk) * temperature)
    std::optional<std::size_t> zero_key;  // set key vector j (every head, every item) to 0
};

// Sizes, in the names of the shape legend (see attention.hpp).
struct Dims {
    std::size_t B = 0, Tq = 0, Tk = 0, Dm = 0, Dkv = 0, H = 0, Dk = 0, Dv = 0, Dout = 0;
};

// Token labels: a list per batch item, or one list that every item shares (never
// copied per item: a (Tq,) list serves a batch of any size). Copies share the strings.
class TokenLabels {
   public:
    TokenLabels() = default;
    // One list for all `items` batch items.
    static TokenLabels shared(std::vector<std::string> list, std::size_t items);
    // A list per batch item.
    static TokenLabels per_item(std::vector<std::vector<std::string>> lists);

    bool empty() const { return items_ == 0; }
    std::size_t size() const { return items_; }  // batch items
    const std::vector<std::string>& operator[](std::size_t b) const { return (*lists_)[lists_->size() == 1 ? 0 : b]; }
    std::size_t bytes() const;  // what the labels hold in memory
    bool same_as(const TokenLabels& o) const { return lists_ == o.lists_; }

   private:
    std::shared_ptr<const std::vector<std::vector<std::string>>> lists_;
    std::size_t items_ = 0;
};

template <typename T>
struct Problem {
    Spec spec;
    Dims dims;
    bool batched = true;  // false: x was 2-D, results drop the batch axis
    bool cross = false;   // keys and values come from `memory`
    T scale = T(1);
    std::string scale_source;  // how the scale was chosen, for reports: "1/sqrt(Dk) = 1/sqrt(4)"

    Tensor<T, 3> x;                                  // (B, Tq, Dm)
    std::optional<Tensor<T, 3>> memory;              // (B, Tk, Dkv), cross-attention only
    Tensor<T, 2> W_Q, W_K, W_V;                      // (Dm, H*Dk), (Dkv, H*Dk), (Dkv, H*Dv)
    std::optional<Tensor<T, 2>> W_O;                 // (H*Dv, Dout)
    std::optional<Tensor<T, 1>> b_Q, b_K, b_V, b_O;  // (H*Dk), (H*Dk), (H*Dv), (Dout)
    MaskRule mask;                                   // key padding (B, Tk) true = PAD, causal and its alignment

    TokenLabels query_tokens, key_tokens;  // (B, Tq) and (B, Tk), empty when not given
    std::vector<std::string> warnings;     // e.g. non-finite input values

    const Tensor<T, 3>& src() const { return memory ? *memory : x; }
    // Some key may be hidden from some query (padding or causal): without, masked_scores == scores.
    bool masking() const { return mask.masking(); }
};

// The array names a bundle may hold (math layout, and PyTorch's names for --layout torch).
const std::vector<std::string>& known_array_names();

template <typename T>
Problem<T> make_problem(const Bundle& bundle, const Spec& spec);

extern template Problem<float> make_problem<float>(const Bundle&, const Spec&);
extern template Problem<double> make_problem<double>(const Bundle&, const Spec&);

}  // namespace attnscope
