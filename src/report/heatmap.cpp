// Terminal heatmaps: (Tq, Tk) stages as coloured cells (or a character ramp without
// colour), token labels on both axes, a legend with numbers, masked cells marked "××"
// so they cannot be mistaken for small values. Heads side by side when they fit.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <ostream>

#include "attnscope/base/errors.hpp"
#include "attnscope/report/compare_heatmap.hpp"
#include "attnscope/report/report.hpp"
#include "colour.hpp"
#include "scale.hpp"
#include "text_util.hpp"

namespace attnscope {
namespace {

using namespace text;

// No colour: sparser to denser. Its lowest character is a dot, never a blank: the
// smallest value drawn is there, and must not look like an empty cell.
constexpr const char* kRamp = ".,:-=+*#%@";
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

std::string masked_cell(std::size_t w, ColorMode mode) {
    std::string m = w == 2 ? kMasked : "×";
    return mode == ColorMode::none ? m : "\033[2m" + m + kReset;
}

std::string nan_cell(std::size_t w, ColorMode mode) {
    std::string m = w == 2 ? "??" : "?";
    return mode == ColorMode::none ? m : "\033[1;31m" + m + kReset;
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
        case kQ:
        case kK:
        case kV:
        case kQRot:
        case kKRot:
        case kScores:
        case kSinkWeight:
        case kContext:
        case kHeadOutput:
        case kOutput:
        case kStageCount:
            return false;
    }
    return false;
}

// How a panel lays out a (Tq, Tk) matrix: query labels (up to 8 columns) in a column
// of label_w, cells of cw columns (2 when they fit, else 1), and the keys shown: all of
// them, or (unless --full) as many as fit, the first and last around a gap (text::kGap).
struct Layout {
    std::vector<std::string> row_labels;
    std::size_t label_w = 1, cw = 2;
    std::vector<std::size_t> keys;
    std::size_t line_width() const { return label_w + 1 + cw * keys.size(); }
};

Layout layout(const TraceView& v, const std::string& row_axis, std::size_t b, std::size_t rows, std::size_t cols,
              std::size_t max_cols_width, bool full) {
    Layout l;
    l.row_labels.resize(rows);
    for (std::size_t i = 0; i < rows; ++i) {
        l.row_labels[i] = clip_label(axis_label(v, row_axis, b, i), 8);
        l.label_w = std::max(l.label_w, display_width(l.row_labels[i]));
    }
    // Two columns per cell when they fit, else one; beyond that the ends of the keys.
    const std::size_t avail = max_cols_width > l.label_w + 1 ? max_cols_width - l.label_w - 1 : 1;
    l.cw = full || 2 * cols <= avail ? 2 : 1;
    const std::size_t fit = std::max<std::size_t>(3, avail / l.cw);
    l.keys = shown(cols, full ? cols : fit, (fit - 1) / 2);
    return l;
}

// The key labels above the cells, vertical: one character per line (up to 6), each in
// the cell's columns (a wide CJK character or emoji fills a 2-column cell; in a 1-column
// cell it is shown as "…", which fits).
void add_key_labels(Panel& p, const TraceView& v, const std::string& col_axis, std::size_t b, const Layout& l) {
    std::vector<std::vector<std::string>> col_labels(l.keys.size());
    std::size_t label_lines = 0;
    for (std::size_t k = 0; k < l.keys.size(); ++k) {
        col_labels[k] =
            l.keys[k] == kGap ? std::vector<std::string>{"…"} : glyphs(axis_label(v, col_axis, b, l.keys[k]));
        if (col_labels[k].size() > 6) col_labels[k].resize(6);
        label_lines = std::max(label_lines, col_labels[k].size());
    }
    for (std::size_t n = 0; n < label_lines; ++n) {
        std::string line(l.label_w + 1, ' ');
        for (std::size_t k = 0; k < l.keys.size(); ++k) {
            std::string g = n < col_labels[k].size() ? col_labels[k][n] : " ";
            if (display_width(g) > l.cw) g = "…";
            line += pad_right(g, l.cw);
        }
        p.add(line, l.line_width());
    }
}

// One panel: matrix (b, h) of a (Tq, Tk) stage with its title, key labels, a line of
// cells per query, and a note when keys were left out.
// The note under a panel whose keys were not all drawn.
void add_left_out(Panel& p, const Layout& l, std::size_t cols) {
    if (l.keys.size() >= cols) return;
    const std::size_t first = l.keys.size() / 2;  // the gap's position
    std::string note = "(keys " + std::to_string(l.keys[first - 1] + 1) + ".." + std::to_string(l.keys[first + 1] - 1) +
                       " of " + std::to_string(cols) + " left out; --full draws them)";
    for (const auto& line : wrap(note, std::max<std::size_t>(l.line_width(), 20))) p.add(line, display_width(line));
}

// A panel's title, clipped to the wider of its cells and `budget`.
void add_title(Panel& p, const std::string& title, const Layout& l, std::size_t budget) {
    const std::string t = clip_label(title, std::max(l.line_width(), budget));
    p.add(t, display_width(t));
}

Panel render(const TraceView& v, const StageView& s, std::size_t b, std::size_t h, const scale::Scale& sc,
             const TextOptions& o, std::size_t max_cols_width, const std::string& given_title = "") {
    const std::size_t nd = s.shape.size(), rows = s.shape[nd - 2], cols = s.shape[nd - 1];
    const std::size_t off = matrix_offset(s, b, h);
    const Layout l = layout(v, s.axes[nd - 2], b, rows, cols, max_cols_width, o.full);
    Panel p;
    // 1) Title, then the key labels.
    const std::string where = matrix_title(v, s, b, h), title = s.name + (where.empty() ? "" : ", " + where);
    if (given_title.empty())
        p.add(title, display_width(title));
    else
        add_title(p, given_title, l, max_cols_width);
    add_key_labels(p, v, s.axes[nd - 1], b, l);
    // 2) A line per query: its label, then a cell per key shown.
    for (std::size_t i = 0; i < rows; ++i) {
        const scale::Scale row = scale::for_row(sc, s, b, h, i);
        std::string line = pad_right(l.row_labels[i], l.label_w) + " ";
        for (std::size_t j : l.keys) {
            if (j == kGap) {
                line += pad_right("…", l.cw);
                continue;
            }
            const double x = s.at(off + i * cols + j);
            if (hidden(v, s, x, b, h, i, j))
                line += masked_cell(l.cw, o.color);
            else if (std::isnan(x))
                line += nan_cell(l.cw, o.color);
            else
                line += cell(row.position(x), l.cw, o.color, sc.palette);
        }
        p.add(line, l.line_width());
    }
    // 3) The keys left out.
    add_left_out(p, l, cols);
    return p;
}

// What a masked cell of stage s holds, for its legend.
std::string masked_words(const StageView& s) {
    if (s.id == kWeights) return "masked (0)";
    if (s.id == kMaskedScores || s.id == kBias) return "masked (-inf)";
    return "masked";
}

bool marks_masked(const StageView& s) {
    return s.id == kMask || s.id == kMaskedScores || s.id == kWeights || s.id == kBias;
}

// The legends of `stages` (their scales), one line each, labelled and aligned: the stage,
// the low end, the ramp, the high end, the masked mark; then the rules of the scales,
// wrapped to `width`.
void write_legends(std::ostream& out, const std::vector<const StageView*>& stages,
                   const std::vector<scale::Scale>& scales, ColorMode mode, std::size_t width, bool panels) {
    std::size_t name_w = 0, lo_w = 0, hi_w = 0;
    for (std::size_t k = 0; k < stages.size(); ++k) {
        const auto [lo, hi] = scale::end_words(scales[k]);
        name_w = std::max(name_w, display_width(stages[k]->name));
        lo_w = std::max(lo_w, display_width(lo)), hi_w = std::max(hi_w, display_width(hi));
    }
    for (std::size_t k = 0; k < stages.size(); ++k) {
        const scale::Scale& sc = scales[k];
        const auto [lo, hi] = scale::end_words(sc);
        std::string line =
            std::string(k == 0 ? "  legend  " : "          ") + pad_right(stages[k]->name, name_w) + "  ";
        if (sc.kind == ColorKind::boolean) {
            line += pad_left("", lo_w) + " " + cell(1, 2, mode) + " may attend" +
                    std::string(20 + 1 + hi_w > 13 ? 20 + 1 + hi_w - 13 : 1, ' ');
        } else {
            line += pad_left(lo, lo_w) + " ";
            for (int n = 0; n <= 9; ++n) line += cell(n / 9.0, 2, mode, sc.palette);
            line += " " + pad_right(hi, hi_w);
        }
        if (marks_masked(*stages[k])) line += "   " + masked_cell(2, mode) + " " + masked_words(*stages[k]);
        // Trailing blanks are of no use.
        while (!line.empty() && line.back() == ' ') line.pop_back();
        out << line << '\n';
    }
    std::string rules;
    for (std::size_t k = 0; k < stages.size(); ++k)
        if (stages[k]->id != kMask && !(stages[k]->id == kMaskedScores && k > 0 && stages[k - 1]->id == kScores &&
                                        scales[k - 1].rule == scales[k].rule))
            rules += (rules.empty() ? "" : "; ") + stages[k]->name + ": " + scales[k].rule;
    if (rules.empty()) return;  // the mask: may attend or masked, no scale
    rules += std::string("; the same in every head") + (panels ? " and panel" : "") + " drawn";
    const std::string text = nan_cell(2, ColorMode::none) + " NaN. Colours: " + rules;
    const auto lines = wrap(text, width > 14 ? width - 12 : 2);
    for (std::size_t n = 0; n < lines.size(); ++n) {
        std::string line = lines[n];
        if (n == 0 && mode != ColorMode::none) line = nan_cell(2, mode) + line.substr(2);
        out << "          " << line << '\n';
    }
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
                std::string plain;
                for (std::size_t i = 0; i < text.size(); ++i) {
                    if (text[i] == '\033') {
                        while (i < text.size() && text[i] != 'm') ++i;
                        continue;
                    }
                    plain += text[i];
                }
                const std::size_t w = display_width(plain);
                line += text + (k + 1 < last ? std::string(p.width - std::min(w, p.width) + gap, ' ') : "");
            }
            out << "  " << line << '\n';
        }
        out << '\n';
        first = last;
    }
}

