// The forward pass: embeddings, blocks (attention through core's attend()), final norm and
// LM head, for the gpt2, bert/roberta and llama/mistral/qwen2 families (forward.hpp).
#include "attnscope/lm/forward.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <xtensor/xview.hpp>

#include "attnscope/base/errors.hpp"
#include "attnscope/base/text.hpp"
#include "attnscope/core/attention.hpp"
#include "attnscope/core/linear.hpp"
#include "attnscope/model/checkpoint_layer.hpp"
#include "lm.hpp"

namespace attnscope {
namespace lm {

bool Weights::has(const std::string& name) const {
    const auto& t = c_.source->tensors();
    return std::any_of(t.begin(), t.end(), [&](const TensorInfo& i) { return i.name == name; });
}

Array Weights::read(const std::string& name, const std::vector<std::size_t>& shape, const std::string& why) const {
    if (!has(name)) throw InputError(escape_control(c_.path) + ": no tensor '" + escape_control(name) + "'");
    Array a = c_.source->read(name, max_bytes_);
    if (a.is_text() || a.shape != shape)
        throw InputError(a.origin + ": expected shape " + shape_str(shape) + " (" + why + "), found " +
                         shape_str(a.shape));
    return a;
}

template <class T>
std::vector<T> Weights::vec(const std::string& name, std::size_t n, const std::string& why) const {
    std::vector<T> v(n);
    copy_numbers(read(name, {n}, why), v.data());
    return v;
}

template <class T>
Linear<T> Weights::linear(const std::string& name, std::size_t in, std::size_t out, bool torch, bool bias,
                          const std::string& why_in, const std::string& why_out) const {
    Linear<T> l;
    l.in = in, l.out = out, l.torch = torch;
    const Array w = read(name + ".weight", torch ? std::vector{out, in} : std::vector{in, out},
                         torch ? why_out + ", " + why_in : why_in + ", " + why_out);
    l.w.resize(in * out);
    copy_numbers(w, l.w.data());
    if (bias) l.b = vec<T>(name + ".bias", out, why_out);
    return l;
}

template <class T>
Norm<T> Weights::norm(const std::string& name, std::size_t d, double eps, NormKind kind, const std::string& why) const {
    Norm<T> n;
    n.w = vec<T>(name + ".weight", d, why);
    if (kind == NormKind::layer) n.b = vec<T>(name + ".bias", d, why);
    if (kind == NormKind::rms_unit_offset)
        for (T& w : n.w) w += T(1);  // Gemma: x / rms · (1 + w)
    n.eps = eps, n.rms = kind != NormKind::layer;
    return n;
}

namespace {

std::string width_why(const LmConfig& m) { return "config.json " + m.arch->hidden_key; }
std::string mlp_why(const LmConfig& m) { return "config.json " + m.arch->mlp_key; }

// Block l's names begin with this: "transformer.h.3." (gpt2), "model.layers.3." (llama), ...
std::string block_prefix(const LmConfig& m, std::size_t l) {
    return m.prefix + m.arch->block + std::to_string(l) + ".";
}

}  // namespace

template <class T>
Block<T> read_norms(const Weights& w, const LmConfig& m, std::size_t l) {
    const Family& f = *m.arch;
    const std::size_t D = m.hidden;
    const std::string wd = width_why(m), p = block_prefix(m, l);
    Block<T> b;
    b.norm1 = w.norm<T>(p + f.norm1, D, m.eps, f.norm, wd);
    b.norm2 = w.norm<T>(p + f.norm2, D, m.eps, f.norm, wd);
    if (m.blocks == BlockKind::sandwich) {
        b.post1 = w.norm<T>(p + f.post_norm1, D, m.eps, f.norm, wd);
        b.post2 = w.norm<T>(p + f.post_norm2, D, m.eps, f.norm, wd);
    }
    return b;
}

template <class T>
Mlp<T> read_mlp(const Weights& w, const LmConfig& m, std::size_t l) {
    const Family& f = *m.arch;
    const std::size_t D = m.hidden, F = m.mlp;
    const std::string wd = width_why(m), fd = mlp_why(m), p = block_prefix(m, l);
    const bool torch = f.qkv != QkvKind::gpt2_columns;  // GPT-2's Conv1D stores (in, out)
    const bool bias = f.biases || m.mlp_bias;
    Mlp<T> out;
    if (f.mlp == MlpKind::experts) {
        out.router = w.linear<T>(p + f.router, D, m.experts, true, false, wd, "config.json num_local_experts");
        out.top_k = m.experts_per_token;
        out.expert = [w, m, p, wd, fd](std::size_t e) {
            const std::string x = p + m.arch->experts + std::to_string(e) + ".";
            Mlp<T> one;
            one.gate = w.linear<T>(x + m.arch->gate, m.hidden, m.mlp, true, false, wd, fd);
            one.up = w.linear<T>(x + m.arch->up, m.hidden, m.mlp, true, false, wd, fd);
            one.down = w.linear<T>(x + m.arch->down, m.mlp, m.hidden, true, false, fd, wd);
            return one;
        };
        return out;
    }
    if (f.mlp == MlpKind::gated) out.gate = w.linear<T>(p + f.gate, D, F, torch, bias, wd, fd);
    out.fused = f.mlp == MlpKind::gated_fused;
    out.up = w.linear<T>(p + f.up, D, out.fused ? 2 * F : F, torch, bias, wd, out.fused ? "2 × " + fd : fd);
    out.down = w.linear<T>(p + f.down, F, D, torch, bias, fd, wd);
    return out;
}

template <class T>
Block<T> read_block(const Weights& w, const LmConfig& m, std::size_t l) {
    Block<T> b = read_norms<T>(w, m, l);
    b.mlp = read_mlp<T>(w, m, l);
    return b;
}

// The MLP on x (T, Dm) -> (T, Dm): down(act(up(x))), or down(act(gate(x)) ⊙ up(x)).
namespace {

// Mixtral's sparse MLP on x (T, Dm): per token, softmax over the router's logits, the k
// largest (ties: the lower expert), renormalized; each expert, in order, on its tokens.
template <class T>
Tensor<T, 2> experts(const Mlp<T>& f, Activation act, const Tensor<T, 2>& x) {
    const Tensor<T, 2> logits = apply(*f.router, x);  // (T, E)
    const std::size_t n = x.shape(0), E = logits.shape(1), D = x.shape(1);
    std::vector<std::vector<std::pair<std::size_t, T>>> routed(E);  // expert -> (token, weight)
    std::vector<T> prob(E);
    std::vector<std::size_t> order(E);
    for (std::size_t t = 0; t < n; ++t) {
        const T top = *std::max_element(&logits(t, 0), &logits(t, 0) + E);
        T sum = 0;
        for (std::size_t e = 0; e < E; ++e) sum += prob[e] = std::exp(logits(t, e) - top);
        for (T& p : prob) p /= sum;
        for (std::size_t e = 0; e < E; ++e) order[e] = e;
        std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return prob[a] > prob[b]; });
        T kept = 0;
        for (std::size_t k = 0; k < f.top_k; ++k) kept += prob[order[k]];
        for (std::size_t k = 0; k < f.top_k; ++k) routed[order[k]].push_back({t, prob[order[k]] / kept});
    }
    Tensor<T, 2> out = xt::zeros<T>({n, D});
    for (std::size_t e = 0; e < E; ++e) {
        if (routed[e].empty()) continue;
        const Mlp<T> one = f.expert(e);  // this expert's weights only, freed after its tokens
        Tensor<T, 2> rows = Tensor<T, 2>::from_shape({routed[e].size(), D});
        for (std::size_t i = 0; i < routed[e].size(); ++i) std::copy_n(&x(routed[e][i].first, 0), D, &rows(i, 0));
        const Tensor<T, 2> y = mlp(one, act, rows);
        for (std::size_t i = 0; i < routed[e].size(); ++i)
            for (std::size_t d = 0; d < D; ++d) out(routed[e][i].first, d) += y(i, d) * routed[e][i].second;
    }
    return out;
}

}  // namespace

