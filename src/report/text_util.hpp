// Text helpers shared by the terminal reports (numbers, heatmaps, explanations).
// Internal to the library.
#pragma once

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <ostream>
#include <string>
#include <vector>

#include "attnscope/base/text.hpp"
#include "attnscope/report/report.hpp"

namespace attnscope::text {

inline std::size_t display_width(const std::string& s) {
    std::size_t n = 0;
    for (unsigned char c : s) n += (c & 0xC0) != 0x80;  // count UTF-8 code points
    return n;
}

// `s` when it has at most `max` code points, else its first `keep` code points and "…".
inline std::string clip_points(const std::string& s, std::size_t max, std::size_t keep) {
    if (display_width(s) <= max) return s;
    std::size_t points = 0, i = 0;
    for (; i < s.size(); ++i) {
        if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80 && points++ == keep) break;
    }
    return s.substr(0, i) + "…";
}

// `s` in at most `max` terminal columns, "…" included when it is cut.
inline std::string clip_label(const std::string& s, std::size_t max = 12) { return clip_points(s, max, max - 1); }

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

// The label of position i along `axis` for batch item b: its token (whole, unclipped,
// with control characters and bytes that are not UTF-8 escaped: a label never acts on
// the terminal or breaks a line), or q0.. / k0.. / d0..
inline std::string axis_label(const TraceView& v, const std::string& axis, std::size_t b, std::size_t i) {
    const bool query = axis == "Tq", key = axis == "Tk";
    const TokenLabels& tokens = query ? v.query_tokens : v.key_tokens;
    if ((query || key) && b < tokens.size() && i < tokens[b].size()) return escape_control(tokens[b][i]);
    if (axis == "H" || axis == "G") return (axis == "H" ? "h" : "g") + std::to_string(i);
    return (query ? "q" : key ? "k" : "d") + std::to_string(i);
}

// The gap in a list of shown indices (printed "…").
constexpr std::size_t kGap = std::string::npos;

// The indices shown along an axis of length n: all of them when n <= max, else the
// first and the last `edge` around a gap (kGap), as numpy summarises.
inline std::vector<std::size_t> shown(std::size_t n, std::size_t max, std::size_t edge) {
    std::vector<std::size_t> idx;
    if (n <= max) {
        for (std::size_t i = 0; i < n; ++i) idx.push_back(i);
        return idx;
    }
    for (std::size_t i = 0; i < edge; ++i) idx.push_back(i);
    idx.push_back(kGap);
    for (std::size_t i = n - edge; i < n; ++i) idx.push_back(i);
    return idx;
}

// Whether a stage has a head axis.
inline bool has_heads(const StageView& s) { return has_head_axis(s); }

// "batch 0, head 1", "batch 0", "head 1" or "" for matrix (b, h) of stage s (a 2-D input
// has no batch axis, mask and output no head axis); `sep` between the two.
inline std::string matrix_title(const TraceView& v, const StageView& s, std::size_t b, std::size_t h,
                                const char* sep = ", ") {
    std::string t;
    if (v.batched) t += "batch " + std::to_string(b);
    if (has_heads(s)) t += (t.empty() ? "" : sep) + std::string("head ") + std::to_string(h);
    return t;
}

// One matrix of a stage as the views show it: where its (rows, cols) data starts, the
// batch item and query head it belongs to, and its title ("batch 0, head 1").
struct MatrixRef {
    std::size_t offset = 0, batch = 0, head = 0;
    std::string title;
};

// The matrices of stage s for the chosen batch items and query heads, in order. Its
// leading axes pick them: B; H; G (K/V heads: one matrix for each K/V head the chosen
// query heads read, titled with the query heads it serves); Tq (head_output: a matrix
// (H, Dout) per query position, at most `positions` of them, the ends of a long axis).
inline std::vector<MatrixRef> matrices_of(const TraceView& v, const StageView& s,
                                          const std::vector<std::size_t>& batches,
                                          const std::vector<std::size_t>& heads, std::size_t positions,
                                          const char* sep = ", ") {
    const std::size_t nd = s.shape.size(), matrix = s.shape[nd - 2] * s.shape[nd - 1];
    const std::vector<std::string> lead(s.axes.begin(), s.axes.end() - 2);
    const bool batch_axis = !lead.empty() && lead[0] == "B";
    const std::size_t k = batch_axis ? 1 : 0;  // the axis after the batch
    const std::string second = k < lead.size() ? lead[k] : "";
    std::vector<MatrixRef> out;
    for (std::size_t b : batches) {
        const std::string batch = v.batched ? "batch " + std::to_string(b) : "";
        auto title = [&](const std::string& rest) { return batch + (batch.empty() || rest.empty() ? "" : sep) + rest; };
        if (second == "H" || second == "G") {
            const std::size_t group = second == "G" ? s.group : 1;
            std::size_t last = std::string::npos;
            for (std::size_t h : heads) {
                const std::size_t g = h / group;
                if (g == last) continue;
                last = g;
                std::string what = "head " + std::to_string(h);
                if (second == "G")
                    what = "K/V head " + std::to_string(g) + " (query heads " + std::to_string(g * group) +
                           (group > 1 ? "-" + std::to_string(g * group + group - 1) : "") + ")";
                out.push_back({matrix_offset(s, b, h), b, h, title(what)});
            }
        } else if (second == "Tq") {
            const std::size_t Tq = s.shape[k];
            for (std::size_t t : shown(Tq, positions, std::max<std::size_t>(positions / 2, 1))) {
                if (t == kGap) continue;
                out.push_back(
                    {((batch_axis ? b : 0) * Tq + t) * matrix, b, 0,
                     title("query " + std::to_string(t) + " '" + clip_label(axis_label(v, "Tq", b, t)) + "'")});
            }
        } else {
            out.push_back({(batch_axis ? b : 0) * matrix, b, 0, batch});
        }
    }
    return out;
}

// "(B, H, Tq, Tk) = (2, 2, 6, 6)"
inline std::string shape_text(const StageView& s) {
    std::string axes, sizes;
    for (std::size_t k = 0; k < s.shape.size(); ++k) {
        axes += (k ? ", " : "") + s.axes[k];
        sizes += (k ? ", " : "") + std::to_string(s.shape[k]);
    }
    return "(" + axes + ") = (" + sizes + ")";
}

// A number for JSON: the shortest form that reads back to the same float/double, and
// the strings "nan", "inf", "-inf" for what JSON cannot spell.
template <typename T>
void put_json_number(std::ostream& out, T v) {
    if (std::isnan(v)) {
        out << "\"nan\"";
        return;
    }
    if (std::isinf(v)) {
        out << (v < 0 ? "\"-inf\"" : "\"inf\"");
        return;
    }
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
        if (c == ' ')
            flush_word();
        else
            word += c;
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
