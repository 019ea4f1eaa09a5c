// One matrix of a trace as an SVG figure (write_svg), for slides and papers: title and
// formula, token labels, the cells (with their numbers when few), the legend.
//
// Self-contained, with colours and masked cells as on the HTML page (html_page.cpp): a
// masked cell is hatched grey and carries no number. The exact value of a cell is in its
// <title> (the shortest text that reads back to the same float32/float64 value); the
// number shown in a cell is rounded.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ostream>
#include <string>
#include <vector>

#include "attnscope/base/errors.hpp"
#include "attnscope/base/text.hpp"
#include "attnscope/report/report.hpp"
#include "figure.hpp"
#include "text_util.hpp"

namespace attnscope {
using namespace figure;  // escaping, numbers, colours, matrices and cells (figure.hpp)
namespace {

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

// What an axis counts, for axis titles: "queries (Tq)", "keys (Tk)", "features (Dk)".
std::string axis_title(const std::string& axis) {
    if (axis == "Tq") return "queries (Tq)";
    if (axis == "Tk") return "keys (Tk)";
    if (axis == "H") return "heads (H)";
    return "features (" + axis + ")";
}

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