// B − A of one cell: '-' where B is lower, '+' where higher, blank within kDiffBlank.
std::string diff_cell(double d, std::size_t w) {
    return std::string(w, std::fabs(d) < kDiffBlank ? ' ' : d < 0 ? '-' : '+');
}

// The panel of B − A for stage `id` (b, h) of two runs of one shape, laid out as A's panel.
Panel render_diff(const TraceView& va, const TraceView& vb, Stage id, std::size_t b, std::size_t h,
                  const TextOptions& o, std::size_t max_cols_width) {
    const StageView &sa = va.stage(id), &sb = vb.stage(id);
    const std::size_t nd = sa.shape.size(), rows = sa.shape[nd - 2], cols = sa.shape[nd - 1];
    const std::size_t off = matrix_offset(sa, b, h);  // the same in B: the shapes are equal
    const Layout l = layout(va, sa.axes[nd - 2], b, rows, cols, max_cols_width, o.full);
    Panel p;
    add_title(p, "B - A", l, max_cols_width);
    add_key_labels(p, va, sa.axes[nd - 1], b, l);
    for (std::size_t i = 0; i < rows; ++i) {
        std::string line = pad_right(l.row_labels[i], l.label_w) + " ";
        for (std::size_t j : l.keys) {
            const double x = j == kGap ? 0 : sa.at(off + i * cols + j), y = j == kGap ? 0 : sb.at(off + i * cols + j);
            if (j == kGap)
                line += pad_right("…", l.cw);
            else if (hidden(va, sa, x, b, h, i, j) && hidden(vb, sb, y, b, h, i, j))
                line += masked_cell(l.cw, o.color);
            else if (std::isnan(x) || std::isnan(y))
                line += nan_cell(l.cw, o.color);
            else
                line += diff_cell(y - x, l.cw);
        }
        p.add(line, l.line_width());
    }
    add_left_out(p, l, cols);
    return p;
}

}  // namespace

