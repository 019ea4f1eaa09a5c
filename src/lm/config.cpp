// config.json of a whole model: the fields the forward pass reads, each checked and named
// by its key; a model type, activation or field it cannot follow is refused by name.
#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

#include "attnscope/base/errors.hpp"
#include "attnscope/base/text.hpp"
#include "attnscope/lm/forward.hpp"
#include "lm.hpp"

namespace attnscope {
namespace lm {
namespace {

std::string shown(const std::string& s) { return escape_control(clip_fragment(s)); }

std::string joined(const std::vector<std::string>& v) {
    std::string s;
    for (const auto& w : v) s += (s.empty() ? "" : ", ") + w;
    return s;
}

}  // namespace

namespace {

Activation activation_of(const ConfigJson& cfg, const std::string& key, const std::string& otherwise,
                         std::string& name) {
    name = cfg.text(key).value_or(otherwise);
    // gelu_new, gelu_pytorch_tanh and gelu_fast are the same tanh approximation.
    if (name == "gelu_new" || name == "gelu_pytorch_tanh" || name == "gelu_fast") return Activation::gelu_tanh;
    if (name == "gelu") return Activation::gelu_erf;
    if (name == "silu" || name == "swish") return Activation::silu;
    if (name == "relu") return Activation::relu;
    cfg.fail(key, "'" + shown(name) + "' is not an activation attnscope follows (" + joined(lm_activations()) + ")");
}

// A flag the forward pass cannot follow when it has `value`.
void refuse_flag(const ConfigJson& cfg, const std::string& key, bool value, const std::string& why) {
    if (cfg.flag(key) == value) cfg.fail(key, std::string(value ? "true" : "false") + ": " + why);
}

// What the table's keys give every family: the shape, eps, activation and tied head.
void read_shape(const ConfigJson& cfg, const Family& f, LmConfig& m) {
    m.layers = cfg.needed(f.layers_key);
    m.hidden = cfg.needed(f.hidden_key);
    m.mlp = m.family == LmFamily::gpt2 ? cfg.count(f.mlp_key).value_or(4 * m.hidden) : cfg.needed(f.mlp_key);
    m.vocab = cfg.needed("vocab_size");
    m.positions = cfg.count(f.positions_key).value_or(f.positions);
    m.eps = cfg.number(f.eps_key).value_or(f.eps);
    if (!(m.eps >= 0) || !std::isfinite(m.eps)) cfg.fail(f.eps_key, "expected a finite number >= 0");
    m.act = activation_of(cfg, f.act_key, f.act, m.act_name);
    m.tied = cfg.flag("tie_word_embeddings").value_or(f.tied);
    m.blocks = f.blocks;
}

void read_bert(const ConfigJson& cfg, LmConfig& m) {
    m.type_vocab = cfg.count("type_vocab_size").value_or(2);
    refuse_flag(cfg, "is_decoder", true, "BERT as a decoder (causal, cross-attention) is not followed");
    refuse_flag(cfg, "add_cross_attention", true, "cross-attention blocks are not followed");
    if (m.model_type == "roberta") {
        const auto pad = cfg.get("pad_token_id");
        if (pad && (!pad->is_number_unsigned() || pad->get<std::uint64_t>() >= m.vocab))
            cfg.fail("pad_token_id", "expected a token id below vocab_size " + std::to_string(m.vocab) + ", found " +
                                         shown(pad->dump()));
        m.pad_id = pad ? std::size_t(pad->get<std::uint64_t>()) : 1;
        m.position_offset = *m.pad_id + 1;
        if (m.position_offset >= m.positions)
            cfg.fail("pad_token_id", std::to_string(*m.pad_id) + ": positions start at pad_token_id + 1, beyond " +
                                         "max_position_embeddings " + std::to_string(m.positions));
    }
}

// The options of the newer families: the final logits' soft cap, the parallel residual
// turned off, the experts and how many each token takes.
void read_options(const ConfigJson& cfg, const Family& f, LmConfig& m) {
    if (const auto cap = cfg.number("final_logit_softcapping")) {
        if (!(*cap > 0) || !std::isfinite(*cap))
            cfg.fail("final_logit_softcapping", "expected a finite number above 0");
        m.final_softcap = cap;
    }
    if (f.blocks == BlockKind::parallel && cfg.flag("use_parallel_residual") == false) m.blocks = BlockKind::pre;
    if (f.mlp == MlpKind::experts) {
        m.experts = cfg.needed("num_local_experts");
        m.experts_per_token = cfg.needed("num_experts_per_tok");
        if (m.experts_per_token > m.experts)
            cfg.fail("num_experts_per_tok", "expected at most num_local_experts " + std::to_string(m.experts) +
                                                ", found " + std::to_string(m.experts_per_token));
    }
}

}  // namespace

LmConfig read_config(const Checkpoint& c) {
    const ConfigJson cfg(c);
    if (c.config_path.empty())
        throw InputError(escape_control(c.path) + ": no config.json beside the weights (the forward pass reads the " +
                         "model's shape from it)");
    LmConfig m;
    m.model_type = cfg.text("model_type").value_or("");
    const Family* f = find_family(m.model_type);
    if (!f)
        cfg.fail("model_type", "'" + shown(m.model_type) + "' is not a model attnscope runs (" + family_list() + ")");
    m.arch = f;
    m.family = f->qkv == QkvKind::gpt2_columns ? LmFamily::gpt2 : !f->causal ? LmFamily::bert : LmFamily::llama;
    read_shape(cfg, *f, m);
    if (m.family == LmFamily::gpt2)
        refuse_flag(cfg, "add_cross_attention", true, "cross-attention blocks are not followed (a decoder alone)");
    if (m.family == LmFamily::bert) read_bert(cfg, m);
    m.mlp_bias = cfg.flag("mlp_bias").value_or(false);
    read_options(cfg, *f, m);
    // dynamic NTK RoPE is made for sequences past max_position_embeddings: they are run
    if (const auto rs = cfg.get("rope_scaling"); f->rope && rs && rs->is_object())
        for (const char* k : {"rope_type", "type"})
            if (rs->contains(k) && (*rs)[k] == "dynamic") m.positions = std::size_t(1) << 24;
    return m;
}

}  // namespace lm

const std::vector<std::string>& lm_model_types() {
    static const std::vector<std::string> v = [] {
        std::vector<std::string> types;
        for (const auto& f : families()) types.push_back(f.model_type);
        return types;
    }();
    return v;
}

const std::vector<std::string>& lm_activations() {
    static const std::vector<std::string> v = {"gelu_new", "gelu_pytorch_tanh", "gelu_fast", "gelu", "silu", "swish",
                                               "relu"};
    return v;
}

}  // namespace attnscope