template <class T>
Tensor<T, 2> mlp(const Mlp<T>& f, Activation act, const Tensor<T, 2>& x) {
    if (f.router) return experts(f, act, x);
    Tensor<T, 2> u = apply(f.up, x);  // (T, Dff), or (T, 2·Dff) fused: gate's columns, then up's
    if (f.fused) {
        const std::size_t F = u.shape(1) / 2;
        Tensor<T, 2> g = xt::view(u, xt::all(), xt::range(0, F)), up = xt::view(u, xt::all(), xt::range(F, 2 * F));
        activate(act, g);
        up *= g;
        return apply(f.down, up);
    }
    if (f.gate) {
        Tensor<T, 2> g = apply(*f.gate, x);  // (T, Dff)
        activate(act, g);
        u *= g;
    } else {
        activate(act, u);
    }
    return apply(f.down, u);  // (T, Dm)
}

namespace {

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
    s.softcap = c.softcap;
    s.qk_norm_eps = c.qk_norm_eps;
    s.layout = cl.layout;
    if (c.scale) s.scale = *c.scale, s.scale_source = c.scale_why;
    return s;
}

// A projection's output features as the layer stores it (nothing when it has none).
std::optional<std::size_t> outputs_of(const CheckpointLayer& cl, const char* name) {
    const auto it = cl.arrays.find(name);
    if (it == cl.arrays.end() || it->second.ndim() != 2) return std::nullopt;
    return cl.layout == Layout::torch ? it->second.shape[0] : it->second.shape[1];
}