bool drawn_as_heatmap(const StageView& s) { return stage_info(s.id).over_keys() || s.id == kSinkWeight; }

ColourRange parse_range(const std::string& text, bool log) {
    ColourRange r;
    r.log = log;
    if (text.empty() || text == "auto") return r;
    if (text == "fixed" || text == "row") {
        r.mode = text == "fixed" ? ColourRange::fixed : ColourRange::row;
        return r;
    }
    const std::size_t comma = text.find(',');
    const auto number = [](const std::string& t, double& x) {
        const char* begin = t.c_str();
        char* end = nullptr;
        x = std::strtod(begin, &end);
        return end != begin && *end == '\0' && std::isfinite(x);
    };
    if (comma != std::string::npos && number(text.substr(0, comma), r.lo) && number(text.substr(comma + 1), r.hi)) {
        if (!(r.lo < r.hi)) throw UsageError("{range}: expected LO < HI, found " + escape_control(text));
        if (log && !(r.lo > 0))
            throw UsageError("{range}: with {log_scale} LO must be above 0, found " + escape_control(text));
        r.mode = ColourRange::given;
        return r;
    }
    throw UsageError("{range}: expected auto, fixed, row or LO,HI (two numbers), found '" + escape_control(text) + "'");
}

void write_heatmaps(std::ostream& out, const TraceView& v, const StageView& s, const TextOptions& o) {
    if (!drawn_as_heatmap(s)) throw UsageError("{heatmap}: stage " + s.name + " is not a (query, key) matrix");
    const auto batches = chosen_or_all(o.batches, v.dims.B);
    const auto heads = has_heads(s) ? chosen_or_all(o.heads, v.dims.H) : std::vector<std::size_t>{0};
    const scale::Scale sc = scale::stage_scale(v, s, batches, chosen_or_all(o.heads, v.dims.H), o.range);
    std::vector<Panel> panels;
    for (std::size_t b : batches)
        for (std::size_t h : heads) panels.push_back(render(v, s, b, h, sc, o, o.width > 4 ? o.width - 4 : 4));
    out << '\n';
    if (has_heads(s) && v.dims.G && v.dims.G != v.dims.H)  // grouped-query attention: who shares keys
        for (const auto& line : wrap(sharing_line(v.dims), o.width > 6 ? o.width - 4 : 2)) out << "  " << line << '\n';
    if (s.id == kSinkWeight) out << "  rows: heads; columns: queries; each cell the sink's share of that row\n";
    print_side_by_side(out, panels, o.width > 2 ? o.width - 2 : 1);
    write_legends(out, {&s}, {sc}, o.color, o.width, false);
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
    // One scale per stage, shared by every head and panel (scores and masked_scores share theirs).
    std::vector<const StageView*> stages;
    std::vector<scale::Scale> scales;
    for (const Stage id : shown_stages) {
        stages.push_back(&v.stage(id));
        scales.push_back(scale::stage_scale(v, v.stage(id), batches, heads, o.range));
    }
    for (std::size_t b : batches)
        for (std::size_t h : heads) {
            std::vector<Panel> panels;
            for (std::size_t k = 0; k < stages.size(); ++k)
                panels.push_back(
                    render(v, *stages[k], b, h, scales[k], o, (o.width > 12 ? o.width - 12 : 12) / stages.size()));
            std::string names;
            for (const Stage id : shown_stages) names += (names.empty() ? "" : " -> ") + stage_name(id);
            out << "\n== " << (v.batched ? "batch " + std::to_string(b) + ", " : std::string()) << "head " << h << ": "
                << names << (shown_stages.back() == kWeights ? " (softmax along each row)" : "") << '\n';
            if (v.dims.G && v.dims.G != v.dims.H)
                out << "   query head " << h << " reads K/V head " << v.dims.kv_head(h) << " ("
                    << serves(v.dims, v.dims.kv_head(h)) << ")\n";
            out << '\n';
            print_side_by_side(out, panels, o.width > 2 ? o.width - 2 : 1);
        }
    write_legends(out, stages, scales, o.color, o.width, true);
}

}  // namespace attnscope

