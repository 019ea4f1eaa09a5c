// Words for the forward pass up to a layer's attention input, for --explain.
#include <cstdio>
#include <string>

#include "attnscope/lm/forward.hpp"

namespace attnscope {
namespace {

std::string number(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    return buf;
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
    std::string s = "  1. h = " + f.embed + "[id]" + (f.embed_scaled ? " · sqrt(Dm)" : "") + " for each of the " + T +
                    " tokens (positions enter through RoPE)   (T, Dm)\n";
    s += "  2. " + layers_before(layer) + ", each: ";
    switch (m.blocks) {
        case BlockKind::parallel:
            s += "m = " + N + "_2(h); h += attn(" + N + "_1(h)) + " + ffn + "\n";
            break;
        case BlockKind::sandwich:
            s += "h += " + N + "(attn(" + N + "(h))); m = " + N + "(h); h += " + N + "(" + ffn + ")\n";
            break;
        case BlockKind::pre:
        case BlockKind::post:
            s += "h += attn(" + N + "(h)); m = " + N + "(h); h += " + ffn + "\n";
            break;
    }
    if (f.norm == NormKind::layer)
        s += "  3. x = " + N + "_1(h) of layer " + std::to_string(layer) + ": LayerNorm, eps " + eps + "\n";
    else
        s += "  3. x = RMSNorm(h) of layer " + std::to_string(layer) + ": x / sqrt(mean(x²) + " + eps + ") · " +
             (f.norm == NormKind::rms_unit_offset ? "(1 + w)" : "w") + "\n";
    return s;
}

}  // namespace

std::string describe_forward(const LmConfig& m, std::size_t layer, std::size_t tokens, bool float32) {
    const std::string T = std::to_string(tokens), L = std::to_string(layer), eps = number(m.eps);
    const std::string act = m.act_name;
    std::string s = "How x was made (" + m.model_type + ", " + std::to_string(m.layers) + " layers, width " +
                    std::to_string(m.hidden) + (float32 ? ", float32):\n" : ", float64):\n");
    if (m.family == LmFamily::gpt2) {
        s += "  1. h = wte[id] + wpe[position] for each of the " + T + " tokens          (T, Dm)\n";
        s += "  2. " + layers_before(layer) + ", each: h += attn(LN_1(h)); h += c_proj(" + act + "(c_fc(LN_2(h))))\n";
        s += "  3. x = LN_1(h) of layer " + L + ": LayerNorm, eps " + eps + " (GPT-2 normalizes before attention)\n";
    } else if (m.family == LmFamily::bert) {
        s += "  1. h = LN(word[id] + position[p] + token_type[0]) for each of the " + T + " tokens (T, Dm)";
        s += m.pad_id ? ", p = " + std::to_string(*m.pad_id) + " + 1 + i (RoBERTa)\n" : ", p = i\n";
        s += "  2. " + layers_before(layer) + ", each: h = LN(h + attn(h)); h = LN(h + output(" + act +
             "(intermediate(h))))\n";
        s += "  3. x = h, the hidden state entering layer " + L +
             " (BERT normalizes after each sublayer); LayerNorm eps " + eps + "\n";
    } else {
        s += decoder_steps(m, layer, T, act, eps);
    }
    return s;
}

}  // namespace attnscope
