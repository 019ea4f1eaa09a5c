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

#include <algorithm>
#include <cmath>
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

// Rotary position embeddings: which features of each query/key head rotate, and how they
// pair. half: feature j pairs with j + R/2 (Hugging Face Llama / GPT-NeoX's rotate_half);
// interleaved: 2j pairs with 2j + 1 (RoFormer, GPT-J).
enum class RopeStyle { half, interleaved };
struct Rope {
    double base = 10000;             // θ: inv_freq_j = θ^(-2j/R)
    std::optional<std::size_t> dim;  // R, even, <= Dk; default Dk
    RopeStyle style = RopeStyle::half;
    // A scaled RoPE (a checkpoint's rope_scaling): the R/2 frequencies themselves, in place
    // of θ^(-2j/R), and the factor cos and sin are multiplied by (YaRN's and LongRoPE's
    // attention factor); `scaling` names it for reports ("llama3 factor 8"), "" for none.
    std::vector<double> inv_freq;
    double attention_factor = 1;
    std::string scaling;
    // inv_freq_j of R rotated features.
    double frequency(std::size_t j, std::size_t R) const {
        return inv_freq.empty() ? 1.0 / std::pow(base, double(2 * j) / double(R)) : inv_freq[j];
    }
};

// What true means in a boolean attn_mask: PyTorch's scaled_dot_product_attention says
// "may attend" (allow), nn.MultiheadAttention says "blocked" (block). Unset: refused.
enum class MaskMeans { unset, allow, block };

// One option a bundle's `config` record set, for reports: its key ("heads"), its value as
// written ("2"; `string`: a JSON string), and whether the command line gave its own instead.
struct BundleOption {
    std::string key, value;
    bool string = false;
    bool overridden = false;
};

// What to compute, apart from the arrays.
struct Spec {
    std::size_t heads = 1;
    std::optional<double> scale;  // default 1/sqrt(Dk)
    std::string scale_text;       // how `scale` was given, for reports: "none", "0.5" (may be empty)
    std::string scale_source;     // where a scale not given as {scale} came from (a checkpoint's config)
    bool causal = false;
    CausalAlign causal_align = CausalAlign::top_left;  // bottom_right: query i sits at i + Tk - Tq
    Layout layout = Layout::math;
    // Variants of today's models (docs/modern-attention.md)
    std::optional<std::size_t> kv_heads;  // G K/V heads (grouped-query; 1: multi-query); default H
    std::optional<Rope> rope;             // rotary positions on Q and K
    bool alibi = false;                   // bias m_h · (k_pos - q_pos)
    std::optional<std::size_t> window;    // sliding window W (keys within W positions)
    std::optional<double> softcap;        // scores -> C · tanh(scores / C) before bias and mask
    // Per-head RMSNorm of q and k after their projections, before RoPE (Qwen3, Gemma 3): the
    // bundle's q_norm and k_norm (Dk) are its weights, this its eps.
    std::optional<double> qk_norm_eps;
    MaskMeans attn_mask_means = MaskMeans::unset;
    bool add_zero_attn = false;  // nn.MultiheadAttention's add_zero_attn: one zero key/value position
    // Experiments
    double temperature = 1;               // default scale becomes 1/(sqrt(Dk) * temperature)
    std::optional<std::size_t> zero_key;  // set key vector j (every head, every item) to 0
    // For reports only: the bundle's key_padding_mask was given and dropped (--ignore-padding).
    bool padding_dropped = false;
    // For reports only: the options the bundle's `config` record carries, by key.
    std::vector<BundleOption> bundle_options;
};

// Sizes, in the names of the shape legend (see attention.hpp).
struct Dims {
    std::size_t B = 0, Tq = 0, Tk = 0, Dm = 0, Dkv = 0, H = 0, Dk = 0, Dv = 0, Dout = 0;
    std::size_t G = 0;  // K/V heads: H (one each), fewer for grouped-query attention, 1 for multi-query
    // Key/value positions appended after the projections (nn.MultiheadAttention's
    // add_bias_kv, then add_zero_attn), counted in Tk: the source has Tk - extra_keys rows.
    std::size_t extra_keys = 0;
    std::size_t source_keys() const { return Tk - extra_keys; }
    std::size_t group() const { return G ? H / G : 1; }               // query heads per K/V head
    std::size_t kv_head(std::size_t h) const { return h / group(); }  // Hugging Face's repeat_kv order
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

// ALiBi's term for a key at key_pos seen from a query at query_pos: m_h · (k_pos - q_pos),
// in the run's precision (the one formula of the full run, its summaries and the decoder).
template <typename T>
T alibi_term(T slope, long long key_pos, long long query_pos) {
    return slope * T(key_pos - query_pos);
}

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
    Tensor<T, 2> W_Q, W_K, W_V;                      // (Dm, H*Dk), (Dkv, G*Dk), (Dkv, G*Dv)
    std::optional<Tensor<T, 2>> W_O;                 // (H*Dv, Dout)
    std::optional<Tensor<T, 1>> b_Q, b_K, b_V, b_O;  // (H*Dk), (G*Dk), (G*Dv), (Dout)
    MaskRule mask;  // key padding, causal, window, boolean attn_mask, and the positions they use

