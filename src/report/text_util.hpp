// Text helpers shared by the terminal reports (numbers, heatmaps, explanations).
// Internal to the library.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "attnscope/base/text.hpp"
#include "attnscope/report/report.hpp"

namespace attnscope::text {

// Terminal columns of `s` (CJK and emoji take two, combining marks none): base's wcwidth-like rule.
inline std::size_t display_width(const std::string& s) { return attnscope::display_width(s); }

// The characters of `s` as a terminal draws them, one string each: a code point with the
// zero-width ones after it (combining marks, variation selectors) attached.
inline std::vector<std::string> glyphs(const std::string& s) {
    std::vector<std::string> out;
    for (std::size_t i = 0; i < s.size();) {
        char32_t cp = 0;
        const std::size_t n = next_code_point(s, i, cp);
        if (column_width(cp) == 0 && !out.empty())
            out.back() += s.substr(i, n);
        else
            out.push_back(s.substr(i, n));
        i += n;
    }
    return out;
}

// `s` when it takes at most `max` columns, else as many of its first characters as fit
// in `keep` columns, and "…".
inline std::string clip_points(const std::string& s, std::size_t max, std::size_t keep) {
    if (display_width(s) <= max) return s;
    std::string out;
    std::size_t used = 0;
    for (const std::string& g : glyphs(s)) {
        const std::size_t w = display_width(g);
        if (used + w > keep) break;
        out += g, used += w;
    }
    return out + "…";
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

// "B=2 Tq=6 Tk=6 ...": every size of the shape legend (no Dm, Dkv for a run from given
// Q, K, V: it has no x or memory).
inline std::string dims_line(const Dims& d) {
    const bool inputs = d.Dm || d.Dkv;
    return "B=" + std::to_string(d.B) + " Tq=" + std::to_string(d.Tq) + " Tk=" + std::to_string(d.Tk) +
           (inputs ? " Dm=" + std::to_string(d.Dm) + " Dkv=" + std::to_string(d.Dkv) : std::string()) +
           " H=" + std::to_string(d.H) + (d.G && d.G != d.H ? " G=" + std::to_string(d.G) : std::string()) +
           " Dk=" + std::to_string(d.Dk) + " Dv=" + std::to_string(d.Dv) + " Dout=" + std::to_string(d.Dout);
}

// ---------------------------------------------------------------------------
// What a run has beyond the classic pipeline
// ---------------------------------------------------------------------------

// The variants of attention a run used, as its view tells them: the spec, the mask rule,
// the dims, and what the bundle added (a float attn_mask, sinks), whichever stages were kept.
struct Variants {
    bool gqa = false;         // G < H K/V heads
    bool rope = false;        // Q_rot, K_rot
    bool alibi = false;       // bias m_h · (k_pos - q_pos)
    bool float_mask = false;  // a float attn_mask added to the scores
    bool bias = false;        // alibi || float_mask
    bool bool_mask = false;   // a boolean attn_mask in the mask rule
    bool window = false;      // a sliding window in the mask rule
    bool positions = false;   // q_positions / k_positions from the bundle
    bool softcap = false;     // C · tanh(scores / C)
    bool sinks = false;       // a sink logit per head
};

inline Variants variants_of(const TraceView& v) {
    Variants r;
    r.gqa = v.dims.G && v.dims.G != v.dims.H;
    r.rope = v.spec.rope.has_value();
    r.alibi = v.spec.alibi;
    r.bool_mask = v.mask_rule.has_attn_mask();
    r.window = v.mask_rule.window().has_value();
    r.positions = v.mask_rule.explicit_positions();
    r.softcap = v.spec.softcap.has_value();
    r.float_mask = v.float_mask;
    r.bias = r.alibi || r.float_mask;
    r.sinks = !v.sinks.empty();
    return r;
}

// "K/V head 1 serves query heads 2–3" (or "query head 2" for a group of one).
inline std::string serves(const Dims& d, std::size_t g) {
    const std::size_t n = d.group(), first = g * n;
    return "K/V head " + std::to_string(g) + " serves query head" +
           (n > 1 ? "s " + std::to_string(first) + "–" + std::to_string(first + n - 1) : " " + std::to_string(first));
}

// Every K/V head's query heads: "K/V head 0 serves query heads 0–1; K/V head 1 serves ...".
inline std::string sharing_line(const Dims& d) {
    std::string s;
    for (std::size_t g = 0; g < d.G; ++g) s += (g ? "; " : "") + serves(d, g);
    return s;
}

// The element of a (B, H, Tq, Tk) stage s at (b, h, i, j).
inline double at_bhij(const StageView& s, std::size_t b, std::size_t h, std::size_t i, std::size_t j) {
    return s.at(matrix_offset(s, b, h) + i * s.shape.back() + j);
}

// Whether query i of batch item b may see key j in head h: the mask rule, and a -inf bias
// (analysis::key_seen: every view asks it, none recomputes the rule).
inline bool sees(const TraceView& v, std::size_t b, std::size_t h, std::size_t i, std::size_t j) {
    return key_seen(v, b, h, i, j);
}

// ALiBi's slope m_h of head h, read back from the bias stage: bias / (k_pos - q_pos) at the
// cell of batch item 0 farthest from the diagonal. Only for a bias that is ALiBi alone (no
// float attn_mask added) and a kept bias stage; nullopt otherwise, or when every key sits
// at its query's position.
inline std::optional<double> alibi_slope(const TraceView& v, std::size_t h) {
    const StageView* bias = v.find(kBias);
    if (!bias || !v.spec.alibi || v.float_mask) return std::nullopt;
    long long best = 0;
    std::size_t bi = 0, bj = 0;
    for (std::size_t i = 0; i < v.dims.Tq; ++i)
        for (std::size_t j = 0; j < v.dims.Tk; ++j) {
            const long long delta = v.mask_rule.key_position(0, j) - v.mask_rule.query_position(0, i);
            if (std::llabs(delta) > std::llabs(best)) best = delta, bi = i, bj = j;
        }
    if (best == 0) return std::nullopt;
    return at_bhij(*bias, 0, h, bi, bj) / double(best);
}

// The largest visible logit of row (b, h, i) of masked_scores (-inf when none is visible),
// its key, and sum_j exp(m_ij - max).
struct RowMax {
    double max = -std::numeric_limits<double>::infinity(), sum = 0;
    std::size_t arg = 0;
};
inline RowMax row_max(const StageView& masked, std::size_t b, std::size_t h, std::size_t i) {
    RowMax r;
    const std::size_t Tk = masked.shape.back();
    for (std::size_t k = 0; k < Tk; ++k) {
        const double m = at_bhij(masked, b, h, i, k);
        if (m > r.max) r.max = m, r.arg = k;
    }
    if (r.max == -std::numeric_limits<double>::infinity()) return r;
    for (std::size_t k = 0; k < Tk; ++k) r.sum += std::exp(at_bhij(masked, b, h, i, k) - r.max);
    return r;
}

// The element of a (B, H, Tq) stage (sink_weight) at (b, h, i).
inline double at_bhi(const StageView& s, std::size_t b, std::size_t h, std::size_t i) {
    const bool batch = !s.axes.empty() && s.axes[0] == "B";
    const std::size_t H = s.shape[batch ? 1 : 0], Tq = s.shape.back();
    return s.at(((batch ? b : 0) * H + h) * Tq + i);
}

// The sink logit s_h of head h, read back from the stages (the view holds no sinks array):
// sink_weight / sum_j w_ij = exp(s_h - row max) / sum_j exp(m_ij - row max), at the row
// where the sink's share is nearest 1/2 (the best conditioned). nullopt without the
// stages, or when no row shares between keys and sink.
inline std::optional<double> sink_logit(const TraceView& v, std::size_t h) {
    const StageView *sw = v.find(kSinkWeight), *w = v.find(kWeights), *m = v.find(kMaskedScores);
    if (!sw || !w || !m) return std::nullopt;
    std::optional<double> best;
    double best_gap = 1;
    for (std::size_t b = 0; b < v.dims.B; ++b)
        for (std::size_t i = 0; i < v.dims.Tq; ++i) {
            const double share = at_bhi(*sw, b, h, i);
            double keys = 0;
            for (std::size_t j = 0; j < v.dims.Tk; ++j) keys += at_bhij(*w, b, h, i, j);
            if (!(share > 0 && keys > 0) || std::fabs(share - 0.5) >= best_gap) continue;
            const RowMax r = row_max(*m, b, h, i);
            if (!std::isfinite(r.max)) continue;
            best_gap = std::fabs(share - 0.5);
            best = r.max + std::log(r.sum) + std::log(share) - std::log(keys);
            // Rounding leaves ~1e-16 where the logit is 0: say 0 (a sum of terms of size ~|max|).
            if (std::fabs(*best) < 1e-12 * (1 + std::fabs(r.max))) best = 0.0;
        }
    return best;
}

// A number for narration: 4 significant digits ("0.003906", "-1.5", "inf").
inline std::string short_num(double x) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.4g", x);
    return buf;
}

// A number as written in an option: "10000", "0.5" (up to 10 significant digits).
inline std::string option_num(double x) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.10g", x);
    return buf;
}