// The heads config.json gives against the layer's key projection and RoPE, each refused
// naming config.json and its keys (not the options a bundle's run would take).
void check_config_heads(const CheckpointLayer& cl, const LmConfig& m, const std::string& config) {
    const LayerConfig& c = cl.config;
    const auto q = outputs_of(cl, "W_Q"), k = outputs_of(cl, "W_K");
    if (!c.heads || !*c.heads || !q || !k || *q % *c.heads) return;  // refused by the preset, naming n_head
    const std::size_t H = *c.heads, G = c.kv_heads.value_or(H), Dk = *q / H;
    const std::string facts = " (" + facts_text(c) + ")";
    const char* heads_key = m.family == LmFamily::gpt2 ? "n_head" : "num_attention_heads";
    if (G == 0 || *k != G * Dk)
        throw InputError(escape_control(config) + ": " + (c.kv_heads ? "num_key_value_heads " : heads_key) +
                         (c.kv_heads ? "" : " ") + std::to_string(G) + " K/V heads of " + std::to_string(Dk) +
                         " features need " + std::to_string(G * Dk) + " key features, but " +
                         escape_control(cl.prefix) + "'s W_K has " + std::to_string(*k) + facts);
    const std::size_t rotated = c.rope && c.rope->dim ? *c.rope->dim : Dk;
    if (c.rope && rotated % 2)
        throw InputError(escape_control(config) + ": " + heads_key + " " + std::to_string(H) + " gives heads of " +
                         std::to_string(Dk) + " features, and RoPE rotates " + std::to_string(rotated) +
                         ", an odd number (it rotates features in pairs)" + facts);
}

// The query projection's outputs against heads × config.json's head_dim, refused as
// `run --checkpoint` refuses them.
void check_head_dim(const CheckpointLayer& cl, const std::string& path) {
    const LayerConfig& c = cl.config;
    const auto it = cl.arrays.find("W_Q");
    if (!c.head_dim || !c.heads || it == cl.arrays.end() || it->second.ndim() != 2) return;
    const std::size_t width = cl.layout == Layout::torch ? it->second.shape[0] : it->second.shape[1];
    if (width != *c.heads * *c.head_dim)
        throw InputError(escape_control(path) + ": " + escape_control(cl.prefix) + " query projection has " +
                         std::to_string(width) + " outputs, expected heads " + std::to_string(*c.heads) +
                         " × head width " + std::to_string(*c.head_dim) + " (" + facts_text(c) + ")");
}

}  // namespace

template <class T>
Problem<T> layer_problem(const Checkpoint& c, const LmConfig& m, std::size_t l, const Tensor<T, 2>& a,
                         std::size_t max_bytes) {
    LayerRequest req;
    req.layer = l;
    req.tokens = a.shape(0);
    CheckpointLayer cl = choose_layer(c, req, max_bytes);
    if (!cl.arrays.count("W_O"))
        throw InputError(escape_control(c.path) + ": " + escape_control(cl.prefix) +
                         " has no output projection (the forward pass needs it)");
    check_head_dim(cl, c.path);
    check_config_heads(cl, m, c.config_path);
    const Spec spec = spec_of_layer(cl, c.path);
    Bundle bundle;
    bundle.source = c.path;
    bundle.arrays = std::move(cl.arrays);
    bundle.arrays["x"] = held_array(a, c.path + ": layer " + std::to_string(l) + "'s attention input");
    Problem<T> p = make_problem<T>(bundle, spec);
    if (p.dims.Dout != m.hidden)
        throw InputError(escape_control(c.path) + ": " + escape_control(cl.prefix) + "'s output has " +
                         std::to_string(p.dims.Dout) + " features, expected " + width_why(m) + " " +
                         std::to_string(m.hidden));
    return p;
}

