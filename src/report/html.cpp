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
#include <cstdlib>
#include <cstring>
#include <limits>
#include <ostream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "attnscope/base/errors.hpp"
#include "attnscope/base/json_writer.hpp"
#include "attnscope/base/text.hpp"
#include "attnscope/report/report.hpp"
#include "colour.hpp"
#include "html_page_css.hpp"  // generated from html_page.css (CMakeLists.txt)
#include "html_page_js.hpp"   // generated from html_page.js
#include "scale.hpp"
#include "text_util.hpp"

namespace attnscope {
namespace {

// ---------------------------------------------------------------------------
// Text: escaping, labels, widths
// ---------------------------------------------------------------------------

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

// Where a matrix's values sit on its palette (the one rule of scale.hpp), and the
// numbers its legend shows.
struct ColourScale {
    scale::Scale rule;
    Palette palette = Palette::viridis;
    double lo = 0, hi = 1;

    ColourScale() = default;
    explicit ColourScale(const scale::Scale& s) : rule(s), palette(s.palette), lo(s.lo), hi(s.hi) {}
    double position(double x) const { return rule.position(x); }
    // The numbers under an HTML legend, spaced evenly: the ends, and 0 in the middle
    // of a diverging scale (or 0.5 for weights).
    std::vector<double> end_ticks() const {
        if (!(hi > lo)) return {lo};
        if (rule.log) return {lo, hi};
        if (palette == Palette::blue_red || (lo == 0 && hi == 1)) return {lo, (lo + hi) / 2, hi};
        return {lo, hi};
    }
    // The numbers beside an SVG legend: the ends and the round numbers (1, 2 or 5 times a
    // power of ten apart) between them that are not too close to an end.
    std::vector<double> ticks() const {
        if (!(hi > lo) || !std::isfinite(hi - lo) || rule.log) return end_ticks();
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

// Whether the stage marks masked cells: the mask itself, and the stages after it.
bool shows_mask(const StageView& s) {
    switch (s.id) {
        case kMask:
        case kMaskedScores:
        case kWeights:
            return true;
        case kQ:
        case kK:
        case kV:
        case kQRot:
        case kKRot:
        case kScores:
        case kBias:
        case kSinkWeight:
        case kContext:
        case kHeadOutput:
        case kOutput:
        case kStageCount:
            return false;
    }
    return false;
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
    c.position = sc.rule.per_row
                     ? scale::for_values(sc.rule, m.cols, [&](std::size_t k) { return m.at(i, k); }).position(x)
                     : sc.position(x);
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

// A matrix of at most kTableRows x kTableCols is a table with its numbers in the cells
// (readable, and its values are in the page without a script); a bigger one a canvas.
constexpr std::size_t kTableRows = 64, kTableCols = 16;
constexpr int kLevels = 64;                // colour classes per palette (tables)
constexpr int kCanvasLevels = 252;         // palette levels of a canvas cell (0..251)
constexpr std::size_t kHeadViewMax = 160;  // the head view draws inputs of up to this many tokens

// Colour class of a palette position: "v0".."v63" (viridis) or "r0".."r63" (blue-red).
std::string colour_class(Palette p, double t) {
    const long level = std::lround(std::clamp(t, 0.0, 1.0) * (kLevels - 1));
    return (p == Palette::viridis ? "v" : "r") + std::to_string(level);
}

// The page's style sheet (src/report/html_page.css, embedded at build time), its
// HATCH_DARK, HATCH_LIGHT, ALLOWED, VIRIDIS and BLUE_RED filled in.
std::string style_sheet() {
    std::string css = html_detail::kStyle;
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
    if (!v.spec.bundle_options.empty()) row("config", escape(text::bundle_options_line(v.spec.bundle_options)));
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
           "Hover over a cell for its value, its batch item, head, query and key tokens, and the same cell in "
           "every (query, key) stage; big matrices are drawn on a canvas with every cell (zoom with the buttons "
           "or ctrl + wheel, scroll to move). Colours: one scale per stage, the same for every head drawn "
           "(scores and masked_scores share theirs), stated under each legend. Scores and weights use viridis "
           "(dark = low, yellow = high; weights on 0…1 unless --range or --log-scale says otherwise); Q, K, V, "
           "context and output use blue (negative), white (0), red (positive). "
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
    if (kind != ColorKind::boolean) out << " <span class=\"rule\">colours: " << escape(sc.rule.rule) << "</span>";
    out << "</div>\n";
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

// What a tooltip says besides the value: the batch item, head, query and key (their
// tokens), and the cell's value in every (query, key) stage the run kept.
std::string cell_context(const TraceView& v, const Matrix& m, std::size_t i, std::size_t j) {
    const std::string where = text::matrix_title(v, *m.stage, m.batch, m.head, " · ");
    const auto axis = [](const std::string& a) { return a == "Tq" ? "query" : a == "Tk" ? "key" : a; };
    std::string t = (where.empty() ? "" : where + " · ") + axis(m.row_axis()) + " " + std::to_string(i) + " ‘" +
                    text::axis_label(v, m.row_axis(), m.batch, i) + "’ → " + axis(m.col_axis()) + " " +
                    std::to_string(j) + " ‘" + text::axis_label(v, m.col_axis(), m.batch, j) + "’";
    if (!stage_info(m.stage->id).over_keys()) return t;
    std::string values;
    for (const Stage id : {kScores, kBias, kMaskedScores, kWeights}) {
        const StageView* o = v.find(id);
        if (!o) continue;
        const std::size_t k = matrix_offset(*o, m.batch, m.head) + i * o->shape.back() + j;
        values += (values.empty() ? "" : " · ") + o->name + " " + exact_number(*o, k);
    }
    return t + "\n" + values;
}

// Row i of a table: its label and its cells (classes for colour, the exact value and the
// cell's context as the title, the rounded number). Returns whether a cell of it is masked.
bool write_table_row(std::ostream& out, const TraceView& v, const Matrix& m, const ColourScale& sc,
                     const std::vector<char>& seen, std::size_t i) {
    const ColorKind kind = kind_of(*m.stage);
    bool any_masked = false;
    out << "<tr data-index=\"" << i << "\">";
    write_label(out, text::axis_label(v, m.row_axis(), m.batch, i), i, "row");
    for (std::size_t j = 0; j < m.cols; ++j) {
        const Cell c = cell_of(m, kind, sc, seen, i, j);
        any_masked = any_masked || c.masked;
        const std::string cls = c.masked                     ? "masked"
                                : kind == ColorKind::boolean ? "ok"
                                : c.nan                      ? "nan"
                                                             : colour_class(sc.palette, c.position);
        const std::string exact = m.exact(i, j);
        out << "<td class=\"" << cls << "\" title=\"" << exact << (c.masked ? " (masked)" : "") << "&#10;"
            << escape(cell_context(v, m, i, j)) << "\" data-value=\"" << exact << "\">" << c.text << "</td>";
    }
    out << "</tr>\n";
    return any_masked;
}

// One small matrix as a <figure> holding a caption, a <table class="heat"> with every
// cell and its number, and its legend.
void write_table(std::ostream& out, const TraceView& v, const Matrix& m, const std::vector<char>& seen,
                 const ColourScale& sc) {
    const ColorKind kind = kind_of(*m.stage);
    const std::string title = matrix_title(v, m);
    out << "<figure>\n";
    if (!title.empty()) out << "<figcaption>" << title << "</figcaption>\n";
    std::vector<std::size_t> ci(m.cols);
    for (std::size_t j = 0; j < m.cols; ++j) ci[j] = j;
    write_table_head(out, v, m, ci, true);
    bool any_masked = false;
    for (std::size_t i = 0; i < m.rows; ++i) any_masked = write_table_row(out, v, m, sc, seen, i) || any_masked;
    out << "</tbody>\n</table>\n";
    write_legend(out, kind, sc, any_masked);
    out << "</figure>\n";
}

// `n` bytes as base64 (RFC 4648, with padding).
std::string base64(const unsigned char* p, std::size_t n) {
    static const char* const kDigits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string r;
    r.reserve((n + 2) / 3 * 4);
    for (std::size_t k = 0; k < n; k += 3) {
        const unsigned a = p[k], b = k + 1 < n ? p[k + 1] : 0, c = k + 2 < n ? p[k + 2] : 0;
        const unsigned w = (a << 16) | (b << 8) | c;
        r += kDigits[(w >> 18) & 63];
        r += kDigits[(w >> 12) & 63];
        r += k + 1 < n ? kDigits[(w >> 6) & 63] : '=';
        r += k + 2 < n ? kDigits[w & 63] : '=';
    }
    return r;
}

// A JSON writer for a <script type="application/json"> element: no "</script" in its strings.
JsonWriter script_json(std::ostream& out) { return JsonWriter(out, {.indent = 0, .in_script = true}); }

// Indices of a canvas axis, -1 for the gap.
void put_indices(JsonWriter& w, const std::vector<std::size_t>& idx) {
    w.begin_array();
    for (std::size_t i : idx) i == text::kGap ? w.value(-1) : w.value(i);
    w.end_array();
}

// Level of a canvas cell (html_page.js): 0..251 on the palette, 252 a gap, 253 a
// visible key of the mask, 254 masked, 255 NaN.
unsigned char canvas_level(const Cell& c, ColorKind kind) {
    if (c.masked) return 254;
    if (kind == ColorKind::boolean) return 253;
    if (c.nan) return 255;
    return static_cast<unsigned char>(std::lround(std::clamp(c.position, 0.0, 1.0) * (kCanvasLevels - 1)));
}

// The rows and columns a canvas draws: all, or (unless --full) the ends of an axis longer
// than kHtmlMaxAxis around a gap.
std::vector<std::size_t> canvas_axis(std::size_t n, bool full) {
    return text::shown(n, full ? n : kHtmlMaxAxis, kHtmlMaxAxis / 2);
}

// A matrix's data for the script: sizes, labels, levels and values (float32, or float64
// when the run is float64 and the matrix has at most 2^20 cells drawn: exact then).
void write_canvas_data(std::ostream& out, const TraceView& v, const Matrix& m, const ColourScale& sc,
                       const std::vector<char>& seen, bool full, const std::string& id, const std::string& title) {
    const ColorKind kind = kind_of(*m.stage);
    const auto ri = canvas_axis(m.rows, full), ci = canvas_axis(m.cols, full);
    const std::size_t R = ri.size(), C = ci.size();
    std::vector<unsigned char> levels(R * C, 252);
    const bool f8 = v.dtype == "float64" && R * C <= (std::size_t(1) << 20);
    const bool values = kind != ColorKind::boolean;
    std::vector<unsigned char> raw(values ? R * C * (f8 ? 8 : 4) : 0);
    for (std::size_t p = 0; p < R; ++p)
        for (std::size_t q = 0; q < C; ++q) {
            const std::size_t k = p * C + q;
            const bool gap = ri[p] == text::kGap || ci[q] == text::kGap;
            if (!gap) levels[k] = canvas_level(cell_of(m, kind, sc, seen, ri[p], ci[q]), kind);
            if (!values) continue;
            const double x = gap ? std::nan("") : m.at(ri[p], ci[q]);
            if (f8) {
                std::memcpy(&raw[k * 8], &x, 8);
            } else {
                const float f = static_cast<float>(x);
                std::memcpy(&raw[k * 4], &f, 4);
            }
        }
    std::vector<std::string> rl(R), cl(C);
    for (std::size_t p = 0; p < R; ++p)
        rl[p] = ri[p] == text::kGap ? "⋮" : text::axis_label(v, m.row_axis(), m.batch, ri[p]);
    for (std::size_t q = 0; q < C; ++q)
        cl[q] = ci[q] == text::kGap ? "…" : text::axis_label(v, m.col_axis(), m.batch, ci[q]);
    const bool gaps = R != m.rows || C != m.cols;
    out << "<script type=\"application/json\" id=\"" << id << "\">";
    JsonWriter w = script_json(out);
    w.begin_object().key("stage").value(m.stage->name).key("batch").value(std::to_string(m.batch));
    w.key("head").value(m.has_heads ? std::to_string(m.head) : "").key("title").value(title);
    w.key("rows").value(m.rows).key("cols").value(m.cols).key("ri");
    gaps ? put_indices(w, ri) : void(w.value(nullptr));
    w.key("ci");
    gaps ? put_indices(w, ci) : void(w.value(nullptr));
    w.key("rowAxis").value(m.row_axis() == "Tq" ? "query" : m.row_axis());
    w.key("colAxis").value(m.col_axis() == "Tk" ? "key" : m.col_axis());
    w.key("overKeys").value(stage_info(m.stage->id).over_keys()).key("rl").list(rl).key("cl").list(cl);
    w.key("pal").value(kind != ColorKind::boolean && sc.palette != Palette::viridis ? "r" : "v");
    w.key("dtype").value(f8 ? "f8" : "f4").key("levels").value(base64(levels.data(), levels.size()));
    if (values) w.key("values").value(base64(raw.data(), raw.size()));
    w.end_object();
    out << "</script>\n";
}

// "rows 1024–3071 and columns 1024–3071 (of 4096 × 4096)" left out, or "".
std::string canvas_note(const Matrix& m, bool full) {
    const auto part = [&](const char* what, std::size_t n) {
        const std::size_t h = kHtmlMaxAxis / 2;
        return std::string(what) + " " + std::to_string(h) + "–" + std::to_string(n - h - 1);
    };
    std::string note;
    if (canvas_axis(m.rows, full).size() != m.rows) note = part("rows", m.rows);
    if (canvas_axis(m.cols, full).size() != m.cols) note += (note.empty() ? "" : " and ") + part("columns", m.cols);
    if (note.empty()) return note;
    return "Not drawn: " + note + " (of " + std::to_string(m.rows) + " × " + std::to_string(m.cols) +
           "); --full draws every cell.";
}

// One bigger matrix as a <figure> with a canvas: every cell (zoom and scroll), its data
// beside it for the script.
void write_canvas(std::ostream& out, const TraceView& v, const Matrix& m, const std::vector<char>& seen,
                  const ColourScale& sc, bool full, std::size_t& serial) {
    const ColorKind kind = kind_of(*m.stage);
    const std::string id = "fig" + std::to_string(serial++), title = matrix_title(v, m);
    const std::string full_title = m.stage->name + (title.empty() ? "" : " · " + title);
    out << "<figure class=\"canvas-fig\" data-data=\"" << id << "\" data-stage=\"" << escape(m.stage->name)
        << "\" data-batch=\"" << m.batch << "\" data-head=\"" << (m.has_heads ? std::to_string(m.head) : "") << "\">\n";
    if (!title.empty()) out << "<figcaption>" << escape(title) << "</figcaption>\n";
    out << "<div class=\"zoom\">zoom <button data-zoom=\"-1\" title=\"smaller cells\">−</button><button "
           "data-zoom=\"1\" title=\"bigger cells\">+</button><button data-zoom=\"0\" title=\"one pixel per "
           "cell\">1:1</button> <span class=\"zoom-level\"></span> · ctrl + wheel zooms, scroll moves</div>\n"
        << "<div class=\"heatwrap\"><div class=\"spacer\"></div><canvas></canvas></div>\n";
    write_canvas_data(out, v, m, sc, seen, full, id, full_title);
    bool any_masked = false;
    for (char c : seen) any_masked = any_masked || !c;
    write_legend(out, kind, sc, any_masked);
    const std::string note = canvas_note(m, full);
    if (!note.empty()) out << "<p class=\"note\">" << escape(note) << "</p>\n";
    out << "</figure>\n";
}

bool as_table(const Matrix& m) { return m.rows <= kTableRows && m.cols <= kTableCols; }

// The chosen batch items and heads of a stage, within a budget of drawn cells (none with --full).
void write_stage(std::ostream& out, const TraceView& v, const StageView& s, std::size_t budget,
                 const std::vector<std::size_t>& batches, const std::vector<std::size_t>& heads, const FigureOptions& o,
                 std::size_t& serial) {
    out << "<section id=\"stage-" << escape(s.name) << "\">\n<h2>" << escape(s.name) << "<span class=\"shape\">"
        << escape(text::shape_text(s)) << "</span></h2>\n<p class=\"formula\">" << escape(s.name) << " = "
        << escape(s.formula) << "</p>\n";
    out << "<div class=\"figs\">\n";
    std::size_t drawn = 0, left_out = 0;
    std::string first_left_out;
    const bool gqa = v.dims.G && v.dims.G != v.dims.H;
    const auto bs = text::chosen_or_all(batches, v.dims.B), hs = text::chosen_or_all(heads, v.dims.H);
    const ColourScale sc(scale::stage_scale(v, s, bs, hs, o.range));
    for (std::size_t b : bs) {
        for (const text::MatrixRef& ref : text::matrices_of(v, s, {b}, hs, o.full ? std::size_t(-1) : 8, " · ")) {
            Matrix m = matrix_of(s, b, ref.head);
            m.offset = ref.offset;
            m.title = ref.title;
            // Grouped-query attention: a query head's matrix says which K/V head it reads.
            if (gqa && m.has_heads && std::find(s.axes.begin(), s.axes.end(), "H") != s.axes.end())
                m.title += " (reads K/V head " + std::to_string(v.dims.kv_head(ref.head)) + ")";
            const std::size_t cells = canvas_axis(m.rows, o.full).size() * canvas_axis(m.cols, o.full).size();
            if (!o.full && drawn > 0 && drawn + cells > budget) {
                if (left_out++ == 0) first_left_out = matrix_title(v, m);
                continue;
            }
            drawn += cells;
            const std::vector<char> seen = visibility(v, s, b, ref.head);
            if (as_table(m))
                write_table(out, v, m, seen, sc);
            else
                write_canvas(out, v, m, seen, sc, o.full, serial);
        }
    }
    out << "</div>\n";
    if (left_out > 0)
        out << "<p class=\"note\">" << left_out << " more matri" << (left_out > 1 ? "ces" : "x") << " of "
            << escape(s.name) << " (from " << first_left_out
            << " on) left out to keep the page small: choose fewer stages, "
            << "batch items or heads with --stages, --batch or --head, or give --full, to see more.</p>\n";
    out << "</section>\n";
}

// The palettes for the script: 252 levels of viridis and of blue-red as [r, g, b], the
// mask's colour and the hatch.
void write_palettes(std::ostream& out) {
    const auto rgb = [](JsonWriter& w, unsigned long x) {
        w.begin_array().value((x >> 16) & 255).value((x >> 8) & 255).value(x & 255).end_array();
    };
    const auto hex = [](const char* text) { return std::strtoul(text + 1, nullptr, 16); };
    JsonWriter w = script_json(out);
    w.begin_object();
    for (const Palette p : {Palette::viridis, Palette::blue_red}) {
        w.key(p == Palette::viridis ? "v" : "r").begin_array();
        for (int k = 0; k < kCanvasLevels; ++k) {
            const Rgb c = colour::at(p, double(k) / double(kCanvasLevels - 1));
            rgb(w,
                static_cast<unsigned long>((colour::byte(c.r) << 16) | (colour::byte(c.g) << 8) | colour::byte(c.b)));
        }
        w.end_array();
    }
    rgb(w.key("allowed"), hex(kAllowed));
    rgb(w.key("hatchDark"), hex(kHatchDark));
    rgb(w.key("hatchLight"), hex(kHatchLight));
    w.end_object();
}

// The head view's data: the heads, the sizes, the tokens of each chosen batch item and
// the weights (float32, base64).
void write_head_view_data(std::ostream& out, const TraceView& v, const std::vector<std::size_t>& bs,
                          const std::vector<std::size_t>& hs, const std::vector<float>& data) {
    out << "<script type=\"application/json\" id=\"headview-data\">";
    JsonWriter w = script_json(out);
    w.begin_object().key("heads").list(hs).key("Tq").value(v.dims.Tq).key("Tk").value(v.dims.Tk);
    w.key("self").value(!v.cross);
    const auto labels = [&](const char* key, const char* axis, std::size_t n) {
        w.key(key).begin_array();  // a list of labels per batch item
        for (std::size_t b : bs) {
            w.begin_array();
            for (std::size_t i = 0; i < n; ++i) w.value(text::axis_label(v, axis, b, i));
            w.end_array();
        }
        w.end_array();
    };
    labels("qt", "Tq", v.dims.Tq);
    labels("kt", "Tk", v.dims.Tk);
    w.key("w").value(base64(reinterpret_cast<const unsigned char*>(data.data()), data.size() * sizeof(float)));
    w.end_object();
    out << "</script>\n";
}

// The head view and the coloured text, from the weights of the chosen batch items and
// heads; a note instead when the run has no weights or is too long for them.
void write_head_view(std::ostream& out, const TraceView& v, const std::vector<std::size_t>& batches,
                     const std::vector<std::size_t>& heads, const std::string& of = "") {
    out << "<section class=\"views\" id=\"views\">\n<h2>Head view and coloured text"
        << (of.empty() ? "" : ": " + escape(of)) << "</h2>\n";
    const StageView* w = v.find(kWeights);
    if (!w) {
        out << "<p class=\"note\">They draw the weights: add weights to --stages to see them.</p>\n</section>\n";
        return;
    }
    if (v.dims.Tq > kHeadViewMax || v.dims.Tk > kHeadViewMax) {
        out << "<p class=\"note\">They are drawn for inputs of up to " << kHeadViewMax
            << " tokens; this run has Tq = " << v.dims.Tq << ", Tk = " << v.dims.Tk
            << ". The heatmaps above show every weight.</p>\n</section>\n";
        return;
    }
    const auto bs = text::chosen_or_all(batches, v.dims.B), hs = text::chosen_or_all(heads, v.dims.H);
    std::vector<float> data;
    for (std::size_t b : bs)
        for (std::size_t h : hs)
            for (std::size_t i = 0; i < v.dims.Tq; ++i)
                for (std::size_t j = 0; j < v.dims.Tk; ++j)
                    data.push_back(static_cast<float>(text::at_bhij(*w, b, h, i, j)));
    out << "<div id=\"headview\">\n<p class=\"howto\">The head view (as BertViz draws it): queries on the left, "
           "keys on the right, a line for each (query, key) and head, as opaque as its weight. Hover over a token "
           "to see only its lines; click it to keep them (click again to free). The buttons choose the heads, "
           "each in its colour (double-click: that head alone).</p>\n";
    if (bs.size() > 1) {
        out << "<p>batch item <select class=\"hv-batch\">";
        for (std::size_t n = 0; n < bs.size(); ++n) out << "<option value=\"" << n << "\">" << bs[n] << "</option>";
        out << "</select></p>\n";
    }
    out << "<div class=\"hv-heads\"></div>\n<svg class=\"hv\" xmlns=\"http://www.w3.org/2000/svg\"></svg>\n</div>\n"
        << "<div id=\"coloured-text\">\n<h3>The text coloured by attention</h3>\n<p class=\"howto\">"
        << (v.cross ? "Hover over (or click) a query token: each key token is"
                    : "Hover over (or click, to keep it) a token to make it the query: each token is")
        << " shaded by the weight that query gives it, the darkest being the largest weight of the row (hover a "
           "token for its weight). <select class=\"ct-head\"></select> Query: <span class=\"ct-which\"></span></p>\n";
    if (v.cross) out << "<p class=\"ct-line\">queries: <span class=\"ct-queries\"></span></p>\n";
    out << "<p class=\"ct-line\">" << (v.cross ? "keys: " : "") << "<span class=\"ct-keys\"></span></p>\n</div>\n";
    write_head_view_data(out, v, bs, hs, data);
    out << "</section>\n";
}

void write_script(std::ostream& out) {
    out << "<script type=\"application/json\" id=\"palettes\">";
    write_palettes(out);
    out << "</script>\n<script>\n" << html_detail::kScript << "</script>\n";
}

void write_page_head(std::ostream& out, const std::string& title) {
    out << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        << "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
        << "<title>" << escape(title) << "</title>\n<style>\n"
        << style_sheet() << "</style>\n</head>\n<body>\n";
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

constexpr std::size_t kSvgNumbers = 12;  // a matrix this small shows its numbers
constexpr std::size_t kSvgHover = 4096;  // a matrix this small has a hover title per cell

// SVG sizes in pixels: the margin, the fonts of title, formula, axis titles and ticks,
// and the factor of a column label's length that rises above the grid (turned 45°).
constexpr double kSvgMargin = 20, kTitleFont = 24, kSubFont = 15, kAxisFont = 16, kTickFont = 15;
constexpr double kDiag = 0.7071;
constexpr double kBarW = 20;  // legend bar width

// One matrix laid out as an SVG figure: what is drawn, and where.
struct SvgFigure {
    const TraceView* view = nullptr;
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

// The colour rule under the grid.
std::string rule_text(const SvgFigure& f) { return "colours: " + f.sc.rule.rule; }

// Where the grid and legend sit, and the size of the whole figure.
void svg_geometry(SvgFigure& f) {
    f.grid_x = kSvgMargin + kAxisFont * 1.6 + f.row_w + 10;
    f.grid_y = kSvgMargin + kTitleFont + kSubFont + 26 + kAxisFont * 1.6 + f.col_w * kDiag + f.label_font + 8;
    f.grid_w = f.cell * double(f.C), f.grid_h = f.cell * double(f.R);
    const double grid_bottom = f.grid_y + f.grid_h + (f.note.empty() ? 0 : 12 + kTickFont) +
                               (f.kind == ColorKind::boolean ? 0 : 12 + kTickFont);
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
                                  f.grid_x + text_width(f.note, kTickFont) + kSvgMargin,
                                  f.grid_x + text_width(rule_text(f), kTickFont) + kSvgMargin}));
    const double legend_bottom = f.grid_y + (f.kind == ColorKind::boolean ? 60 : f.bar_h + (f.any_masked ? 44 : 0));
    f.height = std::ceil(std::max(grid_bottom, legend_bottom) + kSvgMargin);
}

// Matrix (batch, head) of stage s laid out: cells, labels, fonts, geometry.
SvgFigure svg_figure(const TraceView& v, const StageView& s, std::size_t batch, std::size_t head,
                     const FigureOptions& o) {
    SvgFigure f;
    f.view = &v;
    f.stage = &s;
    f.m = matrix_of(s, batch, head);
    f.kind = kind_of(s);
    // The scale is the stage's over the batch items and heads chosen (--batch, --head;
    // empty: all), as on the HTML page and in the terminal, of which the figure draws one.
    f.sc = ColourScale(scale::stage_scale(v, s, text::chosen_or_all(o.batches, v.dims.B),
                                          text::chosen_or_all(o.heads, v.dims.H), o.range));
    // 1) The rows and columns drawn, and whether their numbers and hover titles are.
    f.ri = text::shown(f.m.rows, o.full ? f.m.rows : kSvgMaxAxis, kSvgMaxAxis / 2),
    f.ci = text::shown(f.m.cols, o.full ? f.m.cols : kSvgMaxAxis, kSvgMaxAxis / 2);
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
            << f.m.exact(i, j) << (c.masked ? " (masked)" : "") << "\n"
            << escape(cell_context(*f.view, f.m, i, j)) << "</title>";
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
    double y = f.grid_y + f.grid_h + 8 + kTickFont;
    if (!f.note.empty()) {
        out << "<text x=\"" << px(f.grid_x) << "\" y=\"" << px(y) << "\" font-size=\"" << px(kTickFont)
            << "\" fill=\"#555\">" << escape(f.note) << "</text>\n";
        y += 12 + kTickFont;
    }
    if (f.kind != ColorKind::boolean)
        out << "<text class=\"rule\" x=\"" << px(f.grid_x) << "\" y=\"" << px(y) << "\" font-size=\"" << px(kTickFont)
            << "\" fill=\"#555\">" << escape(rule_text(f)) << "</text>\n";
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
                const std::vector<std::size_t>& batches, const std::vector<std::size_t>& heads,
                const FigureOptions& figure) {
    for (const auto& name : stages)
        if (!v.find(name)) throw UsageError("{html}: stage " + name + " was not computed (see {stages})");
    TextOptions chosen;
    chosen.batches = batches;
    chosen.heads = heads;
    check_selection(chosen, v.dims);
    write_page_head(out, "attnscope: " + v.source);
    write_header(out, v, stages);
    const std::size_t budget = kHtmlPageCells / std::max<std::size_t>(stages.size(), 1);
    std::size_t serial = 0;
    for (const auto& name : stages) write_stage(out, v, *v.find(name), budget, batches, heads, figure, serial);
    write_head_view(out, v, batches, heads);
    write_script(out);
    out << "</body>\n</html>\n";
}

void write_model_html(std::ostream& out, const std::vector<const TraceView*>& layers,
                      const std::vector<std::string>& names, const FigureOptions& figure,
                      std::optional<std::size_t> head_view) {
    write_page_head(out, "attnscope: model view of " + std::to_string(layers.size()) + " layers");
    out << "<header>\n<h1>attnscope: model view, " << layers.size() << (layers.size() == 1 ? " layer" : " layers")
        << "</h1>\n<p class=\"howto\">A row per bundle (layer), a column per head: the weights of batch item 0, "
           "rows are queries and columns keys. Click a thumbnail to open it below (hover its cells for their "
           "values; zoom with the buttons or ctrl + wheel).</p>\n</header>\n";
    std::size_t heads = 0;
    for (const TraceView* v : layers) heads = std::max(heads, v->dims.H);
    out << "<table class=\"grid\">\n<thead><tr><th></th>";
    for (std::size_t h = 0; h < heads; ++h) out << "<th>head " << h << "</th>";
    out << "</tr></thead>\n<tbody>\n";
    std::size_t serial = 0;
    std::string data;
    for (std::size_t l = 0; l < layers.size(); ++l) {
        const TraceView& v = *layers[l];
        const StageView& w = v.stage(kWeights);
        const ColourScale sc(scale::stage_scale(v, w, {0}, text::chosen_or_all({}, v.dims.H), figure.range));
        // The row's name, file, masks and the options its config record set.
        const std::string options = text::bundle_options_line(v.spec.bundle_options);
        out << "<tr data-layer=\"" << l << "\"><th>" << escape(names[l]) << "<br><small>" << escape(v.source) << "<br>"
            << escape(text::masks_line(v)) << (options.empty() ? "" : "<br>" + escape(options)) << "</small></th>";
        for (std::size_t h = 0; h < v.dims.H; ++h) {
            Matrix m = matrix_of(w, 0, h);
            const std::string id = "fig" + std::to_string(serial++);
            const std::string title =
                names[l] + " · weights · head " + std::to_string(h) + (v.batched && v.dims.B > 1 ? " · batch 0" : "");
            std::ostringstream block;
            write_canvas_data(block, v, m, sc, visibility(v, w, 0, h), figure.full, id, title);
            data += block.str();
            out << "<td><canvas class=\"thumb\" width=\"96\" height=\"96\" data-data=\"" << id << "\" data-layer=\""
                << l << "\" data-head=\"" << h << "\" data-title=\"" << escape(title) << "\" title=\"" << escape(title)
                << "\"></canvas></td>";
        }
        out << "</tr>\n";
    }
    out << "</tbody>\n</table>\n" << data;
    out << "<div class=\"legend\"><div class=\"scale\"><div class=\"bar viridis\"></div><div class=\"ticks\">"
        << "<span>0</span><span>1</span></div></div></div>\n"
        << "<template id=\"opened-template\"><figure class=\"canvas-fig\"><figcaption></figcaption>"
        << "<div class=\"zoom\">zoom <button data-zoom=\"-1\">−</button><button data-zoom=\"1\">+</button>"
        << "<button data-zoom=\"0\">1:1</button> <span class=\"zoom-level\"></span></div>"
        << "<div class=\"heatwrap\"><div class=\"spacer\"></div><canvas></canvas></div></figure></template>\n"
        << "<section id=\"opened\"></section>\n";
    if (head_view) write_head_view(out, *layers.at(*head_view), {0}, {}, names.at(*head_view));
    write_script(out);
    out << "</body>\n</html>\n";
}

void write_svg(std::ostream& out, const TraceView& v, const std::string& stage, std::size_t batch, std::size_t head,
               const FigureOptions& figure) {
    TextOptions chosen;
    chosen.batches = {batch};
    chosen.heads = {head};
    check_selection(chosen, v.dims);
    const StageView* s = v.find(stage);
    if (!s) throw UsageError("{svg_stage} " + stage + ": stage was not computed (add it to {stages})");
    const SvgFigure f = svg_figure(v, *s, batch, head, figure);
    write_svg_head(out, f);
    write_svg_titles(out, f);
    write_svg_grid(out, f);
    write_svg_legend(out, f);
    out << "</svg>\n";
}

}  // namespace attnscope
