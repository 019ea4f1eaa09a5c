// attnscope — model layer: one attention layer out of a model checkpoint.
//
// A preset knows how a model family names its attention weights and where its
// config.json keeps the attention's shape (docs/checkpoints.md):
//   gpt2   [transformer.]h.N.attn.c_attn/c_proj        Conv1D, already (in, out); causal
//   bert   [bert.|roberta.]encoder.layer.N.attention.  nn.Linear (out, in); not causal
//   llama  [model.]layers.N.self_attn.{q,k,v,o}_proj   nn.Linear; GQA, RoPE, causal, window
//          (also mistral and qwen2)
//   mha    an nn.MultiheadAttention under a prefix (layers.N.self_attn. of nn.TransformerEncoder,
//          or self_attn. of one nn.TransformerEncoderLayer saved alone); needs no config.json
//   tl     TransformerLens: blocks.N.attn.W_Q (H, Dm, Dk) …, converted to the math layout
// choose_layer() reads only that layer's tensors and hands them on under the bundle's
// names (W_Q, b_Q, …, or nn.MultiheadAttention's in_proj_weight, …) with the layout they
// are in, and says what the config fixes (heads, K/V heads, RoPE, window, causal).
// Nothing is guessed: a head count that neither config.json nor the weights record is
// left unset, and the command line refuses to run without {heads}.
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "attnscope/io/array.hpp"
#include "attnscope/io/checkpoint.hpp"
#include "attnscope/model/model.hpp"

namespace attnscope {

// What the user asked for.
struct LayerRequest {
    std::optional<std::size_t> layer;   // {layer}; unset: the only layer, else refused
    std::string preset = "auto";        // {preset}: auto (config.json's model_type) or a preset's name
    std::string prefix;                 // {prefix}: the layer's names begin with this
    std::optional<std::size_t> tokens;  // the run's tokens, when known (a scaled RoPE may depend on them)
};

// What the checkpoint (its config.json, or the weights' own shapes) says about the
// attention of a layer; unset: it does not say.
struct LayerConfig {
    std::optional<std::size_t> heads, kv_heads, head_dim;
    std::optional<bool> causal;
    std::optional<Rope> rope;
    std::optional<std::size_t> window;
    std::optional<double> softcap;      // attention scores -> C · tanh(scores / C) (Gemma 2)
    std::optional<double> qk_norm_eps;  // per-head q/k RMSNorms (arrays q_norm, k_norm) and their eps
    std::optional<double> scale;        // a scale other than 1/sqrt(Dk)
    std::string scale_why;              // how the config gives it, for reports
    std::vector<std::string> facts;     // where each came from: "heads 12 (config.json n_head)"
};

struct CheckpointLayer {
    std::string preset;  // the preset used ("prefix" for names chosen by {prefix} alone)
    std::string prefix;  // the layer's names begin with this: "transformer.h.3.attn."
    std::optional<std::size_t> layer;
    std::size_t layers = 0;  // layers the checkpoint holds, by the preset's names
    Layout layout = Layout::math;
    bool layout_fixed = false;            // the preset fixes the layout (else {layout} as given)
    std::map<std::string, Array> arrays;  // under the bundle's names
    LayerConfig config;
};

// The layer's layout as {layout} names it: "tl" for the tl preset's weights (converted to
// the math layout), else "math" or "torch".
std::string layout_name(const CheckpointLayer& l);
// Where the config's facts came from, in one line: "heads 12 (config.json n_head); ...".
std::string facts_text(const LayerConfig& c);

// The presets' names, for messages and help: the family table's (gpt2, bert, llama, ...), mha, tl.
const std::vector<std::string>& checkpoint_presets();
// The same, joined: "gpt2, bert, llama, ...".
std::string preset_names();

// The preset config.json's model_type names ("gpt2", "llama", …), or "" when there is no
// config.json or no model_type. InputError for a model_type no preset reads.
std::string preset_of_config(const Checkpoint& c);

// Reads the layer's tensors (only those) and what the config says of them. InputError,
// one line, for a layer that is not there (naming how many there are), a missing or
// misshapen tensor, or a config the preset cannot follow (e.g. rope_scaling).
CheckpointLayer choose_layer(const Checkpoint& c, const LayerRequest& r, std::size_t max_bytes = kNoLimit);

// A checkpoint's contents for `attnscope inspect`: tensors grouped by layer, the preset,
// and each layer's attention configuration (without reading any tensor's data).
struct LayerOverview {
    std::string group;  // "model.layers.3" (the names up to the layer's number), "" for the rest
    std::optional<std::size_t> index;
    std::vector<TensorInfo> tensors;
    std::optional<CheckpointLayer> attention;  // the preset's view of it (arrays not read)
};
struct CheckpointOverview {
    std::string preset;                 // "" when none applies
    std::string preset_note;            // why none applies, or where the preset came from
    bool preset_asked = false;          // named by {preset}, not found by auto
    std::vector<LayerOverview> groups;  // in the order their first tensor is listed
};
// With {preset} auto, the preset is config.json's model_type's or, without one, the preset
// that needs no config.json (mha, for nn.TransformerEncoder or a TransformerEncoderLayer
// saved alone) whose names the tensors have.
CheckpointOverview describe_checkpoint(const Checkpoint& c, const std::string& preset = "auto");

// The command that runs layer `l` of overview `ov`, word by word, options as {field}:
// attnscope run BUNDLE {checkpoint} PATH [{preset} P] [{layer} N] [{heads} H]. BUNDLE and H
// stand for what a checkpoint does not hold: the input x, and a head count it does not record.
std::vector<std::string> run_command(const Checkpoint& c, const CheckpointOverview& ov, const CheckpointLayer& l);

// TransformerLens's layout in a bundle: W_Q/W_K/W_V (H, Dm, Dk), W_O (H, Dv, Dm),
// b_Q/b_K/b_V (H, Dk), b_O (Dm) rewritten in place to the math layout (Dm, H·Dk), …;
// returns H. InputError for arrays that do not have those shapes.
std::size_t convert_tl_layout(Bundle& bundle);

}  // namespace attnscope