template <class T>
Array held_array(const Tensor<T, 2>& a, const std::string& origin) {
    auto bytes = std::make_shared<std::string>(reinterpret_cast<const char*>(a.data()), a.size() * sizeof(T));
    Array x;
    x.shape = {a.shape(0), a.shape(1)};
    x.dtype = std::is_same_v<T, float> ? "float32" : "float64";
    x.held = std::is_same_v<T, float> ? Array::Held::float32 : Array::Held::float64;
    x.origin = origin;
    x.stored = *bytes;
    x.keep = std::move(bytes);
    return x;
}

template <class T>
Tensor<T, 2> attention_input(const Block<T>& b, const LmConfig& m, const Tensor<T, 2>& h) {
    Tensor<T, 2> a = h;
    if (m.blocks != BlockKind::post) apply(b.norm1, a);
    return a;
}

template <class T>
void add_attention(const Block<T>& b, const LmConfig& m, const Tensor<T, 3>& out, Tensor<T, 2>& h) {
    // out (1, T, Dm) -> h (T, Dm)
    if (out.shape(1) != h.shape(0) || out.shape(2) != h.shape(1))
        throw RuntimeFailure("the attention's output does not match the hidden states");
    const auto attn = xt::view(out, 0, xt::all(), xt::all());  // (T, Dm)
    switch (m.blocks) {
        case BlockKind::pre: {  // h += attn; h += mlp(norm2(h))
            h += attn;
            Tensor<T, 2> n = h;
            apply(b.norm2, n);
            h += mlp(b.mlp, m.act, n);
            break;
        }
        case BlockKind::post:  // h = LN(h + attn(h)); h = LN(h + mlp(h))
            h += attn;
            apply(b.norm1, h);
            h += mlp(b.mlp, m.act, h);
            apply(b.norm2, h);
            break;
        case BlockKind::parallel: {  // h += attn + mlp(norm2(h)), both from the block's input
            Tensor<T, 2> n = h;
            apply(b.norm2, n);
            h += mlp(b.mlp, m.act, n) + attn;
            break;
        }
        case BlockKind::sandwich: {  // h += post1(attn); h += post2(mlp(norm2(h)))
            Tensor<T, 2> a = attn;
            apply(*b.post1, a);
            h += a;
            Tensor<T, 2> n = h;
            apply(b.norm2, n);
            n = mlp(b.mlp, m.act, n);
            apply(*b.post2, n);
            h += n;
            break;
        }
    }
}

// h (T, Dm): the token embeddings, plus position (and token-type) embeddings and the
// embeddings' LayerNorm where the family has them; times sqrt(Dm) where it scales them.
template <class T>
Tensor<T, 2> embed(const Weights& w, const LmConfig& m, const std::vector<std::uint32_t>& ids, std::size_t start) {
    const Family& f = *m.arch;
    const std::size_t n = ids.size(), D = m.hidden;
    if (start && m.family == LmFamily::bert) throw std::logic_error("lm::embed: BERT's positions start at 0");
    const std::string wd = "config.json vocab_size, " + f.hidden_key;
    // The token embedding first: its shape, checked, vouches for D before h is allocated.
    const Array tokens = w.read(m.prefix + f.embed + ".weight", {m.vocab, D}, wd);
    Tensor<T, 2> h = xt::zeros<T>({n, D});
    auto add_rows = [&](const Array& e, auto row_of) {  // h[t] += e[row_of(t)], as T
        for (std::size_t t = 0; t < n; ++t)
            for (std::size_t d = 0; d < D; ++d) h(t, d) += T(e.value(row_of(t) * D + d));
    };
    auto token = [&](std::size_t t) { return std::size_t(ids[t]); };
    auto position = [&](std::size_t t) { return start + t; };
    add_rows(tokens, token);
    if (f.embed_scaled) h *= T(std::sqrt(double(D)));  // sqrt(Dm) rounded to the run's dtype, as HF
    if (m.family == LmFamily::gpt2) {
        add_rows(w.read(m.prefix + f.positions_embed + ".weight", {m.positions, D}, "config.json n_positions, n_embd"),
                 position);
    } else if (m.family == LmFamily::bert) {
        const std::string p = m.prefix + "embeddings.";
        // RoBERTa: padding_idx + 1 + the count of non-padding tokens so far; padding keeps padding_idx.
        std::vector<std::size_t> pos(n);
        std::size_t seen = 0;
        for (std::size_t t = 0; t < n; ++t)
            pos[t] = !m.pad_id ? t : ids[t] == *m.pad_id ? *m.pad_id : *m.pad_id + ++seen;
        add_rows(w.read(m.prefix + f.positions_embed + ".weight", {m.positions, D},
                        "config.json max_position_embeddings, " + f.hidden_key),
                 [&](std::size_t t) { return pos[t]; });
        add_rows(w.read(p + "token_type_embeddings.weight", {m.type_vocab, D}, "config.json type_vocab_size"),
                 [](std::size_t) { return std::size_t(0); });
        apply(w.norm<T>(p + "LayerNorm", D, m.eps, NormKind::layer, wd), h);
    }
    return h;
}