// How the query positions are set, in words: "q_pos(i) = i", "i + Tk - Tq = i + 3", "from q_positions".
inline std::string positions_words(const TraceView& v) {
    if (v.mask_rule.explicit_positions()) return "positions from the bundle (q_positions / k_positions)";
    if (v.spec.causal_align == CausalAlign::top_left || v.dims.Tk == v.dims.Tq) return "";
    return "queries at positions i + Tk - Tq = i + " + std::to_string((long long)v.dims.Tk - (long long)v.dims.Tq) +
           " (bottom-right)";
}

// "from the bundle: heads 2, layout "torch", causal true; the command line's instead of
// the bundle's: heads 2": the options a bundle's config record set, and those overridden
// ("" when the bundle has no record).
inline std::string bundle_options_line(const std::vector<BundleOption>& options) {
    std::string used, over;
    for (const BundleOption& b : options) {
        std::string& s = b.overridden ? over : used;
        s += (s.empty() ? "" : ", ") + b.key + " " + (b.string ? "\"" + b.value + "\"" : b.value);
    }
    return (used.empty() ? "" : "from the bundle: " + used) + (used.empty() || over.empty() ? "" : "; ") +
           (over.empty() ? "" : "the command line's instead of the bundle's: " + over);
}

// Which masks and additive terms applied, in words ("none" when none did): key padding,
// causal with its alignment, a window, a boolean attn_mask, explicit positions, ALiBi or
// a float attn_mask, softcap and sinks, as the run has them.
inline std::string masks_line(const TraceView& v) {
    const Variants r = variants_of(v);
    const MaskRule& rule = v.mask_rule;
    std::string masks;
    const auto add = [&masks](const std::string& part) { masks += (masks.empty() ? "" : " + ") + part; };
    if (v.has_padding()) add("key padding (key_padding_mask, 1 = PAD)");
    if (rule.causal()) {
        if (r.positions)
            add("causal (query i sees keys with k_pos(j) <= q_pos(i))");
        else
            add(std::string("causal, ") + (rule.align() == CausalAlign::top_left
                                               ? "top-left (query i sees keys j <= i)"
                                               : "bottom-right (query i sees keys j <= i + Tk - Tq)"));
    }
    if (r.window) {
        const std::string W = std::to_string(*rule.window());
        add("window " + W +
            (rule.causal() ? " (the " + W + " latest keys: q_pos - " + W + " < k_pos <= q_pos)"
                           : " (|q_pos - k_pos| < " + W + ")"));
    }
    if (r.bool_mask)
        add(std::string("boolean attn_mask (") +
            (v.spec.attn_mask_means == MaskMeans::block ? "true = blocked" : "true = may attend") + ")");
    if (r.positions) add("explicit positions (q_positions / k_positions)");
    if (r.alibi) add("ALiBi bias m_h · (k_pos - q_pos)");
    if (r.float_mask) add("float attn_mask added to the scores (-inf hides a key)");
    if (r.softcap)
        add("softcap " + short_num(*v.spec.softcap) + " · tanh(scores / " + short_num(*v.spec.softcap) + ")");
    if (r.sinks) add("a sink logit per head (each row sums to 1 - sink_weight)");
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
