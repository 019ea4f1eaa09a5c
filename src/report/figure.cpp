// What the HTML page and the SVG figure share (figure.hpp): escaping, numbers, colours,
// matrices, their colour scales and their cells.
#include "figure.hpp"

#include <charconv>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "attnscope/base/text.hpp"
#include "text_util.hpp"

namespace attnscope::figure {
namespace {

// False for the characters XML 1.0 forbids (C0 controls but tab and newlines, U+FFFE,
// U+FFFF) and those HTML calls parse errors (DEL, C1 controls).
bool printable(char32_t cp) {
    if (cp == '\t' || cp == '\n' || cp == '\r') return true;
    if (cp < 0x20 || (cp >= 0x7F && cp <= 0x9F)) return false;
    return cp != 0xFFFE && cp != 0xFFFF;
}

// The shortest text that reads back to exactly `x`; "-inf", "inf", "nan" as in JSON output.
template <typename T>
std::string shortest(T x) {
    if (std::isnan(x)) return "nan";
    if (std::isinf(x)) return x < 0 ? "-inf" : "inf";
    char buf[48];
    const auto r = std::to_chars(buf, buf + sizeof buf, x);
    return std::string(buf, r.ptr);
}

}  // namespace

// ---------------------------------------------------------------------------
// Text: escaping, labels
// ---------------------------------------------------------------------------

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

// A label cut to 12 characters and "…" (the whole label is on hover in HTML).
std::string clip(const std::string& s) { return text::clip_points(s, 12, 12); }

// ---------------------------------------------------------------------------
// Numbers
// ---------------------------------------------------------------------------

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

}  // namespace attnscope::figure