namespace {

// out (R, n) = h (R, Dm) · rowsᵀ (Dm, n), rows (n, Dm) as T
template <class T>
void project_rows(const Tensor<T, 2>& h, const T* rows, std::size_t n, T* out, std::size_t ld) {
    const std::size_t R = h.shape(0), D = h.shape(1);
    linear(h.data(), R, D, rows, D, n, Layout::torch, nullptr, out, ld);
}

}  // namespace

// BERT's and RoBERTa's masked-LM head: dense, activation and LayerNorm, its bias (V), and
// the name of its decoder (used when the embeddings are not tied).
template <class T>
void read_masked_lm_head(const Weights& w, const LmConfig& m, Head<T>& hd, std::string& unembedding) {
    const std::size_t D = m.hidden;
    const std::string wd = width_why(m);
    const bool roberta = m.model_type == "roberta";
    const std::string p = roberta ? "lm_head." : "cls.predictions.";
    const std::string dense = p + (roberta ? "dense" : "transform.dense");
    if (!w.has(dense + ".weight"))
        throw InputError(escape_control(w.path()) + ": no masked-LM head (no tensor '" + dense +
                         ".weight'): the checkpoint holds the encoder alone, and the logits need the head");
    hd.dense = w.linear<T>(dense, D, D, true, true, wd, wd);
    hd.act = roberta ? Activation::gelu_erf : m.act;
    hd.norm = w.norm<T>(p + (roberta ? "layer_norm" : "transform.LayerNorm"), D, m.eps, NormKind::layer, wd);
    hd.bias = w.vec<T>(p + "bias", m.vocab, "config.json vocab_size");
    unembedding = p + "decoder.weight";
}

template <class T>
Head<T> read_head(const Weights& w, const LmConfig& m) {
    const Family& f = *m.arch;
    const std::size_t D = m.hidden;
    const std::string vd = "config.json vocab_size, " + f.hidden_key;
    std::string unembedding = f.head + ".weight";
    Head<T> hd;
    if (m.family == LmFamily::bert)
        read_masked_lm_head(w, m, hd, unembedding);
    else
        hd.norm = w.norm<T>(m.prefix + f.final_norm, D, m.eps, f.norm, width_why(m));
    hd.unembedding = w.read(m.tied ? m.prefix + f.embed + ".weight" : unembedding, {m.vocab, D}, vd);
    hd.softcap = m.final_softcap;
    return hd;
}

template <class T>
void convert_unembedding(Head<T>& hd) {
    hd.converted.resize(hd.unembedding.shape[0] * hd.unembedding.shape[1]);
    copy_numbers(hd.unembedding, hd.converted.data());
}

// logits (R, V) = head(h (R, Dm)): the norm (after BERT's dense and activation), then · Eᵀ
// (Dm, V) (+ bias); E converted to T a block of rows at a time unless converted already.
template <class T>
Tensor<T, 2> apply_head(const Head<T>& hd, Tensor<T, 2> h) {
    if (hd.dense) {
        h = apply(*hd.dense, h);
        activate(hd.act, h);
    }
    apply(hd.norm, h);
    const Array& e = hd.unembedding;
    const std::size_t R = h.shape(0), D = h.shape(1), V = e.shape[0], block = 4096;
    Tensor<T, 2> out = Tensor<T, 2>::from_shape({R, V});
    if (!hd.converted.empty()) {
        project_rows(h, hd.converted.data(), V, out.data(), V);
    } else {
        Buffer<T> rows(std::min(V, block) * D);
        for (std::size_t v0 = 0; v0 < V; v0 += block) {
            const std::size_t n = std::min(block, V - v0);
            for (std::size_t k = 0; k < n * D; ++k) rows[k] = T(e.value(v0 * D + k));
            project_rows(h, rows.data(), n, &out(0, v0), V);
        }
    }
    if (!hd.bias.empty())
        for (std::size_t r = 0; r < R; ++r)
            for (std::size_t v = 0; v < V; ++v) out(r, v) += hd.bias[v];
    if (hd.softcap) {  // Gemma 2: logits -> C · tanh(logits / C)
        const T cap = T(*hd.softcap);
        for (T& v : out) v = std::tanh(v / cap) * cap;
    }
    return out;
}

