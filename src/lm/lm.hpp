// Internal to the lm layer: config.json's fields, the operations of a block, and the steps
// of the forward pass that the full run (forward.cpp) and the generator (generate.cpp) share.
#pragma once

#include <cstddef>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "attnscope/io/checkpoint.hpp"
#include "attnscope/lm/forward.hpp"
#include "attnscope/model/model.hpp"

namespace attnscope::lm {

// config.json of a whole model, read through the family table (model/family.hpp): its
// model_type's entry says which keys hold the shape and which kinds of steps it takes.
LmConfig read_config(const Checkpoint& c);

// A matrix of weights as T (float or double, the run's precision), row-major, with the
// layout it is stored in: `torch` (out, in) as nn.Linear, else (in, out) as GPT-2's Conv1D.
template <class T>
struct Linear {
    Buffer<T> w;
    std::size_t in = 0, out = 0;
    bool torch = true;
    std::vector<T> b;  // (out) or empty
};

// A LayerNorm (w and b) or an RMSNorm (w only) over the last axis; Gemma's RMSNorm scales
// by 1 + w, which `w` holds (added as the norm is read).
template <class T>
struct Norm {
    std::vector<T> w, b;
    double eps = 0;
    bool rms = false;
};

// Every step below is a template over T, instantiated for float and double (forward.cpp,
// ops.cpp): the run's precision end to end, weights converted from their stored dtype to T.

// y (T, out) = x (T, in) · W (+ b); W as stored (transposed for torch's (out, in)).
template <class T>
Tensor<T, 2> apply(const Linear<T>& l, const Tensor<T, 2>& x);
// In place, row by row: LayerNorm (x - mean) / sqrt(var + eps) · w + b, var the biased
// variance; RMSNorm x / sqrt(mean(x²) + eps) · w.
template <class T>
void apply(const Norm<T>& n, Tensor<T, 2>& x);
// In place: the activation, elementwise.
template <class T>
void activate(Activation a, Tensor<T, 2>& x);

// The checkpoint's tensors by name, each checked against the shape config.json gives it.
class Weights {
   public:
    Weights(const Checkpoint& c, std::size_t max_bytes) : c_(c), max_bytes_(max_bytes) {}
    const std::string& path() const { return c_.path; }
    bool has(const std::string& name) const;
    // The tensor `name` of shape `shape`; `why` says where the shape comes from.
    Array read(const std::string& name, const std::vector<std::size_t>& shape, const std::string& why) const;
    template <class T>
    std::vector<T> vec(const std::string& name, std::size_t n, const std::string& why) const;
    // A linear map stored (out, in) (`torch`) or (in, out); its bias when `bias`.
    template <class T>
    Linear<T> linear(const std::string& name, std::size_t in, std::size_t out, bool torch, bool bias,
                     const std::string& why_in, const std::string& why_out) const;
    // NAME.weight (and NAME.bias, for a LayerNorm)
    template <class T>
    Norm<T> norm(const std::string& name, std::size_t d, double eps, NormKind kind, const std::string& why) const;

   private:
    const Checkpoint& c_;
    std::size_t max_bytes_;
};

// A block's MLP weights (the family table's MlpKind).
template <class T>
struct Mlp {
    Linear<T> up, down;             // gpt2 c_fc / c_proj; bert intermediate / output; llama up_proj / down_proj
    std::optional<Linear<T>> gate;  // llama's gate_proj
    bool fused = false;             // up holds gate's rows, then up's (Phi-3's gate_up_proj)
    // Experts (Mixtral): the router (Dm -> E), and expert e's own MLP, read when a token
    // is routed to it (one expert's weights at a time).
    std::optional<Linear<T>> router;
    std::size_t top_k = 0;
    std::function<Mlp<T>(std::size_t)> expert;
};
// One block's weights other than the attention's.
template <class T>
struct Block {
    Norm<T> norm1, norm2;                 // pre-norms (gpt2, llama), or the post-norms after attention and MLP (bert)
    std::optional<Norm<T>> post1, post2;  // sandwich blocks: after the attention, after the MLP
    Mlp<T> mlp;
};
// Block l's norms and MLP; read_norms leaves the MLP empty, read_mlp reads it alone (a
// forward pass reads it once the layer's attention, and its weights, are done with).
template <class T>
Block<T> read_norms(const Weights& w, const LmConfig& m, std::size_t l);
template <class T>
Mlp<T> read_mlp(const Weights& w, const LmConfig& m, std::size_t l);
template <class T>
Block<T> read_block(const Weights& w, const LmConfig& m, std::size_t l);
// The MLP on x (T, Dm) -> (T, Dm): down(act(up(x))), or down(act(gate(x)) ⊙ up(x)); with
// experts, each token's top-k experts by softmax(router(x)), their outputs weighted by those
// k probabilities renormalized to sum 1 (Mixtral).
template <class T>
Tensor<T, 2> mlp(const Mlp<T>& f, Activation act, const Tensor<T, 2>& x);

// h (T, Dm): the embeddings of `ids` at positions start, start + 1, ... (token, plus position
// and token-type embeddings and BERT's LayerNorm where the family has them; BERT: start 0).
template <class T>
Tensor<T, 2> embed(const Weights& w, const LmConfig& m, const std::vector<std::uint32_t>& ids, std::size_t start = 0);
// a (T, Dm) as an Array of its own, its numbers held as T (Held::float32 or float64).
template <class T>
Array held_array(const Tensor<T, 2>& a, const std::string& origin);
// The attention's input a (T, Dm) of block b on h: the pre-norm (gpt2, llama) or h itself (bert).
template <class T>
Tensor<T, 2> attention_input(const Block<T>& b, const LmConfig& m, const Tensor<T, 2>& h);
// The rest of block b, in place on h (T, Dm): the attention's output (1, T, Dm) added, then
// the MLP (pre-norm), or BERT's post-norms around it.
template <class T>
void add_attention(const Block<T>& b, const LmConfig& m, const Tensor<T, 3>& out, Tensor<T, 2>& h);
// Layer l's attention (its preset's heads, K/V heads, RoPE, window, biases, scale, W_O) as a
// problem on the input a (T, Dm); refused when it has no W_O or its output is not Dm wide.
template <class T>
Problem<T> layer_problem(const Checkpoint& c, const LmConfig& m, std::size_t l, const Tensor<T, 2>& a,
                         std::size_t max_bytes);
// The LM head: the final norm (BERT: dense, activation and LayerNorm), the unembedding E
// (V, Dm) as read (its pages mapped), or converted to T once (convert_unembedding: a
// generator applies it at every step), and BERT's bias (V).
template <class T>
struct Head {
    std::optional<Linear<T>> dense;
    Activation act = Activation::gelu_erf;
    Norm<T> norm;
    Array unembedding;              // (V, Dm)
    Buffer<T> converted;            // (V, Dm) as T, or empty
    std::vector<T> bias;            // (V) or empty
    std::optional<double> softcap;  // logits -> C · tanh(logits / C) (Gemma 2)
};
template <class T>
Head<T> read_head(const Weights& w, const LmConfig& m);
template <class T>
void convert_unembedding(Head<T>& hd);
// logits (R, V) of the final hidden states h (R, Dm).
template <class T>
Tensor<T, 2> apply_head(const Head<T>& hd, Tensor<T, 2> h);
// read_head, then apply_head: the LM head on h (R, Dm) -> logits (R, V).
template <class T>
Tensor<T, 2> head(const Weights& w, const LmConfig& m, Tensor<T, 2> h);

}  // namespace attnscope::lm
