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

std::optional<nlohmann::json> ConfigFile::get(const std::string& key) const {
    const auto it = c_.config.find(key);
    if (it == c_.config.end()) return std::nullopt;
    auto j = nlohmann::json::parse(it->second, nullptr, false);
    if (j.is_discarded() || j.is_null()) return std::nullopt;
    return j;
}

std::size_t ConfigFile::count(const std::string& key, std::optional<std::size_t> otherwise) const {
    const auto j = get(key);
    if (!j) {
        if (otherwise) return *otherwise;
        fail(key, "missing (the forward pass needs it)");
    }
    if (!j->is_number_unsigned() || j->get<std::uint64_t>() == 0 || j->get<std::uint64_t>() > (1u << 30))
        fail(key, "expected a positive integer, found " + shown(j->dump()));
    return std::size_t(j->get<std::uint64_t>());
}

double ConfigFile::number(const std::string& key, double otherwise) const {
    const auto j = get(key);
    if (!j) return otherwise;
    if (!j->is_number()) fail(key, "expected a number, found " + shown(j->dump()));
    return j->get<double>();
}

bool ConfigFile::flag(const std::string& key, bool otherwise) const {
    const auto j = get(key);
    if (!j) return otherwise;
    if (!j->is_boolean()) fail(key, "expected true or false, found " + shown(j->dump()));
    return j->get<bool>();
}

std::string ConfigFile::text(const std::string& key, const std::string& otherwise) const {
    const auto j = get(key);
    if (!j) return otherwise;
    if (!j->is_string()) fail(key, "expected a string, found " + shown(j->dump()));
    return j->get<std::string>();
}

void ConfigFile::fail(const std::string& key, const std::string& what) const {
    throw InputError(escape_control(c_.config_path.empty() ? c_.path + "/config.json" : c_.config_path) + ": " + key +
                     ": " + what);
}

namespace {

Activation activation_of(const ConfigFile& cfg, const std::string& key, const std::string& otherwise,
                         std::string& name) {
    name = cfg.text(key, otherwise);
    // gelu_new, gelu_pytorch_tanh and gelu_fast are the same tanh approximation.
    if (name == "gelu_new" || name == "gelu_pytorch_tanh" || name == "gelu_fast") return Activation::gelu_tanh;
    if (name == "gelu") return Activation::gelu_erf;
    if (name == "silu" || name == "swish") return Activation::silu;
    if (name == "relu") return Activation::relu;
    cfg.fail(key, "'" + shown(name) + "' is not an activation attnscope follows (" + joined(lm_activations()) + ")");
}

// A flag the forward pass cannot follow when it has `value`.
void refuse_flag(const ConfigFile& cfg, const std::string& key, bool value, const std::string& why) {
    if (cfg.flag(key, !value) == value) cfg.fail(key, std::string(value ? "true" : "false") + ": " + why);
}

void read_gpt2(const ConfigFile& cfg, LmConfig& m) {
    m.layers = cfg.count("n_layer");
    m.hidden = cfg.count("n_embd");
    m.mlp = cfg.count("n_inner", 4 * m.hidden);
    m.vocab = cfg.count("vocab_size");
    m.positions = cfg.count("n_positions", 1024);
    m.eps = cfg.number("layer_norm_epsilon", 1e-5);
    m.act = activation_of(cfg, "activation_function", "gelu_new", m.act_name);
    m.tied = cfg.flag("tie_word_embeddings", true);
    refuse_flag(cfg, "add_cross_attention", true, "cross-attention blocks are not followed (a decoder alone)");
}

void read_bert(const ConfigFile& cfg, LmConfig& m) {
    m.layers = cfg.count("num_hidden_layers");
    m.hidden = cfg.count("hidden_size");
    m.mlp = cfg.count("intermediate_size");
    m.vocab = cfg.count("vocab_size");
    m.positions = cfg.count("max_position_embeddings", 512);
    m.type_vocab = cfg.count("type_vocab_size", 2);
    m.eps = cfg.number("layer_norm_eps", 1e-12);
    m.act = activation_of(cfg, "hidden_act", "gelu", m.act_name);
    m.tied = cfg.flag("tie_word_embeddings", true);
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

void read_llama(const ConfigFile& cfg, LmConfig& m) {
    m.layers = cfg.count("num_hidden_layers");
    m.hidden = cfg.count("hidden_size");
    m.mlp = cfg.count("intermediate_size");
    m.vocab = cfg.count("vocab_size");
    m.positions = cfg.count("max_position_embeddings", 2048);
    m.eps = cfg.number("rms_norm_eps", 1e-6);
    m.act = activation_of(cfg, "hidden_act", "silu", m.act_name);
    m.tied = cfg.flag("tie_word_embeddings", false);
    m.mlp_bias = cfg.flag("mlp_bias", false);
}

}  // namespace

LmConfig read_config(const Checkpoint& c) {
    const ConfigFile cfg(c);
    if (c.config_path.empty())
        throw InputError(escape_control(c.path) + ": no config.json beside the weights (the forward pass reads the " +
                         "model's shape from it)");
    LmConfig m;
    m.model_type = cfg.text("model_type", "");
    const auto& types = lm_model_types();
    if (std::find(types.begin(), types.end(), m.model_type) == types.end())
        cfg.fail("model_type", "'" + shown(m.model_type) + "' is not a model attnscope runs (" + joined(types) + ")");
    if (m.model_type == "gpt2")
        m.family = LmFamily::gpt2, read_gpt2(cfg, m);
    else if (m.model_type == "bert" || m.model_type == "roberta")
        m.family = LmFamily::bert, read_bert(cfg, m);
    else
        m.family = LmFamily::llama, read_llama(cfg, m);
    if (!(m.eps >= 0) || !std::isfinite(m.eps))
        cfg.fail(m.family == LmFamily::gpt2   ? "layer_norm_epsilon"
                 : m.family == LmFamily::bert ? "layer_norm_eps"
                                              : "rms_norm_eps",
                 "expected a finite number >= 0");
    return m;
}

}  // namespace lm

const std::vector<std::string>& lm_model_types() {
    static const std::vector<std::string> v = {"gpt2", "bert", "roberta", "llama", "mistral", "qwen2"};
    return v;
}

const std::vector<std::string>& lm_activations() {
    static const std::vector<std::string> v = {"gelu_new", "gelu_pytorch_tanh", "gelu_fast", "gelu", "silu", "swish",
                                               "relu"};
    return v;
}

}  // namespace attnscope