    std::size_t rope_dim = 0;                  // R: features of each head that rotate (0: no RoPE)
    std::optional<Tensor<T, 1>> alibi_slopes;  // (H), with --alibi
    // A float attn_mask, added to the scores: (Bm, Hm, Tq, Tk) with Bm in {1, B}, Hm in {1, H}
    // (size 1: the same for every batch item / head). -inf hides a key.
    std::optional<Tensor<T, 4>> attn_bias;
    std::optional<Tensor<T, 1>> sinks;  // (H) per-head sink logits, joining each softmax's denominator
    // spec.qk_norm_eps: each head of q and of k scaled to x / sqrt(mean(x²) + eps) · w, w (Dk)
    std::optional<Tensor<T, 1>> q_norm, k_norm;
    // nn.MultiheadAttention's add_bias_kv: a key and a value position appended after the
    // projections, (G*Dk) and (G*Dv); add_zero_attn (spec) appends a zero one after it.
    std::optional<Tensor<T, 1>> bias_k, bias_v;

    // Q, K and V given rather than projected (run --qkv; model/qkv.hpp): (B, Tq, H*Dk),
    // (B, Tk, G*Dk), (B, Tk, G*Dv); x, memory and the weights are then empty (Dm = Dkv = 0).
    std::optional<Tensor<T, 3>> given_q, given_k, given_v;
    std::string given_from;  // "q.npz: q as bt(hd), k as bt(hd), v as bt(hd)", for reports

    TokenLabels query_tokens, key_tokens;  // (B, Tq) and (B, Tk), empty when not given
    std::vector<std::string> warnings;     // e.g. non-finite input values

    const Tensor<T, 3>& src() const { return memory ? *memory : x; }
    // Some key may be hidden from some query (padding or causal): without, masked_scores == scores.
    bool masking() const { return mask.masking(); }
    // masked_scores is the scores themselves: nothing masked, capped or added.
    bool masked_is_scores() const { return !masking() && !has_bias() && !spec.softcap; }
    // An additive term between the scores and the mask: ALiBi and/or a float attn_mask.
    bool has_bias() const { return alibi_slopes.has_value() || attn_bias.has_value(); }
    // The bias terms of head h, query i of batch item b, for keys 0..Tk-1 (0 without a bias).
    void bias_row(std::size_t b, std::size_t h, std::size_t i, T* out) const { bias_row(b, h, i, 0, dims.Tk, out); }
    // The same for keys [lo, hi) only: out[0, hi - lo).
    void bias_row(std::size_t b, std::size_t h, std::size_t i, std::size_t lo, std::size_t hi, T* out) const {
        std::fill(out, out + (hi - lo), T(0));
        if (alibi_slopes) {
            const T m = (*alibi_slopes)(h);
            const long long qp = mask.query_position(b, i);
            for (std::size_t j = lo; j < hi; ++j) out[j - lo] = alibi_term(m, mask.key_position(b, j), qp);
        }
        if (attn_bias) {
            const Tensor<T, 4>& a = *attn_bias;
            const T* row = &a(a.shape(0) == 1 ? 0 : b, a.shape(1) == 1 ? 0 : h, i, 0);
            for (std::size_t j = lo; j < hi; ++j) out[j - lo] += row[j];
        }
    }
};

// The array names a bundle may hold (math layout, and PyTorch's names for --layout torch).
const std::vector<std::string>& known_array_names();
// Those of them that are projection weights and biases (W_Q, …, in_proj_weight, …, bias_k,
// bias_v): what a checkpoint supplies and what a run from given Q, K, V has no use for.
const std::vector<std::string>& weight_array_names();
// InputError "SOURCE: unknown array 'NAME' (a bundle may hold: ...)" for a name that is
// not one of them: as io's NameCheck, it refuses such an array before it is read.
void check_array_name(const std::string& source, const std::string& name);

template <typename T>
Problem<T> make_problem(const Bundle& bundle, const Spec& spec);

extern template Problem<float> make_problem<float>(const Bundle&, const Spec&);
extern template Problem<double> make_problem<double>(const Bundle&, const Spec&);

}  // namespace attnscope