// The LM head on the final hidden states h (R, Dm) -> logits (R, V).
template <class T>
Tensor<T, 2> head(const Weights& w, const LmConfig& m, Tensor<T, 2> h) {
    return apply_head(read_head<T>(w, m), std::move(h));
}

// Every step in float and double.
#define ATTNSCOPE_LM_STEPS(T)                                                                                        \
    template std::vector<T> Weights::vec<T>(const std::string&, std::size_t, const std::string&) const;              \
    template Linear<T> Weights::linear<T>(const std::string&, std::size_t, std::size_t, bool, bool,                  \
                                          const std::string&, const std::string&) const;                             \
    template Norm<T> Weights::norm<T>(const std::string&, std::size_t, double, NormKind, const std::string&) const;  \
    template Block<T> read_norms<T>(const Weights&, const LmConfig&, std::size_t);                                   \
    template Mlp<T> read_mlp<T>(const Weights&, const LmConfig&, std::size_t);                                       \
    template Block<T> read_block<T>(const Weights&, const LmConfig&, std::size_t);                                   \
    template Tensor<T, 2> mlp<T>(const Mlp<T>&, Activation, const Tensor<T, 2>&);                                    \
    template Problem<T> layer_problem<T>(const Checkpoint&, const LmConfig&, std::size_t, const Tensor<T, 2>&,       \
                                         std::size_t);                                                               \
    template Array held_array<T>(const Tensor<T, 2>&, const std::string&);                                           \
    template Tensor<T, 2> attention_input<T>(const Block<T>&, const LmConfig&, const Tensor<T, 2>&);                 \
    template void add_attention<T>(const Block<T>&, const LmConfig&, const Tensor<T, 3>&, Tensor<T, 2>&);            \
    template Tensor<T, 2> embed<T>(const Weights&, const LmConfig&, const std::vector<std::uint32_t>&, std::size_t); \
    template Tensor<T, 2> head<T>(const Weights&, const LmConfig&, Tensor<T, 2>);                                    \
    template Head<T> read_head<T>(const Weights&, const LmConfig&);                                                  \
    template void convert_unembedding<T>(Head<T>&);                                                                  \
    template Tensor<T, 2> apply_head<T>(const Head<T>&, Tensor<T, 2>);
ATTNSCOPE_LM_STEPS(float)
ATTNSCOPE_LM_STEPS(double)
#undef ATTNSCOPE_LM_STEPS

}  // namespace lm

using lm::Weights;

LanguageModel LanguageModel::open(const std::string& dir, std::size_t max_bytes) {
    LanguageModel model;
    model.checkpoint_ = std::make_shared<Checkpoint>(open_checkpoint(dir, max_bytes));
    model.max_bytes_ = max_bytes;
    LmConfig& m = model.config_ = lm::read_config(*model.checkpoint_);
    const Weights w(*model.checkpoint_, max_bytes);
    // The names' root: the first of the family's roots under which its token embedding is stored.
    const auto& roots = m.arch->roots;
    const auto root = std::find_if(roots.begin(), roots.end(),
                                   [&](const std::string& r) { return w.has(r + m.arch->embed + ".weight"); });
    m.prefix = root == roots.end() ? roots.back() : *root;
    return model;
}

