// Words for the forward pass up to a layer's attention input, for --explain.
#include <cstdio>
#include <string>

#include "attnscope/base/text.hpp"
#include "attnscope/lm/forward.hpp"

namespace attnscope {
namespace {

std::string number(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    return buf;
}

// Step `n`'s words wrapped at spaces into lines of at most 80 columns: "  n. " before the
// first, 7 spaces before the others.
std::string step(int n, const std::string& words) {
    const std::string first = "  " + std::to_string(n) + ". ", next = "       ";
    std::string out, line = first;
    std::size_t at = 0;
    while (at < words.size()) {
        std::size_t end = words.find(' ', at);
        if (end == std::string::npos) end = words.size();
        const std::string word = words.substr(at, end - at);
        const bool fresh = line == first || line == next;
        if (!fresh && display_width(line + " " + word) > 80) out += line + "\n", line = next;
        line += (line == first || line == next ? "" : " ") + word;
        at = end + 1;
    }
    return out + line + "\n";
}

std::string layers_before(std::size_t layer) {
    if (layer == 0) return "no layer before it";
    if (layer == 1) return "layer 0";
    return "layers 0–" + std::to_string(layer - 1);
}

// The RoPE decoders' steps: embeddings, the blocks (the table's norm, MLP and block kinds).
std::string decoder_steps(const LmConfig& m, std::size_t layer, const std::string& T, const std::string& act,
                          const std::string& eps) {
    const Family& f = *m.arch;
    const std::string N = f.norm == NormKind::layer ? "LN" : "RMSNorm";
    const std::string ffn = f.mlp == MlpKind::plain     ? "down(" + act + "(up(m)))"
                            : f.mlp == MlpKind::experts ? "Σ top-" + std::to_string(m.experts_per_token) +
                                                              " experts p_e · down_e(" + act + "(gate_e(m)) ⊙ up_e(m))"
                                                        : "down(" + act + "(gate(m)) ⊙ up(m))";
    std::string blocks = layers_before(layer) + ", each: ";
    switch (m.blocks) {
        case BlockKind::parallel:
            blocks += "m = " + N + "_2(h); h += attn(" + N + "_1(h)) + " + ffn;
            break;
        case BlockKind::sandwich:
            blocks += "h += " + N + "(attn(" + N + "(h))); m = " + N + "(h); h += " + N + "(" + ffn + ")";
            break;
        case BlockKind::pre:
        case BlockKind::post:
            blocks += "h += attn(" + N + "(h)); m = " + N + "(h); h += " + ffn;
            break;
    }
    std::string s = step(1, "h = " + f.embed + "[id]" + (f.embed_scaled ? " · sqrt(Dm)" : "") + " for each of the " +
                                T + " tokens (positions enter through RoPE) (T, Dm)");
    s += step(2, blocks);
    if (f.norm == NormKind::layer)
        s += step(3, "x = " + N + "_1(h) of layer " + std::to_string(layer) + ": LayerNorm, eps " + eps);
    else
        s += step(3, "x = RMSNorm(h) of layer " + std::to_string(layer) + ": x / sqrt(mean(x²) + " + eps + ") · " +
                         (f.norm == NormKind::rms_unit_offset ? "(1 + w)" : "w"));
    return s;
}

}  // namespace

std::string describe_forward(const LmConfig& m, std::size_t layer, std::size_t tokens, bool float32) {
    const std::string T = std::to_string(tokens), L = std::to_string(layer), eps = number(m.eps);
    const std::string act = m.act_name;
    std::string s = "How x was made (" + m.model_type + ", " + std::to_string(m.layers) + " layers, width " +
                    std::to_string(m.hidden) + (float32 ? ", float32):\n" : ", float64):\n");
    const std::string before = layers_before(layer);
    if (m.family == LmFamily::gpt2) {
        s += step(1, "h = wte[id] + wpe[position] for each of the " + T + " tokens (T, Dm)");
        s += step(2, before + ", each: h += attn(LN_1(h)); h += c_proj(" + act + "(c_fc(LN_2(h))))");
        s += step(3, "x = LN_1(h) of layer " + L + ": LayerNorm, eps " + eps + " (GPT-2 normalizes before attention)");
    } else if (m.family == LmFamily::bert) {
        s += step(1, "h = LN(word[id] + position[p] + token_type[0]) for each of the " + T + " tokens (T, Dm), " +
                         (m.pad_id ? "p = " + std::to_string(*m.pad_id) + " + 1 + i (RoBERTa)" : "p = i"));
        s += step(2, before + ", each: h = LN(h + attn(h)); h = LN(h + output(" + act + "(intermediate(h))))");
        s += step(3, "x = h, the hidden state entering layer " + L +
                         " (BERT normalizes after each sublayer); LayerNorm eps " + eps);
    } else {
        s += decoder_steps(m, layer, T, act, eps);
    }
    return s;
}

}  // namespace attnscope
