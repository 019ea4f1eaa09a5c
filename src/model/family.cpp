// The family table, and config.json's one reader.
#include "attnscope/model/family.hpp"

#include "attnscope/base/errors.hpp"
#include "attnscope/base/text.hpp"

namespace attnscope {
namespace {

std::string shown(const std::string& s) { return escape_control(clip_fragment(s)); }

}  // namespace

std::string ConfigJson::path() const {
    return escape_control(c_.config_path.empty() ? c_.path + "/config.json" : c_.config_path);
}

std::optional<nlohmann::json> ConfigJson::get(const std::string& key) const {
    const auto it = c_.config.find(key);
    if (it == c_.config.end()) return std::nullopt;
    auto j = nlohmann::json::parse(it->second, nullptr, false);
    if (j.is_discarded() || j.is_null()) return std::nullopt;
    return j;
}

std::optional<std::size_t> ConfigJson::count(const std::string& key) const {
    const auto j = get(key);
    if (!j) return std::nullopt;
    if (!j->is_number_unsigned() || j->get<std::uint64_t>() == 0 || j->get<std::uint64_t>() > (1u << 30))
        fail(key, "expected a positive integer, found " + shown(j->dump()));
    return std::size_t(j->get<std::uint64_t>());
}

std::size_t ConfigJson::needed(const std::string& key) const {
    const auto n = count(key);
    if (!n) fail(key, "missing (the forward pass needs it)");
    return *n;
}

std::optional<double> ConfigJson::number(const std::string& key) const {
    const auto j = get(key);
    if (!j) return std::nullopt;
    if (!j->is_number()) fail(key, "expected a number, found " + shown(j->dump()));
    return j->get<double>();
}

std::optional<bool> ConfigJson::flag(const std::string& key) const {
    const auto j = get(key);
    if (!j) return std::nullopt;
    if (!j->is_boolean()) fail(key, "expected true or false, found " + shown(j->dump()));
    return j->get<bool>();
}

std::optional<std::string> ConfigJson::text(const std::string& key) const {
    const auto j = get(key);
    if (!j) return std::nullopt;
    if (!j->is_string()) fail(key, "expected a string, found " + shown(j->dump()));
    return j->get<std::string>();
}

void ConfigJson::fail(const std::string& key, const std::string& what) const {
    throw InputError(path() + ": " + key + ": " + what);
}

void ConfigJson::fail(const std::string& key, const std::string& value, const std::string& what) const {
    fail(key + " " + value, what);
}

namespace {

// GPT-2: Conv1D weights (in, out), c_attn's Q, K, V side by side, learned positions.
Family gpt2() {
    Family f;
    f.model_type = f.preset = "gpt2";
    f.layers_key = "n_layer", f.hidden_key = "n_embd", f.mlp_key = "n_inner", f.heads_key = "n_head";
    f.positions_key = "n_positions", f.eps_key = "layer_norm_epsilon", f.act_key = "activation_function";
    f.positions = 1024, f.eps = 1e-5, f.act = "gelu_new", f.tied = true;
    f.roots = {"transformer.", ""}, f.block = "h.", f.attention = "attn.";
    f.qkv = QkvKind::gpt2_columns, f.q = "c_attn", f.k = f.v = "", f.o = "c_proj";
    f.norm1 = "ln_1", f.norm2 = "ln_2";
    f.up = "mlp.c_fc", f.down = "mlp.c_proj", f.gate = "";
    f.embed = "wte", f.positions_embed = "wpe", f.final_norm = "ln_f", f.head = "lm_head";
    f.norm = NormKind::layer, f.mlp = MlpKind::plain, f.rope = false, f.biases = true;
    return f;
}

// BERT and RoBERTa: post-norm encoders; word + position + token type embeddings.
Family bert(const std::string& type) {
    Family f;
    f.model_type = type, f.preset = "bert";
    f.eps_key = "layer_norm_eps", f.positions = 512, f.eps = 1e-12, f.act = "gelu", f.tied = true;
    f.roots = {type + ".", ""}, f.block = "encoder.layer.", f.attention = "attention.";
    f.q = "self.query", f.k = "self.key", f.v = "self.value", f.o = "output.dense";
    f.norm1 = "attention.output.LayerNorm", f.norm2 = "output.LayerNorm";
    f.up = "intermediate.dense", f.down = "output.dense", f.gate = "";
    f.embed = "embeddings.word_embeddings", f.positions_embed = "embeddings.position_embeddings";
    f.final_norm = "", f.head = "";
    f.norm = NormKind::layer, f.mlp = MlpKind::plain, f.blocks = BlockKind::post;
    f.causal = false, f.rope = false, f.biases = true;
    return f;
}

// Llama and the families written as it is: RMSNorm pre-norm blocks, RoPE, SwiGLU.
Family llama(const std::string& type, WindowRule window = WindowRule::none) {
    Family f;
    f.model_type = f.preset = type;
    f.window = window;
    return f;
}

// Qwen3: Qwen2 with per-head RMSNorms of q and k before RoPE, head_dim from the config.
Family qwen3() {
    Family f = llama("qwen3", WindowRule::qwen2);
    f.q_norm = "q_norm", f.k_norm = "k_norm";
    return f;
}

// GPT-NeoX (Pythia): query_key_value fused per head, partial rotary, LayerNorms with
// biases, the attention and the MLP side by side on the block's input.
Family gpt_neox() {
    Family f;
    f.model_type = f.preset = "gpt_neox";
    f.eps_key = "layer_norm_eps", f.eps = 1e-5, f.act = "gelu";
    f.roots = {"gpt_neox.", ""}, f.attention = "attention.";
    f.qkv = QkvKind::per_head, f.q = "query_key_value", f.k = f.v = "", f.o = "dense";
    f.up = "mlp.dense_h_to_4h", f.down = "mlp.dense_4h_to_h", f.gate = "";
    f.embed = "embed_in", f.final_norm = "final_layer_norm", f.head = "embed_out";
    f.norm = NormKind::layer, f.mlp = MlpKind::plain, f.blocks = BlockKind::parallel, f.biases = true;
    f.rotary_key = "rotary_pct", f.rope_theta_key = "rotary_emb_base";
    return f;
}

// Gemma: embeddings times sqrt(hidden), RMSNorm by 1 + w, GeGLU (hidden_activation).
Family gemma(const std::string& type = "gemma") {
    Family f = llama(type);
    f.act_key = "hidden_activation", f.act = "gelu_pytorch_tanh", f.tied = true;
    f.norm = NormKind::rms_unit_offset, f.embed_scaled = true;
    return f;
}

// Gemma 2: norms before and after the attention and the MLP, sliding and global layers
// alternating; the soft caps and query_pre_attn_scalar are read for every family.
Family gemma2(const std::string& type = "gemma2") {
    Family f = gemma(type);
    f.norm2 = "pre_feedforward_layernorm";
    f.post_norm1 = "post_attention_layernorm", f.post_norm2 = "post_feedforward_layernorm";
    f.blocks = BlockKind::sandwich, f.window = WindowRule::alternate;
    return f;
}

// Gemma 3's text model: Gemma 2 with q/k norms, a sliding-window pattern and the sliding
// layers' own RoPE base.
Family gemma3_text() {
    Family f = gemma2("gemma3_text");
    f.q_norm = "q_norm", f.k_norm = "k_norm";
    f.window = WindowRule::pattern, f.local_base_key = "rope_local_base_freq";
    return f;
}

// Phi-3: qkv_proj and gate_up_proj fused; a window on every layer when the config gives one.
Family phi3() {
    Family f = llama("phi3", WindowRule::every);
    f.qkv = QkvKind::stacked_rows, f.q = "qkv_proj", f.k = f.v = "";
    f.mlp = MlpKind::gated_fused, f.up = "mlp.gate_up_proj", f.gate = "";
    return f;
}

// Mixtral: Mistral's attention, a router over SwiGLU experts (w1 gate, w3 up, w2 down).
Family mixtral() {
    Family f = llama("mixtral", WindowRule::every);
    f.mlp = MlpKind::experts, f.router = "block_sparse_moe.gate", f.experts = "block_sparse_moe.experts.";
    f.gate = "w1", f.up = "w3", f.down = "w2";
    return f;
}

}  // namespace

const std::vector<Family>& families() {
    static const std::vector<Family> table = {
        gpt2(),
        bert("bert"),
        bert("roberta"),
        llama("llama"),
        llama("mistral", WindowRule::every),
        llama("qwen2", WindowRule::qwen2),
        qwen3(),
        gpt_neox(),
        gemma(),
        gemma2(),
        gemma3_text(),
        phi3(),
        mixtral(),
    };
    return table;
}

const Family* find_family(const std::string& model_type) {
    for (const auto& f : families())
        if (f.model_type == model_type) return &f;
    return nullptr;
}

std::string family_list() {
    std::string s;
    for (const auto& f : families()) s += (s.empty() ? "" : ", ") + f.model_type;
    return s;
}

}  // namespace attnscope
