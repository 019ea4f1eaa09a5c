// One attention layer out of a checkpoint: the presets' names, config.json's fields, and
// TransformerLens's layout.
#include "attnscope/model/checkpoint_layer.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>

#include "attnscope/base/errors.hpp"
#include "attnscope/base/text.hpp"
#include "attnscope/model/family.hpp"

namespace attnscope {
namespace {

std::string shown(const std::string& s) { return escape_control(clip_fragment(s)); }

// 10000, 1e+06, 0.5: a config number as %g spells it.
std::string format_number(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    return buf;
}

bool starts_with(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }

// config.json: the family table's one reader (model/family.hpp).
using Config = ConfigJson;

// ---- presets -----------------------------------------------------------------------------

// How a preset finds a layer: names ROOT N AFTER PROBE, ROOT one of `roots` ("" matches
// any root ending in `any_root_suffix`, for modules nested under a user's own names), or
// a module saved alone, `single` + PROBE with no number (one nn.TransformerEncoderLayer).
// A preset `by_names` needs no config.json: --preset auto takes it when its names are there.
struct Preset {
    std::string name;
    std::vector<std::string> roots;
    std::string any_root_suffix;      // mha: any root ending "layers."
    std::string after;                // ".attn."
    std::vector<std::string> probes;  // one of these is every layer's
    Layout layout;
    // suffix (after the layer prefix) -> bundle name; gpt2's c_attn is split by hand.
    std::vector<std::pair<std::string, std::string>> names;
    std::vector<std::string> required;  // suffixes every layer must have
    std::string single;                 // mha: "self_attn." (a layer saved on its own)
    bool by_names = false;
    const Family* family = nullptr;  // the family table's entry (none for mha, tl)
};

// A family's preset, from its entry (and every entry sharing the preset: their roots).
Preset family_preset(const Family& f) {
    Preset p;
    p.name = f.preset;
    p.family = &f;
    for (const auto& g : families())
        if (g.preset == f.preset)
            for (const auto& root : g.roots)
                if (std::find(p.roots.begin(), p.roots.end(), root + g.block) == p.roots.end())
                    p.roots.push_back(root + g.block);
    p.after = "." + f.attention;
    p.probes = {f.q + ".weight"};
    p.layout = f.qkv == QkvKind::gpt2_columns ? Layout::math : Layout::torch;
    const bool fused = f.qkv != QkvKind::separate;
    if (!fused) p.names = {{f.q + ".weight", "W_Q"}, {f.k + ".weight", "W_K"}, {f.v + ".weight", "W_V"}};
    p.names.push_back({f.o + ".weight", "W_O"});
    if (!fused) p.names.insert(p.names.end(), {{f.q + ".bias", "b_Q"}, {f.k + ".bias", "b_K"}, {f.v + ".bias", "b_V"}});
    p.names.push_back({f.o + ".bias", "b_O"});
    if (f.rope) p.names.push_back({"sinks", "sinks"});
    if (!f.q_norm.empty())
        p.names.insert(p.names.end(), {{f.q_norm + ".weight", "q_norm"}, {f.k_norm + ".weight", "k_norm"}});
    p.required = fused ? std::vector{f.q + ".weight", f.o + ".weight"}
                       : std::vector{f.q + ".weight", f.k + ".weight", f.v + ".weight"};
    return p;
}

// PyTorch's nn.MultiheadAttention inside encoder or decoder layers (or saved alone), found by its names.
Preset mha_preset() {
    return {"mha",
            {},
            "layers.",
            ".self_attn.",
            {"in_proj_weight", "q_proj_weight"},
            Layout::torch,
            {{"in_proj_weight", "in_proj_weight"},
             {"in_proj_bias", "in_proj_bias"},
             {"q_proj_weight", "q_proj_weight"},
             {"k_proj_weight", "k_proj_weight"},
             {"v_proj_weight", "v_proj_weight"},
             {"out_proj.weight", "out_proj.weight"},
             {"out_proj.bias", "out_proj.bias"},
             {"bias_k", "bias_k"},
             {"bias_v", "bias_v"}},
            {},
            "self_attn.",
            true};
}

// TransformerLens: W_Q, W_K, W_V, W_O and their biases (math layout).
Preset tl_preset() {
    return {"tl",
            {"blocks."},
            "",
            ".attn.",
            {"W_Q"},
            Layout::math,
            {{"W_Q", "W_Q"},
             {"W_K", "W_K"},
             {"W_V", "W_V"},
             {"W_O", "W_O"},
             {"b_Q", "b_Q"},
             {"b_K", "b_K"},
             {"b_V", "b_V"},
             {"b_O", "b_O"}},
            {"W_Q", "W_K", "W_V", "W_O"},
            "",
            false};
}

// The families' presets (one per preset name, in the table's order), then mha and tl.
const std::vector<Preset>& presets() {
    static const std::vector<Preset> p = [] {
        std::vector<Preset> v;
        for (const auto& f : families())
            if (std::none_of(v.begin(), v.end(), [&](const Preset& q) { return q.name == f.preset; }))
                v.push_back(family_preset(f));
        v.push_back(mha_preset());
        v.push_back(tl_preset());
        return v;
    }();
    return p;
}

std::string preset_list() { return preset_names(); }

const Preset* find_preset(const std::string& name) {
    for (const auto& p : presets())
        if (p.name == name) return &p;
    return nullptr;
}

// The layers a preset finds: root -> layer numbers.
std::map<std::string, std::set<std::size_t>> find_layers(const Preset& p, const std::vector<TensorInfo>& tensors) {
    std::map<std::string, std::set<std::size_t>> found;
    for (const auto& t : tensors) {
        for (const auto& probe : p.probes) {
            const std::string tail = p.after + probe;
            if (!ends_with(t.name, tail)) continue;
            const std::string head = t.name.substr(0, t.name.size() - tail.size());  // ROOT N
            std::size_t k = head.size();
            while (k > 0 && head[k - 1] >= '0' && head[k - 1] <= '9') --k;
            if (k == head.size() || head.size() - k > 9) continue;
            const std::string root = head.substr(0, k);
            const bool ok = p.roots.empty() ? ends_with(root, p.any_root_suffix)
                                            : std::find(p.roots.begin(), p.roots.end(), root) != p.roots.end();
            if (ok) found[root].insert(std::stoul(head.substr(k)));
        }
    }
    return found;
}

// The prefix of a layer saved on its own (`single` + a probe names a tensor), or "".
std::string find_single(const Preset& p, const std::vector<TensorInfo>& tensors) {
    if (p.single.empty()) return "";
    for (const auto& t : tensors)
        for (const auto& probe : p.probes)
            if (t.name == p.single + probe) return p.single;
    return "";
}

// The preset that needs no config.json and whose layer names the checkpoint holds (a stack
// of layers, or one saved alone): what {preset} auto takes when there is no model_type.
const Preset* preset_by_names(const std::vector<TensorInfo>& tensors) {
    const Preset* found = nullptr;
    for (const auto& p : presets()) {
        if (!p.by_names) continue;
        if (find_layers(p, tensors).empty() && find_single(p, tensors).empty()) continue;
        if (found) return nullptr;  // two presets' names: neither is taken
        found = &p;
    }
    return found;
}

// "12 layers (0–11)", or the numbers themselves when some are missing: "2 layers (0, 2)".
std::string layer_range(const std::set<std::size_t>& layers) {
    if (layers.empty()) return "none";
    const std::size_t lo = *layers.begin(), hi = *layers.rbegin();
    std::string s = std::to_string(layers.size()) + (layers.size() == 1 ? " layer (" : " layers (");
    if (hi - lo + 1 == layers.size()) return s + std::to_string(lo) + (hi != lo ? "–" + std::to_string(hi) : "") + ")";
    std::size_t shown_n = 0;
    for (std::size_t n : layers) {
        if (shown_n == 12) return s + ", …)";
        s += (shown_n++ ? ", " : "") + std::to_string(n);
    }
    return s + ")";
}

// A fact of a layer's config, with the config.json key it comes from (when there is a config.json).
void note(LayerConfig& lc, const Config& cfg, const std::string& fact, const std::string& key) {
    lc.facts.push_back(fact + (cfg.has() && !key.empty() ? " (config.json " + key + ")" : ""));
}

// GPT-2: causal; n_head; scale_attn_weights and scale_attn_by_inverse_layer_idx.
void gpt2_config(const Config& cfg, std::optional<std::size_t> layer, LayerConfig& lc) {
    lc.causal = true;
    note(lc, cfg, "causal (GPT-2 is a decoder)", "");
    if (auto h = cfg.count("n_head")) lc.heads = h, note(lc, cfg, "heads " + std::to_string(*h), "n_head");
    if (cfg.flag("scale_attn_weights") == false) {
        lc.scale = 1.0;
        lc.scale_why = "1 (config.json scale_attn_weights false)";
        note(lc, cfg, "scale none", "scale_attn_weights false");
    }
    if (cfg.flag("scale_attn_by_inverse_layer_idx") == true) {
        const auto n_embd = cfg.count("n_embd");
        if (!lc.heads || !n_embd || !layer)
            cfg.fail("scale_attn_by_inverse_layer_idx", "needs n_head, n_embd and a layer number");
        const double dk = double(*n_embd / *lc.heads);
        lc.scale = (lc.scale ? 1.0 : 1.0 / std::sqrt(dk)) / double(*layer + 1);
        lc.scale_why = std::string(lc.scale_why.empty() ? "1/sqrt(Dk)" : "1") +
                       " / (layer + 1) = " + format_number(*lc.scale) +
                       " (config.json scale_attn_by_inverse_layer_idx)";
        note(lc, cfg, "scale divided by layer + 1 = " + std::to_string(*layer + 1), "scale_attn_by_inverse_layer_idx");
    }
}

// BERT and RoBERTa: not causal; num_attention_heads; absolute positions only.
void bert_config(const Config& cfg, LayerConfig& lc) {
    lc.causal = false;
    note(lc, cfg, "not causal (an encoder)", "");
    if (auto h = cfg.count("num_attention_heads"))
        lc.heads = h, note(lc, cfg, "heads " + std::to_string(*h), "num_attention_heads");
    if (auto pe = cfg.text("position_embedding_type"); pe && *pe != "absolute")
        cfg.fail("position_embedding_type", "'" + shown(*pe) +
                                                "' adds a learned position term to the scores, which attnscope "
                                                "does not model (only 'absolute' positions)");
}

// RoPE: rope_theta (a sliding layer's local base where the family has one), the rotated
// share of a head, and rope_scaling (family.hpp's scale_rope; not on Gemma 3's local layers).
Rope llama_rope(const Family& f, const Config& cfg, LayerConfig& lc, std::optional<std::size_t> seq_len) {
    Rope rope;
    const bool local = lc.window && !f.local_base_key.empty();
    const std::string base_key = local ? f.local_base_key : f.rope_theta_key;
    rope.base = cfg.number(base_key).value_or(10000.0);
    if (!(rope.base > 1) || !std::isfinite(rope.base))
        cfg.fail(base_key, format_number(rope.base), "expected a finite number above 1");
    note(lc, cfg, "RoPE base " + format_number(rope.base), cfg.get(base_key) ? base_key : "");
    if (auto r = cfg.number(f.rotary_key); r && *r != 1.0) {
        if (!lc.head_dim) cfg.fail(f.rotary_key, "needs head_dim (or hidden_size) to size the rotation");
        const double w = double(*lc.head_dim) * *r;
        if (!(w > 0) || w != std::floor(w) || std::fmod(w, 2.0) != 0 || w > double(*lc.head_dim))
            cfg.fail(f.rotary_key, format_number(*r) + " × head_dim " + std::to_string(*lc.head_dim) +
                                       " is not an even number of features");
        rope.dim = std::size_t(w);
        note(lc, cfg, "RoPE on " + std::to_string(*rope.dim) + " features", f.rotary_key);
    }
    if (auto scaling = cfg.get("rope_scaling"); scaling && !local) {
        if (!lc.head_dim) cfg.fail("rope_scaling", "needs head_dim (or hidden_size) to size the rotation");
        scale_rope(cfg, *scaling, "rope_scaling", rope, rope.dim.value_or(*lc.head_dim), seq_len);
        if (!rope.scaling.empty()) note(lc, cfg, "RoPE scaled: " + rope.scaling, "rope_scaling");
    }
    return rope;
}

// Sliding windows: a per-layer list (newer configs), else the family's rule.
std::optional<std::size_t> llama_window(const Family& f, const Config& cfg, std::optional<std::size_t> layer) {
    if (auto types = cfg.get("layer_types"); types && types->is_array() && layer)
        return *layer < types->size() && (*types)[*layer] == "sliding_attention" ? cfg.count("sliding_window")
                                                                                 : std::nullopt;
    switch (f.window) {
        case WindowRule::none:
            return std::nullopt;
        case WindowRule::every:
            return cfg.count("sliding_window");
        case WindowRule::qwen2:  // from max_window_layers on, where use_sliding_window is true
            if (cfg.flag("use_sliding_window") == true && layer && *layer >= cfg.count("max_window_layers").value_or(0))
                return cfg.count("sliding_window");
            return std::nullopt;
        case WindowRule::alternate:  // layers 0, 2, 4, ... slide
            return layer && *layer % 2 == 0 ? cfg.count("sliding_window") : std::nullopt;
        case WindowRule::pattern:  // every sliding_window_pattern-th layer is global
            if (layer && (*layer + 1) % cfg.count("sliding_window_pattern").value_or(6) != 0)
                return cfg.count("sliding_window");
            return std::nullopt;
    }
    return std::nullopt;
}

// Gemma's and Qwen3's options: per-head q/k norms, the scores' soft cap, the scale
// query_pre_attn_scalar^-0.5.
void attention_options(const Family& f, const Config& cfg, LayerConfig& lc) {
    if (!f.q_norm.empty()) {
        lc.qk_norm_eps = cfg.number(f.eps_key).value_or(f.eps);
        note(lc, cfg, "q and k RMS-normed per head, eps " + format_number(*lc.qk_norm_eps), f.eps_key);
    }
    if (auto cap = cfg.number("attn_logit_softcapping")) {
        if (!(*cap > 0) || !std::isfinite(*cap))
            cfg.fail("attn_logit_softcapping", format_number(*cap), "expected a finite number above 0");
        lc.softcap = cap;
        note(lc, cfg, "scores soft-capped at " + format_number(*cap), "attn_logit_softcapping");
    }
    if (auto q = cfg.number("query_pre_attn_scalar")) {
        if (!(*q > 0) || !std::isfinite(*q))
            cfg.fail("query_pre_attn_scalar", format_number(*q), "expected a finite number above 0");
        lc.scale = 1.0 / std::sqrt(*q);
        lc.scale_why = "query_pre_attn_scalar^-0.5 = 1/sqrt(" + format_number(*q) + ") (config.json)";
        note(lc, cfg, "scale 1/sqrt(" + format_number(*q) + ")", "query_pre_attn_scalar");
    }
}

// Llama's family: causal; heads, K/V heads and head width; RoPE; sliding windows.
void llama_config(const Family& f, const Config& cfg, std::optional<std::size_t> layer,
                  std::optional<std::size_t> seq_len, LayerConfig& lc) {
    lc.causal = true;
    note(lc, cfg, "causal (a decoder)", "");
    if (auto h = cfg.count(f.heads_key)) lc.heads = h, note(lc, cfg, "heads " + std::to_string(*h), f.heads_key);
    if (auto g = cfg.count("num_key_value_heads"))
        lc.kv_heads = g, note(lc, cfg, "K/V heads " + std::to_string(*g), "num_key_value_heads");
    if (lc.heads && lc.kv_heads && *lc.heads % *lc.kv_heads != 0)
        cfg.fail("num_key_value_heads", std::to_string(*lc.kv_heads),
                 "does not divide num_attention_heads " + std::to_string(*lc.heads) +
                     " (each K/V head serves H/G query heads)");
    if (auto d = cfg.count("head_dim")) {
        lc.head_dim = d, note(lc, cfg, "head width " + std::to_string(*d), "head_dim");
    } else if (auto hidden = cfg.count(f.hidden_key); hidden && lc.heads) {
        lc.head_dim = *hidden / *lc.heads;
        note(lc, cfg, "head width " + std::to_string(*lc.head_dim), f.hidden_key + " / " + f.heads_key);
    }
    lc.window = llama_window(f, cfg, layer);
    lc.rope = llama_rope(f, cfg, lc, seq_len);
    if (lc.window) note(lc, cfg, "sliding window " + std::to_string(*lc.window), "sliding_window");
    attention_options(f, cfg, lc);
}

// config.json's view of a layer's attention, for preset `p` at layer `layer`.
// `seq_len`: the run's tokens, when known (dynamic and longrope RoPE scaling depend on it).
LayerConfig config_of(const Preset& p, const Config& cfg, std::optional<std::size_t> layer,
                      std::optional<std::size_t> seq_len = std::nullopt) {
    LayerConfig lc;
    if (!p.family) return lc;
    if (p.family->qkv == QkvKind::gpt2_columns)
        gpt2_config(cfg, layer, lc);
    else if (!p.family->causal)
        bert_config(cfg, lc);
    else
        llama_config(*p.family, cfg, layer, seq_len, lc);
    return lc;
}

// The config's head counts against the widths of the weights they split, so that a count
// that does not fit is named by its key in config.json rather than as an option nobody gave.
void check_config_heads(const Preset& p, const Config& cfg, const CheckpointLayer& l) {
    auto width = [&](const char* name) -> std::optional<std::size_t> {  // output features
        const auto it = l.arrays.find(name);
        if (it == l.arrays.end() || it->second.ndim() != 2) return std::nullopt;
        return l.layout == Layout::torch ? it->second.shape[0] : it->second.shape[1];
    };
    auto check = [&](const std::optional<std::size_t>& n, const std::string& key, const char* weight) {
        const auto w = width(weight);
        if (n && w && *w % *n != 0)
            cfg.fail(key, std::to_string(*n),
                     "does not divide the " + std::to_string(*w) + " output features of " + shown(l.prefix) + "'s " +
                         weight + " (heads split them evenly)");
    };
    if (!cfg.has()) return;
    if (!p.family) return;
    check(l.config.heads, p.family->heads_key, "W_Q");
    check(l.config.kv_heads, "num_key_value_heads", "W_K");
}

// A tensor of the layer, read; its bytes counted against `budget`.
Array read_tensor(const Checkpoint& c, const std::string& name, std::size_t& budget) {
    Array a = c.source->read(name, budget);
    const std::size_t held = a.count() * sizeof(double);
    budget = held >= budget ? 0 : budget - held;
    return a;
}

const TensorInfo* find_tensor(const std::vector<TensorInfo>& tensors, const std::string& name) {
    for (const auto& t : tensors)
        if (t.name == name) return &t;
    return nullptr;
}

// GPT-2's c_attn (Dm, 3·Dm) and its bias (3·Dm): Q, K and V side by side.
void split_c_attn(const Array& w, const Array* b, std::map<std::string, Array>& out) {
    if (w.ndim() != 2 || w.shape[1] != 3 * w.shape[0])
        throw InputError(w.origin + ": expected shape (Dm, 3·Dm) (Conv1D: Q, K, V side by side), found " +
                         shape_str(w.shape));
    const std::size_t dm = w.shape[0];
    const char* names[3] = {"W_Q", "W_K", "W_V"};
    for (std::size_t part = 0; part < 3; ++part) {
        Array a;
        a.shape = {dm, dm};
        a.dtype = w.dtype;
        a.origin = w.origin + " (" + names[part] + ")";
        a.values.resize(dm * dm);
        for (std::size_t r = 0; r < dm; ++r)
            for (std::size_t col = 0; col < dm; ++col) a.values[r * dm + col] = w.value(r * 3 * dm + part * dm + col);
        out[names[part]] = std::move(a);
    }
    if (!b) return;
    if (b->ndim() != 1 || b->shape[0] != 3 * dm)
        throw InputError(b->origin + ": expected shape (" + std::to_string(3 * dm) + ",), found " +
                         shape_str(b->shape));
    const char* bias_names[3] = {"b_Q", "b_K", "b_V"};
    for (std::size_t part = 0; part < 3; ++part) {
        Array a;
        a.shape = {dm};
        a.dtype = b->dtype;
        a.origin = b->origin + " (" + bias_names[part] + ")";
        a.values.resize(dm);
        for (std::size_t col = 0; col < dm; ++col) a.values[col] = b->value(part * dm + col);
        out[bias_names[part]] = std::move(a);
    }
}

// Rows `rows` of a fused (N, Dm) weight, or entries of its (N) bias, as a bundle array.
Array take_rows(const Array& a, const std::vector<std::size_t>& rows, const std::string& what) {
    const std::size_t width = a.ndim() == 2 ? a.shape[1] : 1;
    Array out;
    out.shape = a.ndim() == 2 ? std::vector<std::size_t>{rows.size(), width} : std::vector<std::size_t>{rows.size()};
    out.dtype = a.dtype;
    out.origin = a.origin + " (" + what + ")";
    out.values.reserve(rows.size() * width);
    for (std::size_t r : rows)
        for (std::size_t k = 0; k < width; ++k) out.values.push_back(a.value(r * width + k));
    return out;
}

// GPT-NeoX's query_key_value (per head: q, k, v) or Phi-3's qkv_proj (all q, then k, then
// v), (rows, Dm) torch layout and its bias, split into W_Q, W_K, W_V (b_Q, b_K, b_V) by the
// config's heads, K/V heads and head width.
void split_fused_rows(const Family& f, const Array& w, const Array* b, const LayerConfig& lc,
                      std::map<std::string, Array>& out) {
    if (!lc.heads || !lc.head_dim)
        throw InputError(w.origin + ": config.json gives no head count to split the fused Q, K and V by");
    const std::size_t H = *lc.heads, G = lc.kv_heads.value_or(H), D = *lc.head_dim;
    const bool per_head = f.qkv == QkvKind::per_head;
    const std::size_t rows = per_head ? 3 * H * D : (H + 2 * G) * D;
    if (w.ndim() != 2 || w.shape[0] != rows)
        throw InputError(w.origin + ": expected " + std::to_string(rows) + " rows (" +
                         (per_head ? "3 × heads × head width" : "(heads + 2 × K/V heads) × head width") +
                         ", config.json), found shape " + shape_str(w.shape));
    std::vector<std::size_t> part[3];
    for (std::size_t k = 0; k < 3; ++k) {
        const std::size_t n = per_head || k == 0 ? H : G, start = k == 0 ? 0 : k == 1 ? H * D : (H + G) * D;
        for (std::size_t h = 0; h < n; ++h)
            for (std::size_t d = 0; d < D; ++d) part[k].push_back(per_head ? (3 * h + k) * D + d : start + h * D + d);
    }
    const char* names[3] = {"W_Q", "W_K", "W_V"};
    const char* bias_names[3] = {"b_Q", "b_K", "b_V"};
    if (b && (b->ndim() != 1 || b->shape[0] != rows))
        throw InputError(b->origin + ": expected shape (" + std::to_string(rows) + ",), found " + shape_str(b->shape));
    for (std::size_t k = 0; k < 3; ++k) {
        out[names[k]] = take_rows(w, part[k], names[k]);
        if (b) out[bias_names[k]] = take_rows(*b, part[k], bias_names[k]);
    }
}

// The layer's tensors under the preset's names (a fused Q, K, V split), and what the
// config says of its attention.
void read_preset_layer(const Checkpoint& c, const Preset& p, const Config& cfg, std::optional<std::size_t> tokens,
                       std::size_t& budget, CheckpointLayer& out) {
    const auto& tensors = c.source->tensors();
    const std::string path = escape_control(c.path);
    auto name_of = [&](const std::string& suffix) { return out.prefix + suffix; };
    out.layout = p.layout;
    out.layout_fixed = true;
    for (const auto& req : p.required)
        if (!find_tensor(tensors, name_of(req))) throw InputError(path + ": layer has no " + shown(name_of(req)));
    for (const auto& [suffix, bundle_name] : p.names)
        if (find_tensor(tensors, name_of(suffix))) out.arrays[bundle_name] = read_tensor(c, name_of(suffix), budget);
    if (p.name == "mha" && !out.arrays.count("in_proj_weight") && !out.arrays.count("q_proj_weight"))
        throw InputError(path + ": layer has no " + shown(name_of("in_proj_weight")) + " nor " +
                         shown(name_of("q_proj_weight")));
    out.config = config_of(p, cfg, out.layer, tokens);
    if (p.family && p.family->qkv != QkvKind::separate) {
        const std::string fused = p.family->q;
        const Array w = read_tensor(c, name_of(fused + ".weight"), budget);
        std::optional<Array> b;
        if (find_tensor(tensors, name_of(fused + ".bias"))) b = read_tensor(c, name_of(fused + ".bias"), budget);
        if (p.family->qkv == QkvKind::gpt2_columns)
            split_c_attn(w, b ? &*b : nullptr, out.arrays);
        else
            split_fused_rows(*p.family, w, b ? &*b : nullptr, out.config, out.arrays);
    }
    if (p.family && p.family->norm == NormKind::rms_unit_offset)  // Gemma's q/k norms scale by 1 + w
        for (const char* n : {"q_norm", "k_norm"})
            if (auto it = out.arrays.find(n); it != out.arrays.end()) {
                Array& a = it->second;
                std::vector<double> v(a.count());
                for (std::size_t i = 0; i < v.size(); ++i) v[i] = 1.0 + a.value(i);
                a.values = std::move(v), a.stored = {}, a.keep.reset(), a.held = Array::Held::doubles;
            }
    check_config_heads(p, cfg, out);
    if (p.name == "tl") {
        Bundle b;
        b.source = c.path;
        b.arrays = std::move(out.arrays);
        const std::size_t h = convert_tl_layout(b);
        out.arrays = std::move(b.arrays);
        out.config.heads = h;
        out.config.facts.push_back("heads " + std::to_string(h) + " (W_Q's first axis)");
    }
}

// The preset to use: the one asked for, or config.json's, or (`by_names`) the one whose
// names the tensors have.
const Preset* preset_for(const Checkpoint& c, const std::string& asked, bool by_names = true) {
    if (asked != "auto") {
        const Preset* p = find_preset(asked);
        if (!p) throw UsageError("{preset} " + shown(asked) + ": unknown (presets: auto, " + preset_list() + ")");
        return p;
    }
    const std::string from_config = preset_of_config(c);
    if (!from_config.empty()) return find_preset(from_config);
    return by_names ? preset_by_names(c.source->tensors()) : nullptr;
}

// The layer {layer} asks for among the preset's: its prefix, number and how many there are.
void locate_layer(const Preset& p, const std::vector<TensorInfo>& tensors, std::optional<std::size_t> asked,
                  const std::string& path, CheckpointLayer& out) {
    const auto found = find_layers(p, tensors);
    if (found.empty()) {
        out.prefix = find_single(p, tensors);
        if (out.prefix.empty())
            throw InputError(path + ": no " + p.name + " attention layer here (no name like '" +
                             (p.roots.empty() ? "…" + p.any_root_suffix : p.roots[0]) + "N" + p.after + p.probes[0] +
                             "'); see `attnscope inspect " + path + "`");
        if (asked)
            throw UsageError("{layer} " + std::to_string(*asked) + ": " + path + " holds one layer, saved alone (" +
                             shown(out.prefix) + ", no number); drop {layer}");
        out.layers = 1;
        return;
    }
    if (found.size() > 1) {
        std::string roots;
        for (const auto& [root, layers] : found) roots += (roots.empty() ? "" : ", ") + shown(root) + "N";
        throw InputError(path + ": several stacks of layers (" + roots +
                         "); name one layer's weights with {prefix}, e.g. {prefix} " + shown(found.begin()->first) +
                         std::to_string(*found.begin()->second.begin()) + p.after);
    }
    const auto& [root, layers] = *found.begin();
    out.layers = layers.size();
    if (!asked && layers.size() > 1)
        throw UsageError(path + ": holds " + layer_range(layers) + "; choose one with {layer}");
    const std::size_t n = asked ? *asked : *layers.begin();
    if (!layers.count(n))
        throw InputError(path + ": no layer " + std::to_string(n) + " (it holds " + layer_range(layers) + ")");
    out.layer = n;
    out.prefix = root + std::to_string(n) + p.after;
}

}  // namespace

std::string layout_name(const CheckpointLayer& l) {
    if (l.preset == "tl") return "tl";
    return l.layout == Layout::torch ? "torch" : "math";
}

std::string facts_text(const LayerConfig& c) {
    std::string s;
    for (const auto& f : c.facts) s += (s.empty() ? "" : "; ") + f;
    return s;
}

const std::vector<std::string>& checkpoint_presets() {
    static const std::vector<std::string> names = [] {
        std::vector<std::string> v;
        for (const auto& p : presets()) v.push_back(p.name);
        return v;
    }();
    return names;
}

std::string preset_names() {
    std::string s;
    for (const auto& p : checkpoint_presets()) s += (s.empty() ? "" : ", ") + p;
    return s;
}

std::string preset_of_config(const Checkpoint& c) {
    const Config cfg(c);
    if (!cfg.has()) return "";
    const auto type = cfg.text("model_type");
    if (!type) return "";
    const Family* f = find_family(*type);
    if (!f)
        throw InputError(escape_control(c.config_path) + ": model_type '" + shown(*type) +
                         "' has no preset (presets: " + preset_list() + "); name the layer's weights with {prefix}");
    return f->preset;
}

CheckpointLayer choose_layer(const Checkpoint& c, const LayerRequest& r, std::size_t max_bytes) {
    const auto& tensors = c.source->tensors();
    const std::string path = escape_control(c.path);
    const Config cfg(c);
    CheckpointLayer out;
    // With {prefix}, a model_type no preset reads leaves the names to the prefix alone.
    const Preset* p = nullptr;
    try {
        p = preset_for(c, r.preset, r.prefix.empty());  // {prefix} names the weights itself
    } catch (const InputError&) {
        if (r.prefix.empty() || r.preset != "auto") throw;
    }
    if (!p && r.prefix.empty())
        throw InputError(path + ": " +
                         (cfg.has() ? std::string("config.json has no model_type") : "no config.json beside it") +
                         " to choose a preset; give {preset} (" + preset_list() + ") or {prefix}");
    if (!r.prefix.empty() && r.layer)
        throw UsageError("{layer}: {prefix} already names the layer's weights; give one of them");

    // The layer's prefix.
    if (!r.prefix.empty()) {
        out.prefix = r.prefix;
        bool any = false;
        for (const auto& t : tensors) any = any || starts_with(t.name, r.prefix);
        if (!any) throw InputError(path + ": no tensor's name begins with '" + shown(r.prefix) + "'");
    } else {
        locate_layer(*p, tensors, r.layer, path, out);
    }
    out.preset = p ? p->name : "prefix";

    // The layer's tensors.
    std::size_t budget = max_bytes;
    if (p) {
        read_preset_layer(c, *p, cfg, r.tokens, budget, out);
    } else {
        // Names chosen by the prefix alone: PREFIX + a bundle name (W_Q, in_proj_weight, …).
        const auto& known = known_array_names();
        for (const auto& t : tensors) {
            if (!starts_with(t.name, out.prefix)) continue;
            const std::string rest = t.name.substr(out.prefix.size());
            if (std::find(known.begin(), known.end(), rest) != known.end() && rest != "x" && rest != "memory")
                out.arrays[rest] = read_tensor(c, t.name, budget);
        }
        if (out.arrays.empty())
            throw InputError(path + ": no tensor named '" + shown(out.prefix) +
                             "' + a weight's name (W_Q, in_proj_weight, …)");
    }
    return out;
}

namespace {

// The tensors grouped by layer: each name up to and including its first all-digit
// component ("model.layers.3"), "" for names without one; groups in order of appearance.
std::vector<LayerOverview> group_tensors(const std::vector<TensorInfo>& tensors) {
    std::vector<LayerOverview> groups;
    std::map<std::string, std::size_t> index;  // group name -> position in groups
    for (const auto& t : tensors) {
        std::string group;
        std::optional<std::size_t> number;
        std::size_t start = 0;
        while (start <= t.name.size()) {
            std::size_t dot = t.name.find('.', start);
            if (dot == std::string::npos) dot = t.name.size();
            const std::string part = t.name.substr(start, dot - start);
            if (!part.empty() && part.size() <= 9 &&
                std::all_of(part.begin(), part.end(), [](char ch) { return ch >= '0' && ch <= '9'; })) {
                group = t.name.substr(0, dot);
                number = std::stoul(part);
                break;
            }
            if (dot == t.name.size()) break;
            start = dot + 1;
        }
        auto it = index.find(group);
        if (it == index.end()) {
            it = index.emplace(group, groups.size()).first;
            LayerOverview lo;
            lo.group = group;
            lo.index = number;
            groups.push_back(std::move(lo));
        }
        groups[it->second].tensors.push_back(t);
    }
    return groups;
}

// A layer's attention as choose_layer() would see it, without reading data.
CheckpointLayer overview_layer(const Checkpoint& c, const Preset& p, const std::string& prefix,
                               std::optional<std::size_t> layer, std::size_t layers) {
    CheckpointLayer cl;
    cl.preset = p.name;
    cl.layer = layer;
    cl.layers = layers;
    cl.prefix = prefix;
    cl.layout = p.layout;
    cl.layout_fixed = true;
    try {
        cl.config = config_of(p, Config(c), layer);
    } catch (const InputError& e) {
        cl.config.facts.push_back(std::string("cannot run: ") + e.what());
    }
    if (p.name == "tl")
        if (const TensorInfo* w = find_tensor(c.source->tensors(), cl.prefix + "W_Q"); w && w->shape.size() == 3)
            cl.config.heads = w->shape[0];
    return cl;
}

}  // namespace

CheckpointOverview describe_checkpoint(const Checkpoint& c, const std::string& preset) {
    CheckpointOverview ov;
    const Preset* p = nullptr;
    try {
        p = preset_for(c, preset);
        ov.preset_asked = preset != "auto";
        if (p)
            ov.preset_note = ov.preset_asked               ? "as asked"
                             : preset_of_config(c).empty() ? "its tensors' names"
                                                           : "config.json model_type";
    } catch (const InputError& e) {
        ov.preset_note = e.what();
    }
    if (!p && ov.preset_note.empty())
        ov.preset_note = c.config_path.empty() ? "no config.json beside the weights" : "config.json has no model_type";
    ov.preset = p ? p->name : "";
    ov.groups = group_tensors(c.source->tensors());
    if (!p) return ov;
    // Each layer the preset finds (one stack of them, or one layer saved alone).
    const auto layers = find_layers(*p, c.source->tensors());
    const std::string single = layers.empty() ? find_single(*p, c.source->tensors()) : "";
    for (auto& g : ov.groups) {
        if (!single.empty() && g.group.empty()) g.attention = overview_layer(c, *p, single, std::nullopt, 1);
        if (layers.size() != 1 || !g.index) continue;
        const auto& [root, numbers] = *layers.begin();
        if (numbers.count(*g.index) && g.group == root + std::to_string(*g.index))
            g.attention = overview_layer(c, *p, g.group + p->after, g.index, numbers.size());
    }
    return ov;
}

std::vector<std::string> run_command(const Checkpoint& c, const CheckpointOverview& ov, const CheckpointLayer& l) {
    std::vector<std::string> words = {"attnscope", "run", "BUNDLE", "{checkpoint}", c.path};
    if (ov.preset_asked) words.insert(words.end(), {"{preset}", l.preset});
    if (l.layer) words.insert(words.end(), {"{layer}", std::to_string(*l.layer)});
    if (!l.config.heads) words.insert(words.end(), {"{heads}", "H"});
    return words;
}

namespace {

// An array in TransformerLens's layout holds numbers and at least one of them: an empty
// axis beside huge ones, (1, 2^62, 0), would have the loops below walk the others for
// nothing. Every array of the layer is checked before any is converted.
void check_tl_arrays(const Bundle& bundle) {
    for (const char* n : {"W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V", "b_O"}) {
        const auto it = bundle.arrays.find(n);
        if (it == bundle.arrays.end()) continue;
        const Array& a = it->second;
        if (a.is_text()) throw InputError(a.origin + ": {layout} tl: expected numbers, found text");
        if (std::find(a.shape.begin(), a.shape.end(), std::size_t{0}) != a.shape.end())
            throw InputError(a.origin + ": {layout} tl: shape " + shape_str(a.shape) +
                             " holds no element (expected weights with no axis of size 0)");
    }
}

}  // namespace

std::size_t convert_tl_layout(Bundle& bundle) {
    auto find = [&](const char* n) -> Array* {
        auto it = bundle.arrays.find(n);
        return it == bundle.arrays.end() ? nullptr : &it->second;
    };
    check_tl_arrays(bundle);
    Array* wq = find("W_Q");
    if (!wq) throw InputError(bundle.source + ": {layout} tl: no array 'W_Q' (TransformerLens: (H, Dm, Dk))");
    if (wq->ndim() != 3)
        throw InputError(wq->origin + ": {layout} tl: expected (H, Dm, Dk) (TransformerLens), found " +
                         shape_str(wq->shape));
    const std::size_t H = wq->shape[0];
    // W_Q/W_K/W_V (H, Din, D) -> (Din, H·D): element [h, i, d] goes to [i, h·D + d].
    for (const char* n : {"W_Q", "W_K", "W_V"}) {
        Array* w = find(n);
        if (!w) throw InputError(bundle.source + ": {layout} tl: no array '" + std::string(n) + "'");
        if (w->ndim() != 3 || w->shape[0] != H)
            throw InputError(w->origin + ": {layout} tl: expected (" + std::to_string(H) +
                             ", Din, D) (H from W_Q), found " + shape_str(w->shape));
        const std::size_t din = w->shape[1], d = w->shape[2];
        Array m;
        m.shape = {din, H * d};
        m.dtype = w->dtype;
        m.origin = w->origin;
        m.values.resize(din * H * d);
        for (std::size_t h = 0; h < H; ++h)
            for (std::size_t i = 0; i < din; ++i)
                for (std::size_t k = 0; k < d; ++k) m.values[i * H * d + h * d + k] = w->value((h * din + i) * d + k);
        *w = std::move(m);
    }
    // W_O (H, Dv, Dout) -> (H·Dv, Dout): already in that order.
    if (Array* w = find("W_O")) {
        if (w->ndim() != 3 || w->shape[0] != H)
            throw InputError(w->origin + ": {layout} tl: expected (" + std::to_string(H) + ", Dv, Dout), found " +
                             shape_str(w->shape));
        w->shape = {H * w->shape[1], w->shape[2]};
    }
    // b_Q/b_K/b_V (H, D) -> (H·D).
    for (const char* n : {"b_Q", "b_K", "b_V"}) {
        Array* b = find(n);
        if (!b) continue;
        if (b->ndim() != 2 || b->shape[0] != H)
            throw InputError(b->origin + ": {layout} tl: expected (" + std::to_string(H) + ", D), found " +
                             shape_str(b->shape));
        b->shape = {H * b->shape[1]};
    }
    return H;
}

}  // namespace attnscope
