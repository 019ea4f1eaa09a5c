// Text helpers shared by the terminal reports (numbers, heatmaps, explanations).
// Internal to the library.
#pragma once

#include "attnscope/report/report.hpp"

#include <algorithm>
#include <charconv>
#include <ostream>
#include <cmath>
#include <cstdio>
#include <string>

namespace attnscope::text {

inline std::size_t display_width(const std::string& s) {
    std::size_t n = 0;
    for (unsigned char c : s) n += (c & 0xC0) != 0x80;  // count UTF-8 code points
    return n;
}

inline std::string clip_label(const std::string& s, std::size_t max = 12) {
    if (display_width(s) <= max) return s;
    std::size_t points = 0, i = 0;
    for (; i < s.size(); ++i) {
        if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80 && ++points == max) break;
    }
    return s.substr(0, i) + "…";
}

inline std::string pad_left(const std::string& s, std::size_t w) {
    std::size_t n = display_width(s);
    return n >= w ? s : std::string(w - n, ' ') + s;
}
inline std::string pad_right(const std::string& s, std::size_t w) {
    std::size_t n = display_width(s);
    return n >= w ? s : s + std::string(w - n, ' ');
}

inline std::string format_number(double v, int decimals) {
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
    if (v == 0) return "0";  // exactly zero (a masked weight), unlike a small weight shown as 0.0000
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
    return buf;
}

// Label of position i along an axis named `axis` for batch item b.
inline std::string axis_label(const TraceView& v, const std::string& axis, std::size_t b, std::size_t i) {
    if (axis == "Tq") return v.query_tokens.empty() ? "q" + std::to_string(i) : clip_label(v.query_tokens[b][i]);
    if (axis == "Tk") return v.key_tokens.empty() ? "k" + std::to_string(i) : clip_label(v.key_tokens[b][i]);
    return "d" + std::to_string(i);
}


// A number for JSON: the shortest form that reads back to the same float/double, and
// the strings "nan", "inf", "-inf" for what JSON cannot spell.
template <typename T>
void put_json_number(std::ostream& out, T v) {
    if (std::isnan(v)) { out << "\"nan\""; return; }
    if (std::isinf(v)) { out << (v < 0 ? "\"-inf\"" : "\"inf\""); return; }
    char buf[40];
    auto r = std::to_chars(buf, buf + sizeof buf, v);
    out.write(buf, r.ptr - buf);
}

// Greedy word wrap to `width` display columns.
inline std::vector<std::string> wrap(const std::string& text, std::size_t width) {
    std::vector<std::string> lines;
    std::string line, word;
    auto flush_word = [&] {
        if (word.empty()) return;
        if (!line.empty() && display_width(line) + 1 + display_width(word) > width) lines.push_back(line), line.clear();
        line += (line.empty() ? "" : " ") + word;
        word.clear();
    };
    for (char c : text) {
        if (c == ' ') flush_word();
        else word += c;
    }
    flush_word();
    if (!line.empty()) lines.push_back(line);
    return lines;
}

// "B=2 Tq=6 Tk=6 ...": every size of the shape legend.
inline std::string dims_line(const Dims& d) {
    return "B=" + std::to_string(d.B) + " Tq=" + std::to_string(d.Tq) + " Tk=" + std::to_string(d.Tk) +
           " Dm=" + std::to_string(d.Dm) + " Dkv=" + std::to_string(d.Dkv) + " H=" + std::to_string(d.H) +
           " Dk=" + std::to_string(d.Dk) + " Dv=" + std::to_string(d.Dv) + " Dout=" + std::to_string(d.Dout);
}

// Which masks applied, in words ("none" when none did).
inline std::string masks_line(const TraceView& v) {
    std::string masks;
    if (v.has_padding()) masks += "key padding (key_padding_mask, 1 = PAD)";
    if (v.spec.causal)
        masks += std::string(masks.empty() ? "" : " + ") + "causal, " +
                 (v.spec.causal_align == CausalAlign::top_left ? "top-left (query i sees keys j <= i)"
                                                               : "bottom-right (query i sees keys j <= i + Tk - Tq)");
    return masks.empty() ? "none" : masks;
}

// Batch items or heads chosen by the user, or all of them.
inline std::vector<std::size_t> chosen_or_all(const std::vector<std::size_t>& chosen, std::size_t n) {
    if (!chosen.empty()) return chosen;
    std::vector<std::size_t> r(n);
    for (std::size_t i = 0; i < n; ++i) r[i] = i;
    return r;
}

}  // namespace attnscope::text
