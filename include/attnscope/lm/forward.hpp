// attnscope — lm layer: a whole language model's forward pass, from token ids to each
// layer's attention input and to the logits, as each architecture defines it.
//
// Shape legend (as in core/attention.hpp, plus):
//   T    tokens                        Dm   model width (hidden_size, n_embd)
//   Dff  MLP width (intermediate_size) V    vocabulary
//
// The families (config.json's model_type; each an entry of model/family.hpp's table, which
// names its keys, tensors and kinds of steps):
//   gpt2                  h = wte[ids] + wpe[0..T)
//                         each block: h += attn(LN_1(h)); h += c_proj(act(c_fc(LN_2(h))))
//                         logits = LN_f(h) · wteᵀ (or lm_head.weight when not tied)
//   bert, roberta         h = LN(word[ids] + pos[p] + type[0]); p = i (bert), or for
//                         roberta padding_idx + 1 + i over the tokens that are not padding
//                         each block (post-norm): h = LN(h + attn(h)); h = LN(h + out(act(in(h))))
//                         logits = LN(act(dense(h))) · wordᵀ + bias (the masked-LM head)
//   llama, mistral, qwen2 h = embed[ids]
//                         each block: h += attn(RMS(h)); h += down(silu(gate(m)) ⊙ up(m)), m = RMS(h)
//                         logits = RMS_f(h) · lm_headᵀ (embed when tie_word_embeddings)
//   qwen3                 llama's, with q and k RMS-normed per head before RoPE
//   phi3                  llama's, qkv_proj and gate_up_proj fused: down(up ⊙ act(gate))
//   mixtral               llama's, the MLP Σ over each token's top-k experts of p_e · expert_e(m),
//                         p = softmax(router(m)) over the k, renormalized (one expert read at a time)
//   gpt_neox              h = embed_in[ids]; h += attn(LN_1(h)) + mlp(LN_2(h)) (parallel
//                         residual); query_key_value fused per head; logits = LN_f(h) · embed_outᵀ
//   gemma                 h = embed[ids] · sqrt(Dm); RMS scales by 1 + w; GeGLU (hidden_activation)
//   gemma2, gemma3_text   gemma's, with h += RMS(attn(RMS(h))); h += RMS(mlp(RMS(h))); the
//                         scores and the logits soft-capped; sliding and global layers;
//                         gemma3_text: q/k norms, the sliding layers' own RoPE base
// LN(x) = (x - mean) / sqrt(var + eps) · w + b, RMS(x) = x / sqrt(mean(x²) + eps) · w, with
// the config's eps. The attention is core's attend() on the layer the model layer's preset
// reads (model/checkpoint_layer.hpp): its heads, K/V heads, RoPE (and rope_scaling), window,
// biases, q/k norms, soft cap and scale.
// Everything runs in the request's precision: float64, or float32 (ForwardRequest::float32:
// weights converted from their stored dtype straight to float, hidden states, attention and
// logits in float); the logits and traces are handed back as double either way (widening
// float is exact), the attention inputs as the run holds them. Weights are read one layer at a time from the mapped
// checkpoint.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "attnscope/base/buffer.hpp"
#include "attnscope/core/attention.hpp"
#include "attnscope/io/array.hpp"
#include "attnscope/io/checkpoint.hpp"
#include "attnscope/model/family.hpp"

