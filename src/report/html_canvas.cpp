// The data of the HTML page's canvases and head view, for its script (html_canvas.hpp).
#include "html_canvas.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "attnscope/base/json_writer.hpp"
#include "text_util.hpp"

namespace attnscope::figure {
namespace {

constexpr int kCanvasLevels = 252;  // palette levels of a canvas cell (0..251)

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

}  // namespace

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

}  // namespace attnscope::figure
