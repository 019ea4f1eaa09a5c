// attnscope — model layer: the architectures it follows, as data (one table), and the one
// reader of a checkpoint's config.json.
//
// Each family (config.json's model_type) is an entry of families(): the keys its config
// uses, the names of its tensors, and the kinds of its steps. `run --checkpoint`'s presets
// (checkpoint_layer.hpp) and the forward pass (lm/forward.hpp) both read it; adding a family
// is one entry (and its reference test). Names are relative: a block's tensors are
// ROOT + block + N + "." + NAME + ".weight", ROOT the first of `roots` the checkpoint holds.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "attnscope/io/checkpoint.hpp"
#include "attnscope/model/model.hpp"

namespace attnscope {

// config.json's top-level members, read by key; a JSON null counts as absent. Every error
// is one line "PATH: KEY: what" (exit 2).
class ConfigJson {
   public:
    explicit ConfigJson(const Checkpoint& c) : c_(c) {}
    bool has() const { return !c_.config_path.empty(); }
    std::string path() const;  // config.json's path (DIR/config.json when there is none)
    std::optional<nlohmann::json> get(const std::string& key) const;
    // A positive integer up to 2^30.
    std::optional<std::size_t> count(const std::string& key) const;
    // The same, refused when missing ("missing (the forward pass needs it)").
    std::size_t needed(const std::string& key) const;
    std::optional<double> number(const std::string& key) const;
    std::optional<bool> flag(const std::string& key) const;
    std::optional<std::string> text(const std::string& key) const;
    [[noreturn]] void fail(const std::string& key, const std::string& what) const;
    // "PATH: rope_theta 0: expected ...": a value that is a number but not a usable one.
    [[noreturn]] void fail(const std::string& key, const std::string& value, const std::string& what) const;

   private:
    const Checkpoint& c_;
};

// How the block's norms compute: LayerNorm (x - mean) / sqrt(var + eps) · w + b; RMSNorm
// x / sqrt(mean(x²) + eps) · w; Gemma's RMSNorm, the same times (1 + w).
enum class NormKind { layer, rms, rms_unit_offset };
// The MLP: down(act(up(x))); down(act(gate(x)) ⊙ up(x)); the same with gate and up stored
// as one matrix, gate's rows first (Phi-3's gate_up_proj); a router over such experts.
enum class MlpKind { plain, gated, gated_fused, experts };
// Where the norms and residuals sit. pre: h += attn(N1(h)); h += mlp(N2(h)). post (BERT):
// h = N1(h + attn(h)); h = N2(h + mlp(h)). parallel (GPT-NeoX): h += attn(N1(h)) +
// mlp(N2(h)). sandwich (Gemma 2, 3): h += P1(attn(N1(h))); h += P2(mlp(N2(h))).
enum class BlockKind { pre, post, parallel, sandwich };
// How Q, K and V are stored: three matrices; GPT-2's c_attn (Dm, 3·Dm), Q, K, V side by
// side; GPT-NeoX's query_key_value (H·3·Dk, Dm), per head q, k, v; Phi-3's qkv_proj
// ((H + 2G)·Dk, Dm), all of Q's rows, then K's, then V's.
enum class QkvKind { separate, gpt2_columns, per_head, stacked_rows };
// Which layers attend within a sliding window (when config.json gives sliding_window; a
// layer_types list overrides): none; every layer (Mistral); Qwen2's use_sliding_window from
// max_window_layers on; every other layer from layer 0 (Gemma 2); all but every
// sliding_window_pattern-th (Gemma 3).
enum class WindowRule { none, every, qwen2, alternate, pattern };

struct Family {
    std::string model_type;  // config.json's model_type
    std::string preset;      // run --checkpoint's preset of its attention
    // config.json's keys
    std::string layers_key = "num_hidden_layers", hidden_key = "hidden_size", mlp_key = "intermediate_size",
                heads_key = "num_attention_heads", positions_key = "max_position_embeddings", eps_key = "rms_norm_eps",
                act_key = "hidden_act";
    std::size_t positions = 2048;  // when config.json does not say
    double eps = 1e-6;
    std::string act = "silu";
    bool tied = false;
    // tensor names (below ROOT; a block's below ROOT + block + N + ".")
    std::vector<std::string> roots = {"model.", ""};
    std::string block = "layers.", attention = "self_attn.";  // attention: the q/k/v/o names' folder
    QkvKind qkv = QkvKind::separate;
    std::string q = "q_proj", k = "k_proj", v = "v_proj", o = "o_proj";  // q: the fused matrix when fused
    std::string q_norm, k_norm;                                          // per-head norms of q and k ("" none)
    std::string norm1 = "input_layernorm", norm2 = "post_attention_layernorm";
    std::string post_norm1, post_norm2;  // sandwich: after attention and after the MLP
    std::string up = "mlp.up_proj", down = "mlp.down_proj", gate = "mlp.gate_proj";
    // experts: the router's weight, and expert E's up/down/gate as `experts` + E + "." + those
    std::string router, experts;
    std::string embed = "embed_tokens", positions_embed, final_norm = "norm", head = "lm_head";
    // kinds
    NormKind norm = NormKind::rms;
    MlpKind mlp = MlpKind::gated;
    BlockKind blocks = BlockKind::pre;
    WindowRule window = WindowRule::none;
    bool causal = true;
    bool rope = true;           // rotary positions (rope_theta, rope_scaling, partial rotary)
    bool embed_scaled = false;  // h = embed[ids] · sqrt(hidden), the factor in the run's dtype (Gemma)
    bool biases = false;        // every linear map has a bias (else q/k/v biases are read when present: Qwen2)
    std::string rotary_key = "partial_rotary_factor";  // the rotated share of a head
    std::string rope_theta_key = "rope_theta";         // RoPE's base θ
    std::string local_base_key;                        // a sliding layer's own RoPE base (Gemma 3)
};

// rope_scaling's types, for messages: default, linear, dynamic, yarn, longrope, su, llama3.
const std::vector<std::string>& rope_scaling_types();
// `scaling` (config.json's rope_scaling, named `key` in messages) applied to `rope` of R
// rotated features, as Hugging Face's modeling_rope_utils.py defines each type: the R/2
// frequencies, the attention factor and a name for reports. `seq_len`: the run's tokens
// (dynamic and longrope change with it; unset: max_position_embeddings). An unknown type,
// or a missing or unusable member, is refused by name.
void scale_rope(const ConfigJson& cfg, const nlohmann::json& scaling, const std::string& key, Rope& rope, std::size_t R,
                std::optional<std::size_t> seq_len);

// Every family, in the order messages list them.
const std::vector<Family>& families();
// The family of a model_type, or nullptr.
const Family* find_family(const std::string& model_type);
// "gpt2, bert, ...": the model types families() holds.
std::string family_list();

}  // namespace attnscope