std::vector<Pick> top_tokens(const double* logits, std::size_t V, std::size_t k) {
    if (V == 0) throw std::logic_error("top_tokens: no logits");
    const double top = *std::max_element(logits, logits + V);
    double sum = 0;
    for (std::size_t v = 0; v < V; ++v) sum += std::exp(logits[v] - top);
    const double log_sum = std::log(sum);
    std::vector<std::uint32_t> order(V);
    std::iota(order.begin(), order.end(), std::uint32_t{0});
    const std::size_t n = std::min(k, V);
    std::partial_sort(
        order.begin(), order.begin() + std::ptrdiff_t(n), order.end(),
        [&](std::uint32_t a, std::uint32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
    std::vector<Pick> picks(n);
    for (std::size_t i = 0; i < n; ++i) {
        const double lp = (logits[order[i]] - top) - log_sum;
        picks[i] = {order[i], std::exp(lp), lp};
    }
    return picks;
}

void LanguageModel::check_layer_heads(std::size_t layer) const {
    LayerRequest req;
    req.layer = layer;
    const CheckpointLayer cl = choose_layer(*checkpoint_, req, max_bytes_);
    lm::check_head_dim(cl, checkpoint_->path);
    lm::check_config_heads(cl, config_, checkpoint_->config_path);
}

void LanguageModel::check_ids(const std::vector<std::uint32_t>& ids) const {
    const LmConfig& m = config_;
    if (ids.empty()) throw InputError("no tokens to run the model on");
    const std::size_t room = m.positions - m.position_offset;
    if (ids.size() > room)
        throw InputError(std::to_string(ids.size()) + " tokens: more than the model's " + std::to_string(room) +
                         " positions (" + escape_control(checkpoint_->config_path) + " " + m.arch->positions_key + ")");
    for (std::size_t i = 0; i < ids.size(); ++i)
        if (ids[i] >= m.vocab)
            throw InputError("token " + std::to_string(i) + ": id " + std::to_string(ids[i]) +
                             " is outside the vocabulary (" + escape_control(checkpoint_->config_path) +
                             " vocab_size " + std::to_string(m.vocab) + ")");
}

}  // namespace attnscope

namespace attnscope {
namespace {

// The logits (R, V) in double: as is for a float64 run, widened (exactly) for float32.
template <class T>
Tensor<double, 2> widened(Tensor<T, 2>&& a) {
    if constexpr (std::is_same_v<T, double>)
        return std::move(a);
    else
        return xt::cast<double>(a);
}

// The bytes of tensor `name` as the checkpoint stores it (what reading it maps or holds);
// 0 when absent (its read names it).
const TensorInfo* info_of(const Checkpoint& c, const std::string& name) {
    for (const TensorInfo& t : c.source->tensors())
        if (t.name == name) return &t;
    return nullptr;
}

std::size_t stored_bytes(const Checkpoint& c, const std::string& name) {
    const TensorInfo* t = info_of(c, name);
    return t ? t->bytes : 0;
}

std::string token_embedding(const LmConfig& m) {
    return m.prefix + (m.family == LmFamily::gpt2   ? "wte.weight"
                       : m.family == LmFamily::bert ? "embeddings.word_embeddings.weight"
                                                    : "embed_tokens.weight");
}

// What the forward pass of T tokens holds at its peak, in bytes (float64 arithmetic: a
// hostile config cannot wrap it): h and the attention input a (T, Dm) and every kept
// attention input, plus the largest of its phases, each weight matrix counted as T and,
// while it is converted, as stored:
//   embeddings   the token embedding (V, Dm) as stored
//   attention    W_Q, W_K, W_V, W_O: 4 Dm² as T and as stored
//   MLP          its two or three matrices together (Dm, Dff) as T, the largest as stored,
//                and the (T, Dff) intermediates (two with a gate)
//   head         the logits (R, V) as T and widened to double, E (V, Dm) as stored, and a
//                block of 4096 of its rows as T
template <class T>
double forward_bytes(const LmConfig& m, const Checkpoint& c, std::size_t tokens, const ForwardRequest& r) {
    const double t = double(tokens), D = double(m.hidden), F = double(m.mlp), V = double(m.vocab), s = sizeof(T);
    const double kept = r.every_input ? double(m.layers) : 1;
    const double resident = (2 + kept) * t * D * s;
    const double embed = double(stored_bytes(c, token_embedding(m)));
    // a number as stored: block 0's MLP up-projection tells (8 bytes when it cannot)
    const char* up = m.family == LmFamily::gpt2   ? "mlp.c_fc.weight"
                     : m.family == LmFamily::bert ? "intermediate.dense.weight"
                                                  : "mlp.up_proj.weight";
    const double up_bytes = double(stored_bytes(c, lm::block_prefix(m, 0) + up));
    const double e = up_bytes > 0 && D * F > 0 ? up_bytes / (D * F) : 8;
    const double attention = 4 * D * D * (s + e);
    const bool gate = m.family == LmFamily::llama;
    const double mlp = (gate ? 3 : 2) * D * F * s + D * F * e + (gate ? 2 : 1) * t * F * s + 2 * t * D * s;
    const double rows = r.logit_rows.empty() ? t : double(r.logit_rows.size());
    const double head = r.logits ? rows * V * (s + 8) + V * D * 8 + std::min(V, 4096.0) * D * s : 0;
    const bool blocks = r.logits || (r.stop_after && *r.stop_after > 0);  // a block's attention and MLP run
    return resident + std::max({embed, blocks ? attention : 0, blocks ? mlp : 0, head});
}

// MemoryLimitError, before anything is read, when forward_bytes is over the limit.
template <class T>
void check_forward_memory(const LmConfig& m, const Checkpoint& c, std::size_t max_bytes, std::size_t tokens,
                          const ForwardRequest& r) {
    // a width the token embedding contradicts is refused by its read, naming both shapes
    const TensorInfo* e = info_of(c, token_embedding(m));
    if (e && e->shape != std::vector<std::size_t>{m.vocab, m.hidden}) return;
    const double need = forward_bytes<T>(m, c, tokens, r);
    if (need <= double(max_bytes)) return;
    throw MemoryLimitError("the forward pass of " + std::to_string(tokens) + " tokens holds about " +
                           format_bytes(need >= 1.8e19 ? ~std::size_t{0} : std::size_t(need)) +
                           " at its peak (the hidden states (T, Dm), with a layer's weights: its MLP " +
                           std::to_string(m.family == LmFamily::llama ? 3 : 2) + " matrices of " +
                           std::to_string(m.hidden) + " × " + std::to_string(m.mlp) +
                           " together), more than {max_memory} " + format_bytes(max_bytes));
}

// The forward pass in T: every step (weights, hidden states, attention, logits) in T; the
// logits widened to double, the attention inputs held as T.
template <class T>
ForwardResult forward_in(const LmConfig& m, const Checkpoint& c, std::size_t max_bytes,
                         const std::vector<std::uint32_t>& ids, const ForwardRequest& r) {
    using namespace lm;
    if (r.traces && !std::is_same_v<T, double>) throw std::logic_error("forward: traces are kept in float64 only");
    check_forward_memory<T>(m, c, max_bytes, ids.size(), r);
    const Weights w(c, max_bytes);
    ForwardResult out;
    out.attention_inputs.resize(m.layers);
    Tensor<T, 2> h = embed<T>(w, m, ids);  // (T, Dm)
    const std::size_t end = r.logits ? m.layers : r.stop_after ? *r.stop_after + 1 : 0;
    if (r.traces) out.traces.resize(m.layers);
    for (std::size_t l = 0; l < end; ++l) {
        // One layer's weights at a time, and of those the attention's or the MLP's: the
        // attention's are freed (with its problem) before the MLP's are read.
        Block<T> b = read_norms<T>(w, m, l);
        Tensor<T, 2> a = attention_input(b, m, h);  // (T, Dm)
        if (r.every_input || r.stop_after == l)
            out.attention_inputs[l] = held_array(a, c.path + ": layer " + std::to_string(l) + "'s input");
        if (!r.logits && r.stop_after == l) break;
        Compute how;
        how.keep = StageSet().set(kOutput);
        if (r.traces) how.keep.set(kWeights).set(kContext).set(kSinkWeight);
        how.threads = r.threads;
        Trace<T> tr = attend(layer_problem(c, m, l, a, max_bytes), how);
        b.mlp = read_mlp<T>(w, m, l);
        add_attention(b, m, tr.output, h);
        if constexpr (std::is_same_v<T, double>)
            if (r.traces) out.traces[l] = std::move(tr);
    }
    if (!r.logits) return out;
    out.logit_rows = r.logit_rows;
    if (out.logit_rows.empty())
        for (std::size_t t = 0; t < ids.size(); ++t) out.logit_rows.push_back(t);
    if (out.logit_rows.size() * m.vocab > max_bytes / sizeof(double))
        throw MemoryLimitError("the logits of " + std::to_string(out.logit_rows.size()) + " positions over " +
                               std::to_string(m.vocab) + " tokens need " +
                               format_bytes(out.logit_rows.size() * m.vocab * sizeof(double)) +
                               ", more than {max_memory} " + format_bytes(max_bytes));
    Tensor<T, 2> rows = Tensor<T, 2>::from_shape({out.logit_rows.size(), m.hidden});  // (R, Dm)
    for (std::size_t k = 0; k < out.logit_rows.size(); ++k)
        xt::view(rows, k, xt::all()) = xt::view(h, out.logit_rows.at(k), xt::all());
    out.logits = widened(head(w, m, std::move(rows)));
    return out;
}

}  // namespace

ForwardResult LanguageModel::forward(const std::vector<std::uint32_t>& ids, const ForwardRequest& r) const {
    const LmConfig& m = config_;
    check_ids(ids);
    if (r.stop_after && *r.stop_after >= m.layers)
        throw UsageError("{layer} " + std::to_string(*r.stop_after) + ": the model has " + std::to_string(m.layers) +
                         " layers (0–" + std::to_string(m.layers - 1) + ")");
    return r.float32 ? forward_in<float>(m, *checkpoint_, max_bytes_, ids, r)
                     : forward_in<double>(m, *checkpoint_, max_bytes_, ids, r);
}

}  // namespace attnscope
