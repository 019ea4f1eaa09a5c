// The mask rule (see mask.hpp).
#include "attnscope/model/mask.hpp"

#include <algorithm>
#include <utility>

namespace attnscope {

MaskRule::MaskRule(std::size_t /*B*/, std::size_t Tq, std::size_t Tk, MaskParts parts)
    : Tq_(Tq), Tk_(Tk), p_(std::move(parts)) {}

MaskRule::MaskRule(std::size_t /*B*/, std::size_t Tq, std::size_t Tk, std::optional<xt::xtensor<bool, 2>> key_padding,
                   bool causal, CausalAlign align)
    : Tq_(Tq), Tk_(Tk) {
    p_.key_padding = std::move(key_padding);
    p_.causal = causal;
    p_.align = align;
}

long long MaskRule::query_position(std::size_t b, std::size_t i) const {
    if (p_.q_positions) return (*p_.q_positions)(p_.q_positions->shape(0) == 1 ? 0 : b, i);
    const long long shift = p_.align == CausalAlign::top_left ? 0 : (long long)(Tk_ - p_.extra_keys) - (long long)Tq_;
    return (long long)i + shift;
}

long long MaskRule::key_position(std::size_t b, std::size_t j) const {
    if (p_.k_positions) return (*p_.k_positions)(p_.k_positions->shape(0) == 1 ? 0 : b, j);
    return (long long)j;
}

bool MaskRule::visible(std::size_t b, std::size_t i, std::size_t j) const {
    if (j >= Tk_ - p_.extra_keys) return true;  // <bias_kv>, <zero>: always seen
    if (padded(b, j)) return false;
    if (p_.allow && !(*p_.allow)(p_.allow->shape(0) == 1 ? 0 : b, i, j)) return false;
    if (!p_.causal && !p_.window) return true;
    const long long q = query_position(b, i), k = key_position(b, j);
    if (p_.causal && k > q) return false;
    if (p_.window) {
        // Positions are below 2^53 in magnitude: a wider window sees every key, and
        // clamping it keeps q - w inside long long.
        const long long w = (long long)std::min<std::size_t>(*p_.window, std::size_t{1} << 60);
        if (p_.causal ? !(q - w < k) : !(q - k < w && k - q < w)) return false;
    }
    return true;
}

bool MaskRule::row(std::size_t b, std::size_t i, bool* out) const { return row(b, i, 0, Tk_, out); }

bool MaskRule::row(std::size_t b, std::size_t i, std::size_t lo, std::size_t hi, bool* out) const {
    bool any = false;
    if (!p_.window && !p_.allow && !p_.k_positions) {  // the classic rule, fast
        const long long last = p_.causal ? query_position(b, i) : (long long)Tk_;
        const std::size_t first_extra = Tk_ - p_.extra_keys;
        for (std::size_t j = lo; j < hi; ++j) {
            out[j - lo] = j >= first_extra || (!padded(b, j) && (long long)j <= last);
            any |= out[j - lo];
        }
        return any;
    }
    for (std::size_t j = lo; j < hi; ++j) {
        out[j - lo] = visible(b, i, j);
        any |= out[j - lo];
    }
    return any;
}

std::pair<std::size_t, std::size_t> MaskRule::key_span(std::size_t b, std::size_t i) const {
    if (p_.extra_keys || explicit_positions() || (!p_.causal && !p_.window)) return {0, Tk_};
    const long long q = query_position(b, i), T = (long long)Tk_;
    long long first = 0, last = T;  // keys [first, last)
    if (p_.causal) last = std::min(T, q + 1);
    if (p_.window) {
        const long long w = (long long)std::min<std::size_t>(*p_.window, std::size_t{1} << 60);
        first = std::max(first, q - w + 1);
        if (!p_.causal) last = std::min(last, q + w);
    }
    first = std::clamp(first, 0LL, T);
    last = std::clamp(last, first, T);
    return {std::size_t(first), std::size_t(last)};
}

std::string MaskRule::causal_rule() const {
    if (explicit_positions()) return "k_pos(j) <= q_pos(i)";
    return p_.align == CausalAlign::top_left ? "j <= i" : "j <= i + Tk - Tq";
}

std::string MaskRule::words() const {
    std::string w;
    auto add = [&](const std::string& part) { w += (w.empty() ? "" : ", and ") + part; };
    if (has_padding()) add(p_.causal || p_.window || p_.allow ? "not PAD" : "key j is not PAD");
    if (p_.causal) add(has_padding() ? causal_rule() : "causal: " + causal_rule());
    if (p_.window) {
        const std::string W = std::to_string(*p_.window);
        const std::string q = explicit_positions() ? "q_pos(i)" : "i", k = explicit_positions() ? "k_pos(j)" : "j";
        add(p_.causal ? "window " + W + ": " + q + " - " + W + " < " + k
                      : "window " + W + ": |" + q + " - " + k + "| < " + W);
    }
    if (p_.allow) add("attn_mask allows it");
    if (p_.extra_keys && !w.empty()) w += "; the appended keys always";
    return w.empty() ? "(no mask given: all true)" : "(" + w + ")";
}

}  // namespace attnscope