namespace attnscope {

// The broad kind of a model: GPT-2's learned positions, BERT's encoder, or the
// RoPE decoders that follow Llama (every other family of the table).
enum class LmFamily { gpt2, bert, llama };
enum class Activation { gelu_tanh, gelu_erf, silu, relu };

// What config.json says of the whole model (each field named by its key in messages).
struct LmConfig {
    std::string model_type;  // as config.json spells it: gpt2, bert, roberta, llama, mistral, qwen2, ...
    LmFamily family = LmFamily::gpt2;
    const Family* arch = nullptr;       // the family table's entry (model/family.hpp)
    BlockKind blocks = BlockKind::pre;  // the entry's, or pre where the config turns it off
    std::size_t layers = 0, hidden = 0, mlp = 0, vocab = 0, positions = 0;
    std::size_t type_vocab = 0;         // bert: token types (type 0 is used)
    std::size_t position_offset = 0;    // roberta: padding_idx + 1
    std::optional<std::size_t> pad_id;  // roberta: padding_idx (its tokens keep position padding_idx)
    double eps = 1e-5;
    Activation act = Activation::gelu_tanh;
    std::string act_name;                 // as config.json names it
    bool tied = true;                     // the LM head is the token embedding
    bool mlp_bias = false;                // llama family: gate/up/down carry biases
    std::optional<double> final_softcap;  // logits -> C · tanh(logits / C) (Gemma 2's final_logit_softcapping)
    std::size_t experts = 0, experts_per_token = 0;  // Mixtral: num_local_experts, num_experts_per_tok
    std::string prefix;                              // names' root: "transformer.", "bert.", "model.", or ""
    std::vector<std::string> facts;                  // "12 layers (config.json n_layer)", for reports
};

// The model types and activations it follows, for messages and help.
const std::vector<std::string>& lm_model_types();
const std::vector<std::string>& lm_activations();

// What to compute.
struct ForwardRequest {
    std::optional<std::size_t> stop_after;  // keep going only up to this layer's attention input
    bool every_input = false;               // keep every layer's attention input (else only stop_after's)
    bool logits = true;                     // compute the logits (needs every layer)
    std::vector<std::size_t> logit_rows;    // positions whose logits are wanted (empty: all)
    bool traces = false;                    // keep each layer's attention weights, context and output
    std::size_t threads = 0;
    bool float32 = false;  // run every step in float32 (else float64); not with traces
};

struct ForwardResult {
    // Layer l's attention input (T, Dm): what its attention's x is (after the pre-norm for
    // gpt2 and llama), held in the run's precision (Array::Held float32 or float64: every
    // layer's, kept, costs what the run computes in). Empty for layers not asked for.
    std::vector<Array> attention_inputs;
    Tensor<double, 2> logits;  // (rows, V): the rows of logit_rows, or every position
    std::vector<std::size_t> logit_rows;
    // With ForwardRequest::traces, layer l's attention: weights (1, H, T, T), sink_weight,
    // context (1, H, T, Dv), output (1, T, Dm).
    std::vector<Trace<double>> traces;
};

// A token the logits pick: its id, its probability and log-probability (softmax over the
// vocabulary, in float64: log p = l - max - log Σ exp(l - max)).
struct Pick {
    std::uint32_t id = 0;
    double probability = 0, log_probability = 0;
};
// The k most likely tokens of one row of logits (V), most likely first (ties: the lowest
// id); at most V. The one softmax and top-k over logits (--predict, generation).
std::vector<Pick> top_tokens(const double* logits, std::size_t V, std::size_t k);

// How layer `layer`'s attention input was made from `tokens` tokens, step by step, for --explain.
// `float32`: the run's precision (ForwardRequest::float32).
std::string describe_forward(const LmConfig& m, std::size_t layer, std::size_t tokens, bool float32 = false);

class LanguageModel {
   public:
    // Reads DIR's config.json and opens its weights (model.safetensors, a sharded index or
    // pytorch_model.bin). InputError naming the file and key for a model type, activation or
    // field it cannot follow (listing those it can), or for a config the weights contradict.
    static LanguageModel open(const std::string& dir, std::size_t max_bytes = kNoLimit);

    const LmConfig& config() const { return config_; }
    const Checkpoint& checkpoint() const { return *checkpoint_; }
    std::size_t max_bytes() const { return max_bytes_; }
    // InputError naming the token's position for an id outside the vocabulary, or for more
    // tokens than the model has positions.
    void check_ids(const std::vector<std::uint32_t>& ids) const;
    ForwardResult forward(const std::vector<std::uint32_t>& ids, const ForwardRequest& r) const;
    // InputError naming config.json and its keys when layer `layer`'s heads contradict its
    // projections: heads × head_dim against W_Q, K/V heads against W_K, an odd RoPE width.
    void check_layer_heads(std::size_t layer) const;

   private:
    LmConfig config_;
    std::shared_ptr<Checkpoint> checkpoint_;
    std::size_t max_bytes_ = kNoLimit;
};

}  // namespace attnscope
