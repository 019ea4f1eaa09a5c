// Heatmaps of a trace: an HTML page with every chosen stage, batch item and head as a
// table (for a browser or a projector), and one matrix as an SVG figure (for slides
// and papers).
//
// Both are self-contained: no scripts, fonts, images or style sheets from elsewhere,
// so they open offline. Colours are colour-blind safe: viridis (sequential) for
// scores, masked_scores and weights; ColorBrewer's RdBu (diverging, white at 0) for
// Q, K, V, context and output. A masked cell (the query may not see that key) is
// hatched grey, never a dark "small weight" colour; it reads "−∞" (masked_scores) or
// "0" (weights) in HTML and carries no number in SVG.
//
// Numbers: the exact value of a cell (title and data-value in HTML, a <title> in SVG)
// is the shortest text that reads back to the same float32/float64 value; the number
// shown in a cell is rounded. Exact zeros print "0", and a value that rounds to zero
// loses its sign (no "-0.00").
#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "attnscope/base/errors.hpp"
#include "attnscope/report/report.hpp"
#include "colour.hpp"
#include "text_util.hpp"

namespace attnscope {
namespace {

// ---------------------------------------------------------------------------
// Text: escaping, labels, widths
// ---------------------------------------------------------------------------

// The code point at s[i] and its length in bytes; length 0 when the bytes there are not
// well-formed UTF-8 (a stray continuation byte, an overlong form, a surrogate, > U+10FFFF).
std::size_t decode_utf8(std::string_view s, std::size_t i, char32_t& cp) {
    const auto byte = [&](std::size_t k) { return static_cast<char32_t>(static_cast<unsigned char>(s[k])); };
    const char32_t c = byte(i);
    std::size_t len = 0;
    char32_t min = 0;
    if (c < 0x80) {
        cp = c;
        return 1;
    }
    if ((c & 0xE0) == 0xC0)
        len = 2, cp = c & 0x1F, min = 0x80;
    else if ((c & 0xF0) == 0xE0)
        len = 3, cp = c & 0x0F, min = 0x800;
    else if ((c & 0xF8) == 0xF0)
        len = 4, cp = c & 0x07, min = 0x10000;
    else
        return 0;
    if (i + len > s.size()) return 0;
    for (std::size_t k = 1; k < len; ++k) {
        if ((byte(i + k) & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (byte(i + k) & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return len;
}

// False for the characters XML 1.0 forbids (C0 controls but tab and newlines, U+FFFE,
// U+FFFF) and those HTML calls parse errors (DEL, C1 controls).
bool printable(char32_t cp) {
    if (cp == '\t' || cp == '\n' || cp == '\r') return true;
    if (cp < 0x20 || (cp >= 0x7F && cp <= 0x9F)) return false;
    return cp != 0xFFFE && cp != 0xFFFF;
}

// `s` as HTML/XML character data or attribute value (in either quotes): markup
// characters as entities, printable well-formed UTF-8 as it is, anything else as U+FFFD.
std::string escape(std::string_view s) {
    std::string r;
    r.reserve(s.size());
    for (std::size_t i = 0; i < s.size();) {
        char32_t cp = 0;
        const std::size_t len = decode_utf8(s, i, cp);
        if (len == 0 || !printable(cp)) {
            r += "\xEF\xBF\xBD";  // U+FFFD REPLACEMENT CHARACTER
            i += len == 0 ? 1 : len;
            continue;
        }
        switch (cp) {
            case '&':
                r += "&amp;";
                break;
            case '<':
                r += "&lt;";
                break;
            case '>':
                r += "&gt;";
                break;
            case '"':
                r += "&quot;";
                break;
            case '\'':
                r += "&#39;";
                break;
            default:
                r.append(s.substr(i, len));
        }
        i += len;
    }
    return r;
}

// Estimated width in pixels of `s` in a sans-serif font of size `font` (for SVG layout,
// where text cannot be measured): wide East Asian characters take a full em.
double text_width(const std::string& s, double font) {
    double em = 0;
    for (std::size_t i = 0; i < s.size();) {
        char32_t cp = 0;
        const std::size_t len = decode_utf8(s, i, cp);
        i += len == 0 ? 1 : len;
        if (cp >= 0x1100 && (cp <= 0x115F || (cp >= 0x2E80 && cp <= 0xA4CF) || (cp >= 0xAC00 && cp <= 0xD7A3) ||
                             (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0xFF00 && cp <= 0xFF60) || cp >= 0x1F300))
            em += 1.0;
        else if (cp >= 'A' && cp <= 'Z')
            em += 0.72;
        else
            em += 0.62;
    }
    return em * font;
}

// A label cut to 12 characters and "…" (the whole label is on hover in HTML).
std::string clip(const std::string& s) { return text::clip_points(s, 12, 12); }

// What an axis counts, for axis titles: "queries (Tq)", "keys (Tk)", "features (Dk)".
std::string axis_title(const std::string& axis) {
    if (axis == "Tq") return "queries (Tq)";
    if (axis == "Tk") return "keys (Tk)";
    if (axis == "H") return "heads (H)";
    return "features (" + axis + ")";
}

// ---------------------------------------------------------------------------
// Numbers
// ---------------------------------------------------------------------------

// The shortest text that reads back to exactly `x`; "-inf", "inf", "nan" as in JSON output.
template <typename T>
std::string shortest(T x) {
    if (std::isnan(x)) return "nan";
    if (std::isinf(x)) return x < 0 ? "-inf" : "inf";
    char buf[48];
    const auto r = std::to_chars(buf, buf + sizeof buf, x);
    return std::string(buf, r.ptr);
}

// Element k of a stage, exactly, in the stage's own precision; a mask is "1" or "0".
std::string exact_number(const StageView& s, std::size_t k) {
    switch (s.dtype) {
        case DType::float32:
            return shortest(static_cast<const float*>(s.data)[k]);
        case DType::float64:
            return shortest(static_cast<const double*>(s.data)[k]);
        case DType::boolean:
            return static_cast<const bool*>(s.data)[k] ? "1" : "0";
        case DType::int64:
            return std::to_string(static_cast<const std::int64_t*>(s.data)[k]);
    }
    return {};
}

// `x` printed with `format` for a reader: exact zero is "0"; a value that rounds to zero
// loses its sign (no "-0.00"); the minus sign is U+2212; infinities are "∞", "−∞".
std::string readable(double x, const char* format) {
    if (std::isnan(x)) return "NaN";
    if (std::isinf(x)) return x < 0 ? "−∞" : "∞";
    if (x == 0) return "0";
    char buf[48];
    std::snprintf(buf, sizeof buf, format, x);
    std::string t = buf;
    if (t[0] == '-') {
        const std::string mantissa = t.substr(0, t.find_first_of("eE"));
        if (mantissa.find_first_of("123456789") == std::string::npos)
            t.erase(0, 1);
        else
            t.replace(0, 1, "−");
    }
    return t;
}

// The rounded number shown inside a cell: at most about five characters.
std::string cell_text(double x) {
    const double a = std::fabs(x);
    return readable(x, a >= 1e4 ? "%.1e" : a >= 100 ? "%.0f" : a >= 10 ? "%.1f" : "%.2f");
}

// A number on a colour legend or in the page header.
std::string tick_text(double x) { return readable(x, "%.3g"); }

// ---------------------------------------------------------------------------
// Colours
// ---------------------------------------------------------------------------

constexpr const char* kAllowed = "#21918c";  // a visible key in the mask stage (viridis at 0.5)
constexpr const char* kHatchDark = "#ababab";
constexpr const char* kHatchLight = "#ebebeb";

using colour::dark;
using colour::hex;
using colour::Palette;
using colour::Rgb;

// The palette as CSS/SVG gradient stops "#440154 0%,...".
std::string gradient_stops(Palette p, bool svg) {
    std::string r;
    const std::size_t n = colour::stop_count(p);
    for (std::size_t k = 0; k < n; ++k) {
        const double t = double(k) / double(n - 1);
        const std::string c = hex(colour::at(p, t));
        char pct[16];
        std::snprintf(pct, sizeof pct, "%.1f%%", 100 * t);
        if (svg)
            r += "<stop offset=\"" + std::string(pct) + "\" stop-color=\"" + c + "\"/>";
        else
            r += (k ? "," : "") + c + " " + pct;
    }
    return r;
}

// ---------------------------------------------------------------------------
// Matrices, their colour scales and their masked cells
// ---------------------------------------------------------------------------

// One matrix of a stage: its last two axes at batch item `batch` and head `head` (for
// the leading axes the stage has: mask and output have no head axis, a 2-D input no
// batch axis).
struct Matrix {
    const StageView* stage = nullptr;
    std::size_t batch = 0, head = 0;
    bool has_heads = false;
    std::size_t offset = 0, rows = 0, cols = 0;
    std::string title;  // "batch 0 · head 1"; empty: from batch and head

    const std::string& row_axis() const { return stage->axes[stage->axes.size() - 2]; }
    const std::string& col_axis() const { return stage->axes.back(); }
    double at(std::size_t i, std::size_t j) const { return stage->at(offset + i * cols + j); }
    std::string exact(std::size_t i, std::size_t j) const { return exact_number(*stage, offset + i * cols + j); }
};

Matrix matrix_of(const StageView& s, std::size_t b, std::size_t h) {
    const std::size_t nd = s.shape.size();
    if (nd < 2) throw std::logic_error("stage " + s.name + " has fewer than two axes");
    Matrix m;
    m.stage = &s;
    m.batch = b;
    m.head = h;
    m.rows = s.shape[nd - 2];
    m.cols = s.shape[nd - 1];
    m.has_heads = text::has_heads(s);
    m.offset = matrix_offset(s, b, h);
    return m;
}

// How a stage is coloured: its ColorKind in the stage table (probability: viridis over
// 0..1; sequential: viridis over the matrix's finite min..max; diverging: blue-white-red
// over -m..m, m the largest finite |value|; boolean: visible or masked).
ColorKind kind_of(const StageView& s) { return stage_info(s.id).color; }

// Where a matrix's values sit on its palette, and the numbers its legend shows.
struct ColourScale {
    Palette palette = Palette::viridis;
    double lo = 0, hi = 1;

    double position(double x) const {
        if (std::isinf(x)) return x < 0 ? 0 : 1;
        if (!(hi > lo)) return 0.5;  // a constant matrix sits in the middle
        return std::clamp((x - lo) / (hi - lo), 0.0, 1.0);
    }
    // The numbers under an HTML legend, spaced evenly: the ends, and 0 in the middle
    // of a diverging scale (or 0.5 for weights).
    std::vector<double> end_ticks() const {
        if (!(hi > lo)) return {lo};
        if (palette == Palette::blue_red || (lo == 0 && hi == 1)) return {lo, (lo + hi) / 2, hi};
        return {lo, hi};
    }
    // The numbers beside an SVG legend: the ends and the round numbers (1, 2 or 5 times a
    // power of ten apart) between them that are not too close to an end.
    std::vector<double> ticks() const {
        if (!(hi > lo) || !std::isfinite(hi - lo)) return end_ticks();
        const double raw = (hi - lo) / 4, unit = std::pow(10.0, std::floor(std::log10(raw)));
        const double step = raw / unit < 1.5   ? unit
                            : raw / unit < 3.5 ? 2 * unit
                            : raw / unit < 7.5 ? 5 * unit
                                               : 10 * unit;
        std::vector<double> t{lo};
        for (double k = std::ceil(lo / step); k * step < hi; ++k)
            if (const double x = k * step; x - lo > 0.1 * (hi - lo) && hi - x > 0.1 * (hi - lo)) t.push_back(x);
        t.push_back(hi);
        return t;
    }
};

ColourScale scale_of(const Matrix& m, ColorKind kind) {
    ColourScale sc;
    if (kind == ColorKind::probability || kind == ColorKind::boolean) return sc;
    double lo = std::numeric_limits<double>::infinity(), hi = -lo, big = 0;
    for (std::size_t i = 0; i < m.rows; ++i)
        for (std::size_t j = 0; j < m.cols; ++j) {
            const double x = m.at(i, j);
            if (!std::isfinite(x)) continue;
            lo = std::min(lo, x), hi = std::max(hi, x), big = std::max(big, std::fabs(x));
        }
    if (kind == ColorKind::diverging) {
        sc.palette = Palette::blue_red;
        sc.lo = -big, sc.hi = big;  // white at 0 (and everywhere when all values are 0)
    } else if (lo <= hi) {
        sc.lo = lo, sc.hi = hi;
    } else {
        sc.lo = sc.hi = 0;  // no finite value: every cell is masked or non-finite
    }
    return sc;
}

// Whether the stage marks masked cells: the mask itself, and the stages after it.
bool shows_mask(const StageView& s) {
    switch (s.id) {
        case kMask:
        case kMaskedScores:
        case kWeights:
            return true;
        default:
            return false;
    }
}

// The (Tq, Tk) "may attend" matrix of batch item b and head h, row-major, as the run's mask
// rule says (and, but for the mask stage itself, a -inf bias: text::sees). Empty for a
// stage that marks no masked cells.
std::vector<char> visibility(const TraceView& v, const StageView& s, std::size_t b, std::size_t h) {
    if (!shows_mask(s)) return {};
    const std::size_t Tq = v.dims.Tq, Tk = v.dims.Tk;
    std::vector<char> seen(Tq * Tk);
    for (std::size_t i = 0; i < Tq; ++i)
        for (std::size_t j = 0; j < Tk; ++j)
            seen[i * Tk + j] = s.id == kMask ? v.mask_rule.visible(b, i, j) : text::sees(v, b, h, i, j);
    return seen;
}

// What a cell of a matrix looks like.
struct Cell {
    bool masked = false;  // the query may not see this key
    bool nan = false;
    double position = 0;  // on the palette, 0..1
    std::string text;     // the number shown (rounded), or the mask's mark
};

Cell cell_of(const Matrix& m, ColorKind kind, const ColourScale& sc, const std::vector<char>& seen, std::size_t i,
             std::size_t j) {
    Cell c;
    const double x = m.at(i, j);
    c.masked = (shows_mask(*m.stage) && !seen.empty() && !seen[i * m.cols + j]) ||
               (m.stage->id == kBias && x == -std::numeric_limits<double>::infinity());  // a -inf bias hides its key
    if (kind == ColorKind::boolean) {
        c.text = x != 0 ? "✓" : "·";
        return c;
    }
    c.nan = std::isnan(x);
    c.position = sc.position(x);
    c.text = cell_text(x);  // a masked cell: "−∞" in masked_scores, "0" in weights
    return c;
}

// "batch 0 · head 1", "batch 0", "head 1" or "" for a matrix.
std::string matrix_title(const TraceView& v, const Matrix& m) {
    if (!m.title.empty()) return m.title;
    return text::matrix_title(v, *m.stage, m.batch, m.head, " · ");
}

// ---------------------------------------------------------------------------
// HTML
// ---------------------------------------------------------------------------

constexpr std::size_t kMaxAxis = 64;        // cells drawn along one axis of an HTML table
constexpr std::size_t kNumberCols = 16;     // a table this narrow shows the numbers in its cells
constexpr std::size_t kPageCells = 250000;  // cells drawn on a whole page (about 20 MB)
constexpr int kLevels = 64;                 // colour classes per palette

// Colour class of a palette position: "v0".."v63" (viridis) or "r0".."r63" (blue-red).
std::string colour_class(Palette p, double t) {
    const long level = std::lround(std::clamp(t, 0.0, 1.0) * (kLevels - 1));
    return (p == Palette::viridis ? "v" : "r") + std::to_string(level);
}

// The page's style sheet; HATCH_DARK, HATCH_LIGHT, ALLOWED, VIRIDIS and BLUE_RED stand
// for the colours and gradients filled in by style_sheet().
constexpr const char* kStyle = R"(:root { color-scheme: light; }
body { font: 18px/1.45 "DejaVu Sans", "Segoe UI", Helvetica, Arial, sans-serif; color: #1b1b1b;
  background: #fff; margin: 24px 32px 48px; }
h1 { font-size: 30px; margin: 0 0 10px; }
h2 { font-size: 26px; margin: 40px 0 4px; padding-bottom: 4px; border-bottom: 2px solid #d0d0d0; }
h2 .shape { font-size: 17px; font-weight: normal; color: #555; margin-left: 12px; }
.formula { font-family: "DejaVu Sans Mono", Consolas, monospace; font-size: 17px; color: #333; margin: 4px 0 14px; }
table.config { border-collapse: collapse; margin: 6px 0 12px; }
table.config th { text-align: left; font-weight: 600; padding: 2px 18px 2px 0; vertical-align: top; }
table.config td { padding: 2px 0; }
.howto { color: #333; max-width: 62em; margin: 8px 0; }
nav { margin: 10px 0; }
nav a { margin-right: 14px; color: #0b5cad; }
.figs { display: flex; flex-wrap: wrap; gap: 26px 40px; align-items: flex-start; }
figure { margin: 0; }
figcaption { font-weight: 600; font-size: 19px; margin: 0 0 6px; }
table.heat { border-collapse: collapse; font-variant-numeric: tabular-nums; }
.heat th { font-weight: normal; font-size: 16px; padding: 2px 6px; white-space: nowrap; color: #222; }
.heat th.row { text-align: right; }
.heat thead th { vertical-align: bottom; text-align: center; }
.heat th.corner { font-size: 13px; color: #666; text-align: right; }
.heat td { min-width: 3.3em; height: 2.1em; padding: 0 3px; text-align: center; font-size: 16px;
  border: 1px solid #fff; }
.heat.dense td { min-width: 0; width: 13px; height: 13px; padding: 0; border: 0; }
.heat.dense thead th { writing-mode: vertical-rl; transform: rotate(180deg); text-align: left; font-size: 12px;
  line-height: 13px; padding: 4px 0; }
.heat.dense th.row { font-size: 12px; padding: 0 6px; line-height: 13px; }
.heat td.masked { background: repeating-linear-gradient(45deg, HATCH_DARK 0 2px, HATCH_LIGHT 2px 7px); color: #222; }
.heat td.ok { background: ALLOWED; color: #fff; }
.heat td.nan { background: #fff; color: #b00020; outline: 1px dashed #b00020; outline-offset: -2px; }
.heat td.gap, .heat th.gap { background: none; color: #777; }
.legend { display: flex; align-items: center; gap: 10px; margin-top: 8px; font-size: 15px; color: #333; }
.legend .scale { width: 200px; }
.legend .bar { height: 14px; border: 1px solid #999; }
.legend .bar.viridis { background: linear-gradient(to right, VIRIDIS); }
.legend .bar.blue_red { background: linear-gradient(to right, BLUE_RED); }
.legend .ticks { display: flex; justify-content: space-between; }
.swatch { display: inline-block; width: 18px; height: 18px; border: 1px solid #999; vertical-align: middle; }
.swatch.masked { background: repeating-linear-gradient(45deg, HATCH_DARK 0 2px, HATCH_LIGHT 2px 7px); }
.swatch.ok { background: ALLOWED; }
.note { color: #555; font-size: 15px; margin: 6px 0 0; max-width: 40em; }
)";
;

std::string style_sheet() {
    std::string css = kStyle;
    const auto replace = [&css](const std::string& what, const std::string& with) {
        for (std::size_t at; (at = css.find(what)) != std::string::npos;) css.replace(at, what.size(), with);
    };
    replace("HATCH_DARK", kHatchDark);
    replace("HATCH_LIGHT", kHatchLight);
    replace("ALLOWED", kAllowed);
    replace("VIRIDIS", gradient_stops(Palette::viridis, false));
    replace("BLUE_RED", gradient_stops(Palette::blue_red, false));
    // One class per colour level, with the text colour that reads on it.
    for (const Palette p : {Palette::viridis, Palette::blue_red})
        for (int level = 0; level < kLevels; ++level) {
            const double t = double(level) / double(kLevels - 1);
            const Rgb c = colour::at(p, t);
            css += "." + colour_class(p, t) + "{background:" + hex(c) + ";color:" + (dark(c) ? "#fff" : "#111") + "}\n";
        }
    return css;
}

void write_header(std::ostream& out, const TraceView& v, const std::vector<std::string>& stages) {
    const Dims& d = v.dims;
    out << "<header>\n<h1>attnscope: " << (v.cross ? "cross-attention" : "self-attention") << ", " << d.H
        << (d.H == 1 ? " head" : " heads") << "</h1>\n<table class=\"config\">\n";
    const auto row = [&out](const char* key, const std::string& html) {
        out << "<tr><th>" << key << "</th><td>" << html << "</td></tr>\n";
    };
    row("source", escape(v.source));
    row("mode", v.cross ? "cross-attention: queries from x, keys and values from memory"
                        : "self-attention: queries, keys and values from x");
    row("sizes", escape(text::dims_line(d)) + (v.batched ? "" : " (2-D x: no batch axis in the results)"));
    row("scale", readable(v.scale, "%.6g") + " = " + escape(v.scale_source));
    row("masks", escape(text::masks_line(v)));
    if (d.G && d.G != d.H) row("K/V heads", escape(text::sharing_line(d)));
    if (v.spec.rope)
        row("RoPE",
            escape(std::string(v.spec.rope->style == RopeStyle::half ? "pairs (j, j + R/2)" : "pairs (2j, 2j + 1)") +
                   " of the first R = " + std::to_string(v.spec.rope->dim.value_or(d.Dk)) + " features, base " +
                   text::option_num(v.spec.rope->base)));
    row("dtype", escape(v.dtype));
    std::string rows;
    for (const auto& r : v.fully_masked) {
        rows += (rows.empty() ? "" : ", ") + (v.batched ? "batch " + std::to_string(r.batch) + " " : std::string()) +
                "query " + std::to_string(r.query);
        if (r.batch < v.query_tokens.size() && r.query < v.query_tokens[r.batch].size())
            rows += " ‘" + escape(text::axis_label(v, "Tq", r.batch, r.query)) + "’";
    }
    row("rows with every key masked", rows.empty() ? "none" : rows + " (their weights are all 0)");
    for (const auto& w : v.warnings) row("warning", escape(w));
    out << "</table>\n<p class=\"howto\">Rows are queries, columns keys (or features d0, d1, …). "
           "Hover over a cell for its exact value. Scores and weights use viridis (dark = low, yellow = high; "
           "weights always on 0…1); Q, K, V, context and output use blue (negative), white (0), red (positive). "
           "<span class=\"swatch masked\"></span> hatched grey: masked — the query may not see that key "
           "(score −∞, weight exactly 0).";
    const text::Variants r = text::variants_of(v);
    if (r.bias)
        out << " The bias (added to the scores) uses blue (negative), white (0), red (positive); a −∞ bias hides its "
               "key like a mask.";
    if (r.sinks)
        out << " sink_weight: rows are heads, columns queries; each cell is the share of that row of weights taken "
               "by the head's sink (0…1), so the row's weights sum to 1 − sink_weight.";
    if (r.rope) out << " Q_rot and K_rot: Q and K with their RoPE pairs turned by position.";
    out << "</p>\n<nav>stages:";
    for (const auto& name : stages) out << " <a href=\"#stage-" << escape(name) << "\">" << escape(name) << "</a>";
    out << "</nav>\n</header>\n";
}

// The legend under one table: the palette with its ends and middle, and the masked swatch.
void write_legend(std::ostream& out, ColorKind kind, const ColourScale& sc, bool any_masked) {
    out << "<div class=\"legend\">";
    if (kind == ColorKind::boolean) {
        out << "<span class=\"swatch ok\"></span> ✓ may attend";
    } else {
        out << "<div class=\"scale\"><div class=\"bar " << (sc.palette == Palette::viridis ? "viridis" : "blue_red")
            << "\"></div><div class=\"ticks\">";
        for (double t : sc.end_ticks()) out << "<span>" << tick_text(t) << "</span>";
        out << "</div></div>";
    }
    if (any_masked) out << " <span class=\"swatch masked\"></span> masked";
    out << "</div>\n";
}

// A range of an axis for the elision note: "rows 0–31 and 4064–4095 of 4096".
std::string elided(const char* what, std::size_t n) {
    const std::size_t half = kMaxAxis / 2;
    return std::string(what) + " 0–" + std::to_string(half - 1) + " and " + std::to_string(n - half) + "–" +
           std::to_string(n - 1) + " of " + std::to_string(n);
}

// A label cell of an HTML table: the clipped label, the whole one as its title when clipped.
void write_label(std::ostream& out, const std::string& full, std::size_t i, const char* cls) {
    const std::string shown_text = clip(full);
    out << "<th class=\"" << cls << "\" scope=\"" << cls << "\" data-index=\"" << i << "\"";
    if (shown_text != full) out << " title=\"" << escape(full) << "\"";
    out << ">" << escape(shown_text) << "</th>";
}

// The opening of a table: the corner and the column labels.
void write_table_head(std::ostream& out, const TraceView& v, const Matrix& m, const std::vector<std::size_t>& ci,
                      bool numbers) {
    out << "<table class=\"heat" << (numbers ? "" : " dense") << "\" data-stage=\"" << escape(m.stage->name)
        << "\" data-batch=\"" << m.batch << "\" data-head=\"" << (m.has_heads ? std::to_string(m.head) : "")
        << "\">\n<thead><tr><th class=\"corner\">" << escape(m.row_axis()) << " ↓ " << escape(m.col_axis())
        << " →</th>";
    for (std::size_t j : ci) {
        if (j == text::kGap)
            out << "<th class=\"gap\">…</th>";
        else
            write_label(out, text::axis_label(v, m.col_axis(), m.batch, j), j, "col");
    }
    out << "</tr></thead>\n<tbody>\n";
}

// Row i of a table: its label and its cells (classes for colour, the exact value as the
// title, the rounded number when `numbers`). Returns whether a cell of it is masked.
bool write_table_row(std::ostream& out, const TraceView& v, const Matrix& m, const ColourScale& sc,
                     const std::vector<char>& seen, std::size_t i, const std::vector<std::size_t>& ci, bool numbers) {
    const ColorKind kind = kind_of(*m.stage);
    bool any_masked = false;
    out << "<tr data-index=\"" << i << "\">";
    write_label(out, text::axis_label(v, m.row_axis(), m.batch, i), i, "row");
    for (std::size_t j : ci) {
        if (j == text::kGap) {
            out << "<td class=\"gap\">…</td>";
            continue;
        }
        const Cell c = cell_of(m, kind, sc, seen, i, j);
        any_masked = any_masked || c.masked;
        const std::string cls = c.masked                     ? "masked"
                                : kind == ColorKind::boolean ? "ok"
                                : c.nan                      ? "nan"
                                                             : colour_class(sc.palette, c.position);
        const std::string exact = m.exact(i, j);
        out << "<td class=\"" << cls << "\" title=\"" << exact << (c.masked ? " (masked)" : "") << "\" data-value=\""
            << exact << "\">";
        if (numbers) out << c.text;
        out << "</td>";
    }
    out << "</tr>\n";
    return any_masked;
}

// One matrix as a <figure> holding a caption, a <table class="heat"> and its legend.
void write_table(std::ostream& out, const TraceView& v, const Matrix& m, const std::vector<char>& seen) {
    const ColorKind kind = kind_of(*m.stage);
    const ColourScale sc = scale_of(m, kind);
    const auto ri = text::shown(m.rows, kMaxAxis, kMaxAxis / 2), ci = text::shown(m.cols, kMaxAxis, kMaxAxis / 2);
    const bool numbers = ci.size() <= kNumberCols;
    // 1) Caption and column labels.
    const std::string title = matrix_title(v, m);
    out << "<figure>\n";
    if (!title.empty()) out << "<figcaption>" << title << "</figcaption>\n";
    write_table_head(out, v, m, ci, numbers);
    // 2) A row per query (or feature) shown; a row of gaps where rows are elided.
    bool any_masked = false;
    for (std::size_t i : ri) {
        if (i == text::kGap) {
            out << "<tr class=\"gap\"><th class=\"gap\">⋮</th>";
            for (std::size_t j : ci) out << "<td class=\"gap\">" << (j == text::kGap ? "⋱" : "⋮") << "</td>";
            out << "</tr>\n";
            continue;
        }
        any_masked = write_table_row(out, v, m, sc, seen, i, ci, numbers) || any_masked;
    }
    out << "</tbody>\n</table>\n";
    // 3) Legend, and what was elided.
    write_legend(out, kind, sc, any_masked);
    if (ri.size() != m.rows || ci.size() != m.cols) {
        std::string note = "Showing ";
        if (ri.size() != m.rows) note += elided("rows", m.rows);
        if (ri.size() != m.rows && ci.size() != m.cols) note += "; ";
        if (ci.size() != m.cols) note += elided("columns", m.cols);
        out << "<p class=\"note\">" << note << ". The rest are elided to keep the page small.</p>\n";
    }
    out << "</figure>\n";
}

// The chosen batch items and heads of a stage, within a budget of drawn cells.
void write_stage(std::ostream& out, const TraceView& v, const StageView& s, std::size_t budget,
                 const std::vector<std::size_t>& batches, const std::vector<std::size_t>& heads) {
    out << "<section id=\"stage-" << escape(s.name) << "\">\n<h2>" << escape(s.name) << "<span class=\"shape\">"
        << escape(text::shape_text(s)) << "</span></h2>\n<p class=\"formula\">" << escape(s.name) << " = "
        << escape(s.formula) << "</p>\n";
    out << "<div class=\"figs\">\n";
    std::size_t drawn = 0, left_out = 0;
    std::string first_left_out;
    const bool gqa = v.dims.G && v.dims.G != v.dims.H;
    for (std::size_t b : text::chosen_or_all(batches, v.dims.B)) {
        for (const text::MatrixRef& ref :
             text::matrices_of(v, s, {b}, text::chosen_or_all(heads, v.dims.H), 8, " · ")) {
            Matrix m = matrix_of(s, b, ref.head);
            m.offset = ref.offset;
            m.title = ref.title;
            // Grouped-query attention: a query head's matrix says which K/V head it reads.
            if (gqa && m.has_heads && std::find(s.axes.begin(), s.axes.end(), "H") != s.axes.end())
                m.title += " (reads K/V head " + std::to_string(v.dims.kv_head(ref.head)) + ")";
            const std::vector<char> seen = visibility(v, s, b, ref.head);
            const std::size_t cells =
                text::shown(m.rows, kMaxAxis, kMaxAxis / 2).size() * text::shown(m.cols, kMaxAxis, kMaxAxis / 2).size();
            if (drawn > 0 && drawn + cells > budget) {
                if (left_out++ == 0) first_left_out = matrix_title(v, m);
                continue;
            }
            drawn += cells;
            write_table(out, v, m, seen);
        }
    }
    out << "</div>\n";
    if (left_out > 0)
        out << "<p class=\"note\">" << left_out << " more table" << (left_out > 1 ? "s" : "") << " of "
            << escape(s.name) << " (from " << first_left_out
            << " on) left out to keep the page small: choose fewer stages, "
            << "batch items or heads with --stages, --batch or --head to see more.</p>\n";
    out << "</section>\n";
}

// ---------------------------------------------------------------------------
// SVG
// ---------------------------------------------------------------------------

// A coordinate: at most one decimal, no trailing ".0".
std::string px(double x) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f", x);
    std::string t = buf;
    if (t.size() > 2 && t.compare(t.size() - 2, 2, ".0") == 0) t.resize(t.size() - 2);
    return t == "-0" ? "0" : t;
}

constexpr std::size_t kSvgNumbers = 12;   // a matrix this small shows its numbers
constexpr std::size_t kSvgHover = 4096;   // a matrix this small has a hover title per cell
constexpr std::size_t kSvgMaxAxis = 256;  // cells drawn along one axis (the ends of a longer one)

// SVG sizes in pixels: the margin, the fonts of title, formula, axis titles and ticks,
// and the factor of a column label's length that rises above the grid (turned 45°).
constexpr double kSvgMargin = 20, kTitleFont = 24, kSubFont = 15, kAxisFont = 16, kTickFont = 15;
constexpr double kDiag = 0.7071;
constexpr double kBarW = 20;  // legend bar width

// One matrix laid out as an SVG figure: what is drawn, and where.
struct SvgFigure {
    const StageView* stage = nullptr;
    Matrix m;
    ColorKind kind = ColorKind::sequential;
    ColourScale sc;
    // The rows and columns drawn (a long axis keeps its ends around a gap), by position.
    std::vector<std::size_t> ri, ci;
    std::size_t R = 0, C = 0;
    bool numbers = false, hover = false;  // numbers in the cells, a hover title per cell
    double cell = 0, label_font = 0, number_font = 0;
    std::size_t step = 1;  // every step-th label is written
    std::vector<std::string> row_labels, col_labels;
    double row_w = 0, col_w = 0;  // the widest row and column label written
    std::vector<Cell> cells;      // R x C, row-major; blank at a gap
    bool any_masked = false;
    std::string title, note;  // note: what was elided, under the grid
    std::vector<double> ticks;
    double grid_x = 0, grid_y = 0, grid_w = 0, grid_h = 0, legend_x = 0, bar_h = 0, width = 0, height = 0;
};

// The labels along an axis at the positions drawn, and the width of the widest one written.
std::vector<std::string> svg_labels(const TraceView& v, const SvgFigure& f, const std::vector<std::size_t>& idx,
                                    const std::string& axis, double& widest) {
    std::vector<std::string> labels(idx.size());
    for (std::size_t p = 0; p < idx.size(); ++p) {
        labels[p] = idx[p] == text::kGap ? "…" : clip(text::axis_label(v, axis, f.m.batch, idx[p]));
        if (p % f.step == 0) widest = std::max(widest, text_width(labels[p], f.label_font));
    }
    return labels;
}

// The cells drawn, whether any is masked, and the font of their numbers (the longest must fit).
void svg_cells(SvgFigure& f, const std::vector<char>& seen) {
    f.cells.assign(f.R * f.C, Cell());
    double widest = 0;  // the longest number, for the number font
    for (std::size_t p = 0; p < f.R; ++p)
        for (std::size_t q = 0; q < f.C; ++q) {
            if (f.ri[p] == text::kGap || f.ci[q] == text::kGap) continue;
            Cell& c = f.cells[p * f.C + q] = cell_of(f.m, f.kind, f.sc, seen, f.ri[p], f.ci[q]);
            f.any_masked = f.any_masked || c.masked;
            if (f.numbers && !c.masked) widest = std::max(widest, text_width(c.text, 1.0));
        }
    f.number_font = std::min({18.0, f.cell * 0.32, widest > 0 ? f.cell * 0.86 / widest : 18.0});
}

// "not drawn: rows 128–3967, columns ... (of 4096 × 4096)", or "" when all is drawn.
std::string svg_note(const SvgFigure& f) {
    std::string note;
    if (f.R != f.m.rows)
        note += "rows " + std::to_string(kSvgMaxAxis / 2) + "–" + std::to_string(f.m.rows - kSvgMaxAxis / 2 - 1);
    if (f.C != f.m.cols)
        note += (note.empty() ? "" : ", ") + std::string("columns ") + std::to_string(kSvgMaxAxis / 2) + "–" +
                std::to_string(f.m.cols - kSvgMaxAxis / 2 - 1);
    if (!note.empty())
        note = "not drawn: " + note + " (of " + std::to_string(f.m.rows) + " × " + std::to_string(f.m.cols) + ")";
    return note;
}

// Where the grid and legend sit, and the size of the whole figure.
void svg_geometry(SvgFigure& f) {
    f.grid_x = kSvgMargin + kAxisFont * 1.6 + f.row_w + 10;
    f.grid_y = kSvgMargin + kTitleFont + kSubFont + 26 + kAxisFont * 1.6 + f.col_w * kDiag + f.label_font + 8;
    f.grid_w = f.cell * double(f.C), f.grid_h = f.cell * double(f.R);
    const double grid_bottom = f.grid_y + f.grid_h + (f.note.empty() ? 0 : 12 + kTickFont);
    f.legend_x = f.grid_x + f.grid_w + 36, f.bar_h = std::max(f.grid_h, 180.0);
    double tick_w = 0;
    f.ticks = f.sc.ticks();
    for (double t : f.ticks) tick_w = std::max(tick_w, text_width(tick_text(t), kTickFont));
    const double legend_w = f.kind == ColorKind::boolean
                                ? kBarW + 8 + text_width("may attend", kTickFont)
                                : kBarW + 10 + std::max(tick_w, text_width("masked", kTickFont) - 10);
    f.width = std::ceil(std::max({f.legend_x + legend_w + kSvgMargin,
                                  f.grid_x + f.grid_w - f.cell / 2 + f.col_w * kDiag + f.label_font + kSvgMargin,
                                  kSvgMargin * 2 + text_width(f.title, kTitleFont) * 0.95,
                                  kSvgMargin * 2 + text_width(f.stage->formula, kSubFont),
                                  f.grid_x + text_width(f.note, kTickFont) + kSvgMargin}));
    const double legend_bottom = f.grid_y + (f.kind == ColorKind::boolean ? 60 : f.bar_h + (f.any_masked ? 44 : 0));
    f.height = std::ceil(std::max(grid_bottom, legend_bottom) + kSvgMargin);
}

// Matrix (batch, head) of stage s laid out: cells, labels, fonts, geometry.
SvgFigure svg_figure(const TraceView& v, const StageView& s, std::size_t batch, std::size_t head) {
    SvgFigure f;
    f.stage = &s;
    f.m = matrix_of(s, batch, head);
    f.kind = kind_of(s);
    f.sc = scale_of(f.m, f.kind);
    // 1) The rows and columns drawn, and whether their numbers and hover titles are.
    f.ri = text::shown(f.m.rows, kSvgMaxAxis, kSvgMaxAxis / 2),
    f.ci = text::shown(f.m.cols, kSvgMaxAxis, kSvgMaxAxis / 2);
    f.R = f.ri.size(), f.C = f.ci.size();
    f.numbers = f.R <= kSvgNumbers && f.C <= kSvgNumbers, f.hover = f.R * f.C <= kSvgHover;
    // 2) Cell and label sizes. The grid is about 500 px on its long side (cells of 2 to 64
    // px); labels and numbers scale with the cells, between sizes still readable on a
    // slide, and when the cells are smaller than the labels only every step-th is written.
    f.cell = std::clamp(std::floor(500.0 / double(std::max({f.R, f.C, std::size_t{1}}))), 2.0, 64.0);
    f.label_font = std::clamp(f.cell * 0.45, 11.0, 18.0);
    f.step = static_cast<std::size_t>(std::ceil(f.label_font * 1.15 / f.cell));
    f.row_labels = svg_labels(v, f, f.ri, f.m.row_axis(), f.row_w);
    f.col_labels = svg_labels(v, f, f.ci, f.m.col_axis(), f.col_w);
    // 3) The cells, the title and the note, then where everything goes.
    svg_cells(f, visibility(v, s, batch, head));
    f.title = s.name + (matrix_title(v, f.m).empty() ? "" : " · " + matrix_title(v, f.m));
    f.note = svg_note(f);
    svg_geometry(f);
    return f;
}

// The XML prolog, the <svg> element, the hatch pattern and the palette gradient.
void write_svg_head(std::ostream& out, const SvgFigure& f) {
    out << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
        << "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"" << px(f.width) << "\" height=\""
        << px(f.height) << "\" viewBox=\"0 0 " << px(f.width) << " " << px(f.height)
        << "\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n"
        << "<title>" << escape(f.title) << "</title>\n<defs>\n"
        << "<pattern id=\"masked\" patternUnits=\"userSpaceOnUse\" width=\"7\" height=\"7\" "
           "patternTransform=\"rotate(45)\"><rect width=\"7\" height=\"7\" fill=\""
        << kHatchLight << "\"/><rect width=\"2.5\" height=\"7\" fill=\"" << kHatchDark << "\"/></pattern>\n";
    if (f.kind != ColorKind::boolean)
        out << "<linearGradient id=\"palette\" x1=\"0\" y1=\"1\" x2=\"0\" y2=\"0\">"
            << gradient_stops(f.sc.palette, true) << "</linearGradient>\n";
    out << "</defs>\n<rect width=\"100%\" height=\"100%\" fill=\"#fff\"/>\n";
}

// The title and formula, the axis titles, and the token labels.
void write_svg_titles(std::ostream& out, const SvgFigure& f) {
    // 1) Title: stage, batch item, head; the formula beneath.
    out << "<text x=\"" << px(kSvgMargin) << "\" y=\"" << px(kSvgMargin + kTitleFont) << "\" font-size=\""
        << px(kTitleFont) << "\" font-weight=\"bold\" fill=\"#111\">" << escape(f.title) << "</text>\n"
        << "<text x=\"" << px(kSvgMargin) << "\" y=\"" << px(kSvgMargin + kTitleFont + kSubFont + 10)
        << "\" font-size=\"" << px(kSubFont) << "\" fill=\"#555\">" << escape(f.stage->formula) << "</text>\n";

    // 2) Axis titles: keys across the top, queries (or features) down the left.
    out << "<text x=\"" << px(f.grid_x + f.grid_w / 2) << "\" y=\""
        << px(f.grid_y - f.col_w * kDiag - f.label_font - 12) << "\" font-size=\"" << px(kAxisFont)
        << "\" fill=\"#444\" text-anchor=\"middle\">" << escape(axis_title(f.m.col_axis()))
        << "</text>\n<text transform=\"translate(" << px(kSvgMargin + kAxisFont) << "," << px(f.grid_y + f.grid_h / 2)
        << ") rotate(-90)\" font-size=\"" << px(kAxisFont) << "\" fill=\"#444\" text-anchor=\"middle\">"
        << escape(axis_title(f.m.row_axis())) << "</text>\n";

    // 3) Token labels: rows right-aligned at the left, columns turned 45° above.
    out << "<g font-size=\"" << px(f.label_font) << "\" fill=\"#222\">\n";
    for (std::size_t p = 0; p < f.R; p += f.step)
        out << "<text x=\"" << px(f.grid_x - 8) << "\" y=\"" << px(f.grid_y + f.cell * (double(p) + 0.5))
            << "\" dy=\"0.35em\" text-anchor=\"end\">" << escape(f.row_labels[p]) << "</text>\n";
    for (std::size_t q = 0; q < f.C; q += f.step)
        out << "<text transform=\"translate(" << px(f.grid_x + f.cell * (double(q) + 0.5)) << "," << px(f.grid_y - 8)
            << ") rotate(-45)\" dy=\"0.35em\">" << escape(f.col_labels[q]) << "</text>\n";
    out << "</g>\n";
}

// Cell (p, q) of the figure: colour, hatch when masked, the rounded number when small,
// the exact number on hover.
void write_svg_cell(std::ostream& out, const SvgFigure& f, std::size_t p, std::size_t q) {
    const std::size_t i = f.ri[p], j = f.ci[q];
    const Cell& c = f.cells[p * f.C + q];
    const bool boolean = f.kind == ColorKind::boolean;
    const std::string fill = c.masked  ? "url(#masked)"
                             : boolean ? std::string(kAllowed)
                             : c.nan   ? "#fff"
                                       : hex(colour::at(f.sc.palette, c.position));
    const double x = f.grid_x + f.cell * double(q), y = f.grid_y + f.cell * double(p);
    if (f.hover)
        out << "<g class=\"cell" << (c.masked ? " masked" : "") << "\" data-value=\"" << f.m.exact(i, j) << "\"><title>"
            << escape(f.row_labels[p]) << " → " << escape(f.col_labels[q]) << ": " << f.m.exact(i, j)
            << (c.masked ? " (masked)" : "") << "</title>";
    out << "<rect x=\"" << px(x) << "\" y=\"" << px(y) << "\" width=\"" << px(f.cell) << "\" height=\"" << px(f.cell)
        << "\" fill=\"" << fill << "\"/>";
    const bool mark = boolean && !c.masked;  // ✓ on a visible key of the mask
    if ((f.numbers && !c.masked) || (mark && f.cell >= 12)) {
        const bool white = boolean || (!c.nan && dark(colour::at(f.sc.palette, c.position)));
        out << "<text x=\"" << px(x + f.cell / 2) << "\" y=\"" << px(y + f.cell / 2)
            << "\" dy=\"0.35em\" text-anchor=\"middle\" stroke=\"none\" font-size=\""
            << px(mark ? std::min(f.cell * 0.5, 22.0) : f.number_font) << "\" fill=\""
            << (c.nan   ? "#b00020"
                : white ? "#fff"
                        : "#111")
            << "\">" << c.text << "</text>";
    }
    out << (f.hover ? "</g>\n" : "\n");
}

// The grid of cells (an elided row or column stays blank), and the note under it.
void write_svg_grid(std::ostream& out, const SvgFigure& f) {
    const bool gridlines = f.cell >= 12;
    // Small cells: no grid lines, and crisp edges so that no seams show between them.
    out << "<g" << (gridlines ? " stroke=\"#fff\" stroke-width=\"1\"" : " shape-rendering=\"crispEdges\"") << ">\n";
    for (std::size_t p = 0; p < f.R; ++p)
        for (std::size_t q = 0; q < f.C; ++q)
            if (f.ri[p] != text::kGap && f.ci[q] != text::kGap) write_svg_cell(out, f, p, q);
    out << "</g>\n";
    if (!f.note.empty())
        out << "<text x=\"" << px(f.grid_x) << "\" y=\"" << px(f.grid_y + f.grid_h + 8 + kTickFont) << "\" font-size=\""
            << px(kTickFont) << "\" fill=\"#555\">" << escape(f.note) << "</text>\n";
}

// The legend: the palette with numbers (or the mask's two kinds of cell), then the hatch.
void write_svg_legend(std::ostream& out, const SvgFigure& f) {
    out << "<g font-size=\"" << px(kTickFont) << "\" fill=\"#222\">\n";
    double swatch_y = f.grid_y + f.bar_h + 24;
    if (f.kind == ColorKind::boolean) {
        out << "<rect x=\"" << px(f.legend_x) << "\" y=\"" << px(f.grid_y) << "\" width=\"" << px(kBarW)
            << "\" height=\"" << px(kBarW) << "\" fill=\"" << kAllowed << "\" stroke=\"#999\"/>"
            << "<text x=\"" << px(f.legend_x + kBarW + 8) << "\" y=\"" << px(f.grid_y + kBarW / 2)
            << "\" dy=\"0.35em\">may attend</text>\n";
        swatch_y = f.grid_y + kBarW + 12;
    } else {
        out << "<rect x=\"" << px(f.legend_x) << "\" y=\"" << px(f.grid_y) << "\" width=\"" << px(kBarW)
            << "\" height=\"" << px(f.bar_h) << "\" fill=\"url(#palette)\" stroke=\"#999\"/>\n";
        for (double t : f.ticks) {
            const double y = f.grid_y + f.bar_h * (1 - f.sc.position(t));
            out << "<line x1=\"" << px(f.legend_x + kBarW) << "\" y1=\"" << px(y) << "\" x2=\""
                << px(f.legend_x + kBarW + 5) << "\" y2=\"" << px(y) << "\" stroke=\"#555\"/>"
                << "<text x=\"" << px(f.legend_x + kBarW + 8) << "\" y=\"" << px(y) << "\" dy=\"0.35em\">"
                << tick_text(t) << "</text>\n";
        }
    }
    if (f.any_masked)
        out << "<rect x=\"" << px(f.legend_x) << "\" y=\"" << px(swatch_y) << "\" width=\"" << px(kBarW)
            << "\" height=\"" << px(kBarW) << "\" fill=\"url(#masked)\" stroke=\"#999\"/>"
            << "<text x=\"" << px(f.legend_x + kBarW + 8) << "\" y=\"" << px(swatch_y + kBarW / 2)
            << "\" dy=\"0.35em\">masked</text>\n";
    out << "</g>\n";
}

}  // namespace

void write_html(std::ostream& out, const TraceView& v, const std::vector<std::string>& stages,
                const std::vector<std::size_t>& batches, const std::vector<std::size_t>& heads) {
    for (const auto& name : stages)
        if (!v.find(name)) throw UsageError("{html}: stage " + name + " was not computed (see {stages})");
    TextOptions chosen;
    chosen.batches = batches;
    chosen.heads = heads;
    check_selection(chosen, v.dims);
    out << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        << "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
        << "<title>attnscope: " << escape(v.source) << "</title>\n<style>\n"
        << style_sheet() << "</style>\n</head>\n<body>\n";
    write_header(out, v, stages);
    const std::size_t budget = kPageCells / std::max<std::size_t>(stages.size(), 1);
    for (const auto& name : stages) write_stage(out, v, *v.find(name), budget, batches, heads);
    out << "</body>\n</html>\n";
}

void write_svg(std::ostream& out, const TraceView& v, const std::string& stage, std::size_t batch, std::size_t head) {
    TextOptions chosen;
    chosen.batches = {batch};
    chosen.heads = {head};
    check_selection(chosen, v.dims);
    const StageView* s = v.find(stage);
    if (!s) throw UsageError("{svg_stage} " + stage + ": stage was not computed (add it to {stages})");
    const SvgFigure f = svg_figure(v, *s, batch, head);
    write_svg_head(out, f);
    write_svg_titles(out, f);
    write_svg_grid(out, f);
    write_svg_legend(out, f);
    out << "</svg>\n";
}

}  // namespace attnscope
