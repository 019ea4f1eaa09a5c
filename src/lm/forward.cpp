// The forward pass: embeddings, blocks (attention through core's attend()), final norm and
// LM head, for the gpt2, bert/roberta and llama/mistral/qwen2 families (forward.hpp).
#include "attnscope/lm/forward.hpp"

#include <algorithm>
#include <string>
#include <xtensor/xview.hpp>

#include "../core/blas.hpp"
#include "attnscope/base/errors.hpp"
#include "attnscope/base/text.hpp"
#include "attnscope/core/attention.hpp"
#include "attnscope/model/checkpoint_layer.hpp"
#include "lm.hpp"

namespace attnscope {
namespace lm {
namespace {

// The checkpoint's tensors by name, each checked against the shape config.json gives it.
class Weights {
   public:
    Weights(const Checkpoint& c, std::size_t max_bytes) : c_(c), max_bytes_(max_bytes) {}
    const std::string& path() const { return c_.path; }
    bool has(const std::string& name) const {
        const auto& t = c_.source->tensors();
        return std::any_of(t.begin(), t.end(), [&](const TensorInfo& i) { return i.name == name; });
    }
    // The tensor `name` of shape `shape`; `why` says where the shape comes from.
    Array read(const std::string& name, const std::vector<std::size_t>& shape, const std::string& why) const {
        if (!has(name)) throw InputError(escape_control(c_.path) + ": no tensor '" + escape_control(name) + "'");
        Array a = c_.source->read(name, max_bytes_);
        if (a.is_text() || a.shape != shape)
            throw InputError(a.origin + ": expected shape " + shape_str(shape) + " (" + why + "), found " +
                             shape_str(a.shape));
        return a;
    }
    std::vector<double> vec(const std::string& name, std::size_t n, const std::string& why) const {
        return read(name, {n}, why).doubles();
    }
    // A linear map stored (out, in) (`torch`) or (in, out); its bias when `bias`.
    Linear linear(const std::string& name, std::size_t in, std::size_t out, bool torch, bool bias,
                  const std::string& why_in, const std::string& why_out) const {
        Linear l;
        l.in = in, l.out = out, l.torch = torch;
        const Array w = read(name + ".weight", torch ? std::vector{out, in} : std::vector{in, out},
                             torch ? why_out + ", " + why_in : why_in + ", " + why_out);
        l.w.resize(in * out);
        copy_numbers(w, l.w.data());
        if (bias) l.b = vec(name + ".bias", out, why_out);
        return l;
    }
    Norm norm(const std::string& name, std::size_t d, double eps, bool rms, const std::string& why,
              const char* w = "weight", const char* b = "bias") const {
        Norm n;
        n.w = vec(name + "." + w, d, why);
        if (!rms) n.b = vec(name + "." + b, d, why);
        n.eps = eps, n.rms = rms;
        return n;
    }

