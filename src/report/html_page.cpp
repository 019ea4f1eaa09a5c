// The HTML page of a trace (write_html) and of a model's layers (write_model_html): the
// document skeleton, the header, every chosen stage, batch item and head as a table (for a
// browser or a projector) or a canvas, the head view, and the page's script and style sheet
// (src/report/html_page.js, html_page.css, embedded at build time).
//
// The page is self-contained: no scripts, fonts, images or style sheets from elsewhere, so
// it opens offline. Colours are colour-blind safe: viridis (sequential) for scores,
// masked_scores and weights; ColorBrewer's RdBu (diverging, white at 0) for Q, K, V,
// context and output. A masked cell (the query may not see that key) is hatched grey,
// never a dark "small weight" colour; it reads "−∞" (masked_scores) or "0" (weights).
//
// Numbers: the exact value of a cell (title and data-value) is the shortest text that
// reads back to the same float32/float64 value; the number shown in a cell is rounded.
// Exact zeros print "0", and a value that rounds to zero loses its sign (no "-0.00").
// The canvases' data is written by html_canvas.cpp; what the SVG figure shares with the
// page is in figure.cpp.

#include <algorithm>
#include <cmath>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "attnscope/base/errors.hpp"
#include "attnscope/report/report.hpp"
#include "attnscope/report/sweep_report.hpp"
#include "figure.hpp"
#include "html_canvas.hpp"
#include "html_page_css.hpp"  // generated from html_page.css (CMakeLists.txt)
#include "html_page_js.hpp"   // generated from html_page.js
#include "text_util.hpp"

namespace attnscope {
using namespace figure;  // escaping, numbers, colours, matrices and cells (figure.hpp)
namespace {

// A matrix of at most kTableRows x kTableCols is a table with its numbers in the cells
// (readable, and its values are in the page without a script); a bigger one a canvas.
constexpr std::size_t kTableRows = 64, kTableCols = 16;
constexpr int kLevels = 64;                // colour classes per palette (tables)
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

}  // namespace

std::string html_text(std::string_view s) { return escape(s); }

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
        << "</h1>\n<p class=\"howto\">"
        << (head_view ? "A row per layer, a column per head: the weights of the text's tokens, "
                      : "A row per bundle (a layer), a column per head: the weights of batch item 0, ")
        << "rows are queries and columns keys. Click a thumbnail to open it below (hover its cells for their "
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

}  // namespace attnscope
