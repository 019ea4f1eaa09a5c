// What the HTML page and the SVG figure share (src/report/html_page.cpp, html_canvas.cpp,
// svg.cpp): escaping, numbers, colours, and a matrix of a stage with its colour scale and
// its cells. Internal to the report layer.
#pragma once

#include <cmath>
#include <string>
#include <string_view>
#include <vector>

#include "attnscope/report/report.hpp"
#include "colour.hpp"
#include "scale.hpp"

namespace attnscope::figure {

using colour::dark;
using colour::hex;
using colour::Palette;
using colour::Rgb;

inline constexpr const char* kAllowed = "#21918c";  // a visible key in the mask stage (viridis at 0.5)
inline constexpr const char* kHatchDark = "#ababab";
inline constexpr const char* kHatchLight = "#ebebeb";

// ---- text and numbers (figure.cpp)
std::string escape(std::string_view s);                       // HTML/XML character data or attribute value
std::string clip(const std::string& s);                       // a label cut to 12 characters and "…"
std::string exact_number(const StageView& s, std::size_t k);  // element k, read back exactly
std::string readable(double x, const char* format);           // printed for a reader ("−", "∞")
std::string cell_text(double x);                              // the rounded number in a cell
std::string tick_text(double x);                              // a number on a legend or header
std::string gradient_stops(Palette p, bool svg);              // "#440154 0%,..." or <stop>s

// ---- matrices, their colour scales and their masked cells

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

Matrix matrix_of(const StageView& s, std::size_t b, std::size_t h);

// How a stage is coloured: its ColorKind in the stage table (probability: viridis over
// 0..1; sequential: viridis over the matrix's finite min..max; diverging: blue-white-red
// over -m..m, m the largest finite |value|; boolean: visible or masked).
inline ColorKind kind_of(const StageView& s) { return stage_info(s.id).color; }

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
bool shows_mask(const StageView& s);

// The (Tq, Tk) "may attend" matrix of batch item b and head h, row-major, as the run's mask
// rule says (and, but for the mask stage itself, a -inf bias: text::sees). Empty for a
// stage that marks no masked cells.
std::vector<char> visibility(const TraceView& v, const StageView& s, std::size_t b, std::size_t h);

// What a cell of a matrix looks like.
struct Cell {
    bool masked = false;  // the query may not see this key
    bool nan = false;
    double position = 0;  // on the palette, 0..1
    std::string text;     // the number shown (rounded), or the mask's mark
};

Cell cell_of(const Matrix& m, ColorKind kind, const ColourScale& sc, const std::vector<char>& seen, std::size_t i,
             std::size_t j);

// "batch 0 · head 1", "batch 0", "head 1" or "" for a matrix.
std::string matrix_title(const TraceView& v, const Matrix& m);

// What a tooltip says besides the value: the batch item, head, query and key (their
// tokens), and the cell's value in every (query, key) stage the run kept.
std::string cell_context(const TraceView& v, const Matrix& m, std::size_t i, std::size_t j);

}  // namespace attnscope::figure