   private:
    const Checkpoint& c_;
    std::size_t max_bytes_;
};

const char* width_key(const LmConfig& m) { return m.family == LmFamily::gpt2 ? "n_embd" : "hidden_size"; }
const char* mlp_key(const LmConfig& m) { return m.family == LmFamily::gpt2 ? "n_inner" : "intermediate_size"; }

// One block's weights other than the attention's.
struct Block {
    Norm norm1, norm2;           // pre-norms (gpt2, llama), or the post-norms after attention and MLP (bert)
    Linear up, down;             // gpt2 c_fc / c_proj; bert intermediate / output; llama up_proj / down_proj
    std::optional<Linear> gate;  // llama's gate_proj
};

Block read_block(const Weights& w, const LmConfig& m, std::size_t l) {
    const std::size_t D = m.hidden, F = m.mlp;
    const std::string wd = std::string("config.json ") + width_key(m), fd = std::string("config.json ") + mlp_key(m);
    Block b;
    if (m.family == LmFamily::gpt2) {
        const std::string p = m.prefix + "h." + std::to_string(l) + ".";
        b.norm1 = w.norm(p + "ln_1", D, m.eps, false, wd);
        b.norm2 = w.norm(p + "ln_2", D, m.eps, false, wd);
        b.up = w.linear(p + "mlp.c_fc", D, F, false, true, wd, fd);
        b.down = w.linear(p + "mlp.c_proj", F, D, false, true, fd, wd);
    } else if (m.family == LmFamily::bert) {
        const std::string p = m.prefix + "encoder.layer." + std::to_string(l) + ".";
        b.norm1 = w.norm(p + "attention.output.LayerNorm", D, m.eps, false, wd);
        b.norm2 = w.norm(p + "output.LayerNorm", D, m.eps, false, wd);
        b.up = w.linear(p + "intermediate.dense", D, F, true, true, wd, fd);
        b.down = w.linear(p + "output.dense", F, D, true, true, fd, wd);
    } else {
        const std::string p = m.prefix + "layers." + std::to_string(l) + ".";
        b.norm1 = w.norm(p + "input_layernorm", D, m.eps, true, wd);
        b.norm2 = w.norm(p + "post_attention_layernorm", D, m.eps, true, wd);
        b.gate = w.linear(p + "mlp.gate_proj", D, F, true, m.mlp_bias, wd, fd);
        b.up = w.linear(p + "mlp.up_proj", D, F, true, m.mlp_bias, wd, fd);
        b.down = w.linear(p + "mlp.down_proj", F, D, true, m.mlp_bias, fd, wd);
    }
    return b;
}

// The MLP of block b on x (T, Dm) -> (T, Dm): down(act(up(x))), or down(act(gate(x)) ⊙ up(x)).
Tensor<double, 2> mlp(const Block& b, Activation act, const Tensor<double, 2>& x) {
    Tensor<double, 2> u = apply(b.up, x);  // (T, Dff)
    if (b.gate) {
        Tensor<double, 2> g = apply(*b.gate, x);  // (T, Dff)
        activate(act, g);
        u *= g;
    } else {
        activate(act, u);
    }
    return apply(b.down, u);  // (T, Dm)
}

// What the layer's preset says of its attention, as a Spec.
Spec spec_of_layer(const CheckpointLayer& cl, const std::string& path) {
    const LayerConfig& c = cl.config;
    if (!c.heads) throw InputError(escape_control(path) + ": config.json does not give the number of heads");
    Spec s;
    s.heads = *c.heads;
    s.kv_heads = c.kv_heads;
    s.causal = c.causal.value_or(false);
    s.rope = c.rope;
    s.window = c.window;
    s.layout = cl.layout;
    if (c.scale) s.scale = *c.scale, s.scale_source = c.scale_why;
    return s;
}

// Layer l's attention on its input a (T, Dm), output projection included -> (T, Dm).
Tensor<double, 2> attention(const Checkpoint& c, const LmConfig& m, std::size_t l, const Tensor<double, 2>& a,
                            std::size_t threads, std::size_t max_bytes) {
    LayerRequest req;
    req.layer = l;
    CheckpointLayer cl = choose_layer(c, req, max_bytes);
    if (!cl.arrays.count("W_O"))
        throw InputError(escape_control(c.path) + ": " + escape_control(cl.prefix) +
                         " has no output projection (the forward pass needs it)");
    const Spec spec = spec_of_layer(cl, c.path);
    Bundle bundle;
    bundle.source = c.path;
    bundle.arrays = std::move(cl.arrays);
    Array x;  // (T, Dm)
    x.shape = {a.shape(0), a.shape(1)};
    x.dtype = "float64";
    x.origin = c.path + ": layer " + std::to_string(l) + "'s attention input";
    x.values.assign(a.begin(), a.end());
    bundle.arrays["x"] = std::move(x);
    const Problem<double> p = make_problem<double>(bundle, spec);
    if (p.dims.Dout != m.hidden)
        throw InputError(escape_control(c.path) + ": " + escape_control(cl.prefix) + "'s output has " +
                         std::to_string(p.dims.Dout) + " features, expected config.json " + width_key(m) + " " +
                         std::to_string(m.hidden));
    Compute how;
    how.keep = StageSet().set(kOutput);
    how.threads = threads;
    const Trace<double> tr = attend(p, how);
    Tensor<double, 2> out = Tensor<double, 2>::from_shape({a.shape(0), m.hidden});  // (1, T, Dm) -> (T, Dm)
    std::copy(tr.output.begin(), tr.output.end(), out.begin());
    return out;
}

// h (T, Dm): the token embeddings, plus position (and token-type) embeddings and the
// embeddings' LayerNorm where the family has them.
Tensor<double, 2> embed(const Weights& w, const LmConfig& m, const std::vector<std::uint32_t>& ids) {
    const std::size_t T = ids.size(), D = m.hidden;
    const std::string wd = std::string("config.json vocab_size, ") + width_key(m);
    // The token embedding first: its shape, checked, vouches for D before h is allocated.
    const std::string token_name = m.prefix + (m.family == LmFamily::gpt2   ? "wte.weight"
                                               : m.family == LmFamily::bert ? "embeddings.word_embeddings.weight"
                                                                            : "embed_tokens.weight");
    const Array tokens = w.read(token_name, {m.vocab, D}, wd);
    Tensor<double, 2> h = xt::zeros<double>({T, D});
    auto add_rows = [&](const Array& e, auto row_of) {  // h[t] += e[row_of(t)]
        for (std::size_t t = 0; t < T; ++t)
            for (std::size_t d = 0; d < D; ++d) h(t, d) += e.value(row_of(t) * D + d);
    };
    auto token = [&](std::size_t t) { return std::size_t(ids[t]); };
    auto position = [&](std::size_t t) { return t; };
    add_rows(tokens, token);
    if (m.family == LmFamily::gpt2) {
        add_rows(w.read(m.prefix + "wpe.weight", {m.positions, D}, "config.json n_positions, n_embd"), position);
    } else if (m.family == LmFamily::bert) {
        const std::string p = m.prefix + "embeddings.";
        // RoBERTa: padding_idx + 1 + the count of non-padding tokens so far; padding keeps padding_idx.
        std::vector<std::size_t> pos(T);
        std::size_t seen = 0;
        for (std::size_t t = 0; t < T; ++t)
            pos[t] = !m.pad_id ? t : ids[t] == *m.pad_id ? *m.pad_id : *m.pad_id + ++seen;
        add_rows(w.read(p + "position_embeddings.weight", {m.positions, D},
                        "config.json max_position_embeddings, " + std::string(width_key(m))),
                 [&](std::size_t t) { return pos[t]; });
        add_rows(w.read(p + "token_type_embeddings.weight", {m.type_vocab, D}, "config.json type_vocab_size"),
                 [](std::size_t) { return std::size_t(0); });
        apply(w.norm(p + "LayerNorm", D, m.eps, false, wd), h);
    }
    return h;
}

// logits (R, V) = h (R, Dm) · Eᵀ (Dm, V) (+ bias), E (V, Dm) widened to double a block of
// rows at a time.
Tensor<double, 2> project(const Array& e, const Tensor<double, 2>& h, const std::vector<double>& bias) {
    const std::size_t R = h.shape(0), D = h.shape(1), V = e.shape[0], block = 4096;
    Tensor<double, 2> out = Tensor<double, 2>::from_shape({R, V});
    Buffer<double> rows(std::min(V, block) * D);
    for (std::size_t v0 = 0; v0 < V; v0 += block) {
        const std::size_t n = std::min(block, V - v0);
        for (std::size_t k = 0; k < n * D; ++k) rows[k] = e.value(v0 * D + k);
        gemm<double>(false, true, R, n, D, 1.0, h.data(), D, rows.data(), D, 0.0, &out(0, v0), V);
    }
    if (!bias.empty())
        for (std::size_t r = 0; r < R; ++r)
            for (std::size_t v = 0; v < V; ++v) out(r, v) += bias[v];
    return out;
}

// The LM head on the final hidden states h (R, Dm) -> logits (R, V).
Tensor<double, 2> head(const Weights& w, const LmConfig& m, Tensor<double, 2> h) {
    const std::size_t D = m.hidden;
    const std::string wd = std::string("config.json ") + width_key(m), vd = "config.json vocab_size, " + wd;
    std::string embedding = m.prefix + (m.family == LmFamily::gpt2 ? "wte.weight" : "embed_tokens.weight");
    std::string unembedding = "lm_head.weight";
    std::vector<double> bias;
    if (m.family == LmFamily::gpt2) {
        apply(w.norm(m.prefix + "ln_f", D, m.eps, false, wd), h);
    } else if (m.family == LmFamily::llama) {
        apply(w.norm(m.prefix + "norm", D, m.eps, true, wd), h);
    } else {  // the masked-LM head: LN(act(dense(h))) · Eᵀ + bias
        const bool roberta = m.model_type == "roberta";
        const std::string p = roberta ? "lm_head." : "cls.predictions.";
        const std::string dense = p + (roberta ? "dense" : "transform.dense");
        if (!w.has(dense + ".weight"))
            throw InputError(escape_control(w.path()) + ": no masked-LM head (no tensor '" + dense +
                             ".weight'): the checkpoint holds the encoder alone, and the logits need the head");
        h = apply(w.linear(dense, D, D, true, true, wd, wd), h);
        activate(roberta ? Activation::gelu_erf : m.act, h);
        apply(roberta ? w.norm(p + "layer_norm", D, m.eps, false, wd)
                      : w.norm(p + "transform.LayerNorm", D, m.eps, false, wd),
              h);
        bias = w.vec(p + "bias", m.vocab, "config.json vocab_size");
        embedding = m.prefix + "embeddings.word_embeddings.weight";
        unembedding = p + "decoder.weight";
    }
    return project(w.read(m.tied ? embedding : unembedding, {m.vocab, D}, vd), h, bias);
}

}  // namespace
}  // namespace lm

using lm::Weights;

LanguageModel LanguageModel::open(const std::string& dir, std::size_t max_bytes) {
    LanguageModel model;
    model.checkpoint_ = std::make_shared<Checkpoint>(open_checkpoint(dir, max_bytes));
    model.max_bytes_ = max_bytes;
    LmConfig& m = model.config_ = lm::read_config(*model.checkpoint_);
    const Weights w(*model.checkpoint_, max_bytes);
    if (m.family == LmFamily::gpt2) m.prefix = w.has("transformer.wte.weight") ? "transformer." : "";
    if (m.family == LmFamily::bert) {
        const std::string root = m.model_type + ".";
        m.prefix = w.has(root + "embeddings.word_embeddings.weight") ? root : "";
    }
    if (m.family == LmFamily::llama) m.prefix = w.has("model.embed_tokens.weight") ? "model." : "";
    return model;
}

void LanguageModel::check_ids(const std::vector<std::uint32_t>& ids) const {
    const LmConfig& m = config_;
    if (ids.empty()) throw InputError("no tokens to run the model on");
    const std::size_t room = m.positions - m.position_offset;
    if (ids.size() > room)
        throw InputError(std::to_string(ids.size()) + " tokens: more than the model's " + std::to_string(room) +
                         " positions (" + escape_control(checkpoint_->config_path) + " " +
                         (m.family == LmFamily::gpt2 ? "n_positions" : "max_position_embeddings") + ")");
    for (std::size_t i = 0; i < ids.size(); ++i)
        if (ids[i] >= m.vocab)
            throw InputError("token " + std::to_string(i) + ": id " + std::to_string(ids[i]) +
                             " is outside the vocabulary (" + escape_control(checkpoint_->config_path) +
                             " vocab_size " + std::to_string(m.vocab) + ")");
}

}  // namespace attnscope

