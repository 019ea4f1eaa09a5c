// Terminal heatmaps: (Tq, Tk) stages as coloured cells (or a character ramp without
// colour), token labels on both axes, a legend with numbers, masked cells marked "××"
// so they cannot be mistaken for small values. Heads side by side when they fit.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <limits>
#include <ostream>

#include "attnscope/base/errors.hpp"
#include "attnscope/report/report.hpp"
#include "colour.hpp"
#include "text_util.hpp"

namespace attnscope {
namespace {

using namespace text;

constexpr const char* kRamp = " .:-=+*#%@";  // no colour: darker to denser
constexpr const char* kReset = "\033[0m";
constexpr const char* kMasked = "××";

// Palette p at t in 0..1 (the palettes of the HTML and SVG heatmaps), as bytes.
std::array<int, 3> rgb(colour::Palette p, double t) {
    const colour::Rgb c = colour::at(p, t);
    return {colour::byte(c.r), colour::byte(c.g), colour::byte(c.b)};
}

std::string background(const std::array<int, 3>& c, ColorMode mode) {
    char buf[32];
    if (mode == ColorMode::truecolor) {
        std::snprintf(buf, sizeof buf, "\033[48;2;%d;%d;%dm", c[0], c[1], c[2]);
    } else {  // nearest colour of the xterm 6x6x6 cube
        auto q = [](int v) { return (v * 5 + 127) / 255; };
        std::snprintf(buf, sizeof buf, "\033[48;5;%dm", 16 + 36 * q(c[0]) + 6 * q(c[1]) + q(c[2]));
    }
    return buf;
}

// A cell of `w` columns (1 or 2) for a value at relative position t in [0, 1] of palette p
// (viridis; blue-white-red for a diverging stage such as the bias).
std::string cell(double t, std::size_t w, ColorMode mode, colour::Palette p = colour::Palette::viridis) {
    if (mode == ColorMode::none) {
        std::size_t k = std::size_t(std::lround(std::clamp(t, 0.0, 1.0) * 9));
        return std::string(w, kRamp[k]);
    }
    return background(rgb(p, t), mode) + std::string(w, ' ') + kReset;
}

colour::Palette palette_of(const StageView& s) {
    return stage_info(s.id).color == ColorKind::diverging ? colour::Palette::blue_red : colour::Palette::viridis;
}

std::string masked_cell(std::size_t w, ColorMode mode) {
    std::string m = w == 2 ? kMasked : "×";
    return mode == ColorMode::none ? m : "\033[2m" + m + kReset;
}

std::string nan_cell(std::size_t w, ColorMode mode) {
    std::string m = w == 2 ? "??" : "?";
    return mode == ColorMode::none ? m : "\033[1;31m" + m + kReset;
}

// The value range a stage is drawn over: [0, 1] for probabilities (weights) and the
// mask, else the finite values of every matrix shown (shared, so heads can be compared
// by eye).
std::pair<double, double> value_range(const StageView& s, const std::vector<std::size_t>& batches,
                                      const std::vector<std::size_t>& heads) {
    const ColorKind kind = stage_info(s.id).color;
    if (kind == ColorKind::probability || kind == ColorKind::boolean) return {0.0, 1.0};
    double lo = std::numeric_limits<double>::infinity(), hi = -lo;
    const std::size_t matrix = s.shape[s.shape.size() - 2] * s.shape.back();
    for (std::size_t b : batches)
        for (std::size_t h : heads) {
            std::size_t off = matrix_offset(s, b, h);
            for (std::size_t k = 0; k < matrix; ++k) {
                double v = s.at(off + k);
                if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
            }
        }
    if (!(lo <= hi)) return {0.0, 1.0};
    if (kind == ColorKind::diverging) {  // white at 0: -m..m, m the largest |value|
        const double m = std::max(std::fabs(lo), std::fabs(hi));
        return m > 0 ? std::pair{-m, m} : std::pair{-1.0, 1.0};
    }
    if (lo == hi) hi = lo + 1;
    return {lo, hi};
}

// One panel: lines of text and their display widths (escape codes take no columns).
struct Panel {
    std::vector<std::string> lines;
    std::size_t width = 0;
    void add(std::string line, std::size_t w) {
        lines.push_back(std::move(line));
        width = std::max(width, w);
    }
};

// The code points of a label, one string each (for vertical column labels).
std::vector<std::string> code_points(const std::string& s) {
    std::vector<std::string> out;
    for (std::size_t i = 0; i < s.size();) {
        std::size_t n = 1;
        while (i + n < s.size() && (static_cast<unsigned char>(s[i + n]) & 0xC0) == 0x80) ++n;
        out.push_back(s.substr(i, n));
        i += n;
    }
    return out;
}

// Whether a cell is drawn as masked: scores keep their real values where the mask hides
// them; the mask marks its own false cells; the bias its -inf ones; the later stages
// follow the run's mask rule and a -inf bias (text::sees), never a rule of their own.
bool hidden(const TraceView& v, const StageView& s, double x, std::size_t b, std::size_t h, std::size_t i,
            std::size_t j) {
    switch (s.id) {
        case kMask:
            return x == 0;
        case kBias:
            return x == -std::numeric_limits<double>::infinity();
        case kMaskedScores:
        case kWeights:
            return !sees(v, b, h, i, j);
        default:
            return false;
    }
}

// How a panel lays out a (Tq, Tk) matrix: query labels (up to 8 characters) in a column
// of label_w, cells of cw columns (2 when they fit, else 1), and the first shown_cols keys.
struct Layout {
    std::vector<std::string> row_labels;
    std::size_t label_w = 1, cw = 2, shown_cols = 0;
    std::size_t line_width() const { return label_w + 1 + cw * shown_cols; }
};

Layout layout(const TraceView& v, const std::string& row_axis, std::size_t b, std::size_t rows, std::size_t cols,
              std::size_t max_cols_width) {
    Layout l;
    l.row_labels.resize(rows);
    for (std::size_t i = 0; i < rows; ++i) {
        l.row_labels[i] = clip_label(axis_label(v, row_axis, b, i), 8);
        l.label_w = std::max(l.label_w, display_width(l.row_labels[i]));
    }
    // Two columns per cell when they fit, else one; beyond that the first keys only.
    const std::size_t avail = max_cols_width > l.label_w + 1 ? max_cols_width - l.label_w - 1 : 1;
    l.cw = 2 * cols <= avail ? 2 : 1;
    l.shown_cols = std::min(cols, std::max<std::size_t>(1, avail / l.cw));
    return l;
}

// The key labels above the cells, vertical: one line per code point (up to 6).
void add_key_labels(Panel& p, const TraceView& v, const std::string& col_axis, std::size_t b, const Layout& l) {
    std::vector<std::vector<std::string>> col_labels(l.shown_cols);
    std::size_t label_lines = 0;
    for (std::size_t j = 0; j < l.shown_cols; ++j) {
        col_labels[j] = code_points(axis_label(v, col_axis, b, j));
        if (col_labels[j].size() > 6) col_labels[j].resize(6);
        label_lines = std::max(label_lines, col_labels[j].size());
    }
    for (std::size_t k = 0; k < label_lines; ++k) {
        std::string line(l.label_w + 1, ' ');
        for (std::size_t j = 0; j < l.shown_cols; ++j) {
            line += k < col_labels[j].size() ? col_labels[j][k] : " ";
            if (l.cw == 2) line += ' ';
        }
        p.add(line, l.line_width());
    }
}

// One panel: matrix (b, h) of a (Tq, Tk) stage with its title, key labels, a line of
// cells per query, and a note when keys were left out.
Panel render(const TraceView& v, const StageView& s, std::size_t b, std::size_t h, std::pair<double, double> range,
             const TextOptions& o, std::size_t max_cols_width) {
    const std::size_t nd = s.shape.size(), rows = s.shape[nd - 2], cols = s.shape[nd - 1];
    const std::size_t off = matrix_offset(s, b, h);
    const Layout l = layout(v, s.axes[nd - 2], b, rows, cols, max_cols_width);
    const colour::Palette palette = palette_of(s);
    Panel p;
    // 1) Title, then the key labels.
    const std::string where = matrix_title(v, s, b, h), title = s.name + (where.empty() ? "" : ", " + where);
    p.add(title, display_width(title));
    add_key_labels(p, v, s.axes[nd - 1], b, l);
    // 2) A line per query: its label, then a cell per key shown.
    for (std::size_t i = 0; i < rows; ++i) {
        std::string line = pad_right(l.row_labels[i], l.label_w) + " ";
        for (std::size_t j = 0; j < l.shown_cols; ++j) {
            const double x = s.at(off + i * cols + j);
            if (hidden(v, s, x, b, h, i, j))
                line += masked_cell(l.cw, o.color);
            else if (std::isnan(x))
                line += nan_cell(l.cw, o.color);
            else
                line += cell((x - range.first) / (range.second - range.first), l.cw, o.color, palette);
        }
        p.add(line, l.line_width());
    }
    // 3) The keys left out.
    if (l.shown_cols < cols) {
        std::string note = "(keys 0.." + std::to_string(l.shown_cols - 1) + " of " + std::to_string(cols) + ")";
        p.add(note, display_width(note));
    }
    return p;
}

std::string legend(const StageView& s, std::pair<double, double> range, ColorMode mode) {
    char lo[32], hi[32];
    std::snprintf(lo, sizeof lo, "%.4g", range.first);
    std::snprintf(hi, sizeof hi, "%.4g", range.second);
    std::string out = "  legend  " + std::string(lo) + " ";
    for (int k = 0; k <= 9; ++k) out += cell(k / 9.0, 2, mode, palette_of(s));
    out += " " + std::string(hi) + "   " + masked_cell(2, mode) + " masked";
    if (s.id == kWeights) out += " (exactly 0)";
    if (s.id == kMaskedScores || s.id == kBias) out += " (-inf)";
    return out + "   " + nan_cell(2, mode) + " NaN\n";
}

void print_side_by_side(std::ostream& out, const std::vector<Panel>& panels, std::size_t width) {
    constexpr std::size_t gap = 3;
    for (std::size_t first = 0; first < panels.size();) {
        std::size_t used = panels[first].width, last = first + 1;
        while (last < panels.size() && used + gap + panels[last].width <= width) used += gap + panels[last++].width;
        std::size_t lines = 0;
        for (std::size_t k = first; k < last; ++k) lines = std::max(lines, panels[k].lines.size());
        for (std::size_t l = 0; l < lines; ++l) {
            std::string line;
            for (std::size_t k = first; k < last; ++k) {
                const Panel& p = panels[k];
                std::string text = l < p.lines.size() ? p.lines[l] : "";
                // Pad by display width; escape sequences occupy no columns.
                std::size_t w = 0;
                for (std::size_t i = 0; i < text.size(); ++i) {
                    if (text[i] == '\033') {
                        while (i < text.size() && text[i] != 'm') ++i;
                        continue;
                    }
                    w += (static_cast<unsigned char>(text[i]) & 0xC0) != 0x80;
                }
                line += text + (k + 1 < last ? std::string(p.width - std::min(w, p.width) + gap, ' ') : "");
            }
            out << "  " << line << '\n';
        }
        out << '\n';
        first = last;
    }
}

}  // namespace

bool drawn_as_heatmap(const StageView& s) { return stage_info(s.id).over_keys() || s.id == kSinkWeight; }

void write_heatmaps(std::ostream& out, const TraceView& v, const StageView& s, const TextOptions& o) {
    if (!drawn_as_heatmap(s)) throw UsageError("{heatmap}: stage " + s.name + " is not a (query, key) matrix");
    const auto batches = chosen_or_all(o.batches, v.dims.B);
    const auto heads = has_heads(s) ? chosen_or_all(o.heads, v.dims.H) : std::vector<std::size_t>{0};
    const auto range = value_range(s, batches, heads);
    std::vector<Panel> panels;
    for (std::size_t b : batches)
        for (std::size_t h : heads) panels.push_back(render(v, s, b, h, range, o, o.width > 4 ? o.width - 4 : 4));
    out << '\n';
    if (has_heads(s) && v.dims.G && v.dims.G != v.dims.H)  // grouped-query attention: who shares keys
        for (const auto& line : wrap(sharing_line(v.dims), o.width > 6 ? o.width - 4 : 2)) out << "  " << line << '\n';
    if (s.id == kSinkWeight) out << "  rows: heads; columns: queries; each cell the sink's share of that row\n";
    print_side_by_side(out, panels, o.width > 2 ? o.width - 2 : 1);
    out << legend(s, range, o.color);
}

void write_panels(std::ostream& out, const TraceView& v, const TextOptions& o) {
    // The panels the chosen stages name (every one when no stage is chosen).
    std::vector<Stage> shown_stages;
    for (const Stage id : {kScores, kMaskedScores, kWeights})
        if (o.stages.empty() || std::find(o.stages.begin(), o.stages.end(), stage_name(id)) != o.stages.end())
            shown_stages.push_back(id);
    if (shown_stages.empty())
        throw UsageError("{panels}: draws scores, masked_scores and weights; {stages} names none of them");
    // (kPanelsNeeds also keeps the mask and, when the run has one, the bias; the cells
    // hidden are the mask rule's and a -inf bias's: text::sees.)
    v.require(StageSet().set(kScores).set(kMaskedScores).set(kWeights), "panels");
    const auto batches = chosen_or_all(o.batches, v.dims.B);
    const auto heads = chosen_or_all(o.heads, v.dims.H);
    for (std::size_t b : batches)
        for (std::size_t h : heads) {
            std::vector<Panel> panels;
            std::vector<std::pair<double, double>> ranges;
            for (const Stage id : shown_stages) {
                const StageView& s = v.stage(id);
                ranges.push_back(value_range(s, {b}, {h}));
                panels.push_back(
                    render(v, s, b, h, ranges.back(), o, (o.width > 12 ? o.width - 12 : 12) / shown_stages.size()));
            }
            std::string names;
            for (const Stage id : shown_stages) names += (names.empty() ? "" : " -> ") + stage_name(id);
            out << "\n== " << (v.batched ? "batch " + std::to_string(b) + ", " : std::string()) << "head " << h << ": "
                << names << (shown_stages.back() == kWeights ? " (softmax along each row)" : "") << '\n';
            if (v.dims.G && v.dims.G != v.dims.H)
                out << "   query head " << h << " reads K/V head " << v.dims.kv_head(h) << " ("
                    << serves(v.dims, v.dims.kv_head(h)) << ")\n";
            out << '\n';
            print_side_by_side(out, panels, o.width > 2 ? o.width - 2 : 1);
            for (std::size_t k = 0; k < shown_stages.size(); ++k)
                out << legend(v.stage(shown_stages[k]), ranges[k], o.color);
        }
}

}  // namespace attnscope
