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
        s += step(1, "h = embed_tokens[id] for each of the " + T + " tokens (positions enter through RoPE) (T, Dm)");
        s += step(2, before + ", each: h += attn(RMSNorm(h)); m = RMSNorm(h); h += down(" + act + "(gate(m)) ⊙ up(m))");
        s += step(3, "x = RMSNorm(h) of layer " + L + ": x / sqrt(mean(x²) + " + eps + ") · w");
    }
    return s;
}

}  // namespace attnscope