namespace attnscope {

ForwardResult LanguageModel::forward(const std::vector<std::uint32_t>& ids, const ForwardRequest& r) const {
    using namespace lm;
    const LmConfig& m = config_;
    check_ids(ids);
    if (r.stop_after && *r.stop_after >= m.layers)
        throw UsageError("{layer} " + std::to_string(*r.stop_after) + ": the model has " + std::to_string(m.layers) +
                         " layers (0–" + std::to_string(m.layers - 1) + ")");
    const Weights w(*checkpoint_, max_bytes_);
    ForwardResult out;
    out.attention_inputs.resize(m.layers);
    Tensor<double, 2> h = embed(w, m, ids);  // (T, Dm)
    const std::size_t end = r.logits ? m.layers : r.stop_after ? *r.stop_after + 1 : 0;
    for (std::size_t l = 0; l < end; ++l) {
        const Block b = read_block(w, m, l);
        Tensor<double, 2> a = h;  // the attention's input (T, Dm)
        if (m.family != LmFamily::bert) apply(b.norm1, a);
        if (r.every_input || r.stop_after == l) out.attention_inputs[l] = a;
        if (!r.logits && r.stop_after == l) break;
        h += attention(*checkpoint_, m, l, a, r.threads, max_bytes_);
        if (m.family == LmFamily::bert) {  // post-norm: h = LN(h + attn(h)); h = LN(h + mlp(h))
            apply(b.norm1, h);
            h += mlp(b, m.act, h);
            apply(b.norm2, h);
        } else {  // pre-norm: h += mlp(norm2(h))
            Tensor<double, 2> n = h;
            apply(b.norm2, n);
            h += mlp(b, m.act, n);
        }
    }
    if (!r.logits) return out;
    out.logit_rows = r.logit_rows;
    if (out.logit_rows.empty())
        for (std::size_t t = 0; t < ids.size(); ++t) out.logit_rows.push_back(t);
    if (out.logit_rows.size() * m.vocab > max_bytes_ / sizeof(double))
        throw MemoryLimitError("the logits of " + std::to_string(out.logit_rows.size()) + " positions over " +
                               std::to_string(m.vocab) + " tokens need " +
                               format_bytes(out.logit_rows.size() * m.vocab * sizeof(double)) +
                               ", more than {max_memory} " + format_bytes(max_bytes_));
    Tensor<double, 2> rows = Tensor<double, 2>::from_shape({out.logit_rows.size(), m.hidden});  // (R, Dm)
    for (std::size_t k = 0; k < out.logit_rows.size(); ++k)
        xt::view(rows, k, xt::all()) = xt::view(h, out.logit_rows.at(k), xt::all());
    out.logits = head(w, m, std::move(rows));
    return out;
}

}  // namespace attnscope