namespace attnscope {

void write_compare_heatmaps(std::ostream& out, const TraceView& va, const TraceView& vb, Stage id,
                            const std::array<std::string, 2>& titles, std::size_t b, std::size_t h,
                            const TextOptions& o) {
    const StageView &sa = va.stage(id), &sb = vb.stage(id);
    if (sa.shape != sb.shape) throw UsageError("{heatmap}: the " + sa.name + " of A and B differ in shape");
    // One scale (A's) for both runs' stage: the same colour is the same number.
    const scale::Scale sc = scale::stage_scale(va, sa, {b}, {h}, o.range);
    const std::size_t nd = sa.shape.size(), cols = sa.shape[nd - 1];
    // Three panels side by side when every key fits in two columns; else each alone, stacked.
    const std::size_t third = (o.width > 12 ? o.width - 12 : 12) / 3, whole = o.width > 4 ? o.width - 4 : 4;
    const auto l = layout(va, sa.axes[nd - 2], b, sa.shape[nd - 2], cols, third, o.full);
    const std::size_t budget = l.keys.size() == cols && l.cw == 2 ? third : whole;
    const std::vector<Panel> panels = {render(va, sa, b, h, sc, o, budget, titles[0]),
                                       render(vb, sb, b, h, sc, o, budget, titles[1]),
                                       render_diff(va, vb, id, b, h, o, budget)};
    out << "\n== " << sa.name << ", " << (va.batched ? "batch " + std::to_string(b) + ", " : std::string()) << "head "
        << h << ": A | B | B - A\n\n";
    print_side_by_side(out, panels, o.width > 2 ? o.width - 2 : 1);
    write_legends(out, {&sa}, {sc}, o.color, o.width, true);
    char threshold[16];
    std::snprintf(threshold, sizeof threshold, "%g", kDiffBlank);
    const std::string words = "B - A  " + diff_cell(-1, 2) + " B below A, " + diff_cell(1, 2) +
                              " B above A, blank where |B - A| < " + threshold + ", " + masked_cell(2, o.color) +
                              " masked in both";
    const auto lines = wrap(words, o.width > 14 ? o.width - 12 : 2);
    for (const auto& line : lines) out << "          " << line << '\n';
}

}  // namespace attnscope
