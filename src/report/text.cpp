// The readable report: each chosen stage with its formula, shape and values, token
// labels on rows and columns, long axes summarised around "…" as numpy prints them.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ostream>

#include "attnscope/base/errors.hpp"
#include "attnscope/report/report.hpp"
#include "text_util.hpp"

namespace attnscope {
namespace {

using namespace text;

// The indices shown along an axis of length n: all, or (unless --full) the ends with a gap between.
std::vector<std::size_t> summarised(std::size_t n, const TextOptions& o) {
    return shown(n, o.full ? n : 2 * o.edgeitems + 2, o.edgeitems);
}

// Prints one matrix; whether rows or columns were left out around "…".
bool print_matrix(std::ostream& out, const TraceView& v, const StageView& s, std::size_t offset, std::size_t b,
                  const TextOptions& o) {
    const std::size_t nd = s.shape.size();
    const std::size_t rows = s.shape[nd - 2], cols = s.shape[nd - 1];
    const std::string& row_axis = s.axes[nd - 2];
    const std::string& col_axis = s.axes[nd - 1];
    auto ri = summarised(rows, o), ci = summarised(cols, o);
    const auto label = [&](const std::string& axis, std::size_t i) { return clip_label(axis_label(v, axis, b, i)); };
    auto cell = [&](std::size_t i, std::size_t j) {
        double x = s.at(offset + i * cols + j);
        return s.dtype == DType::boolean ? std::string(x != 0 ? "1" : "0") : format_number(x, o.decimals);
    };
    // Column widths from the labels and every shown cell.
    std::size_t label_w = 0;
    for (std::size_t i : ri) label_w = std::max(label_w, i == kGap ? 1 : display_width(label(row_axis, i)));
    std::vector<std::size_t> w;
    auto measure = [&] {
        w.assign(ci.size(), 1);
        std::size_t total = 4 + label_w;
        for (std::size_t c = 0; c < ci.size(); ++c) {
            if (ci[c] != kGap) {
                w[c] = display_width(label(col_axis, ci[c]));
                for (std::size_t i : ri)
                    if (i != kGap) w[c] = std::max(w[c], cell(i, ci[c]).size());
            }
            total += 2 + w[c];
        }
        return total;
    };
    // Fewer columns around "…" until the matrix fits the terminal width (unless --full).
    for (std::size_t edge = o.edgeitems; measure() > o.width && !o.full && edge > 1;) {
        ci = shown(cols, 0, --edge);  // the ends, even of an axis shown() would keep whole
    }
    out << "    " << std::string(label_w, ' ');
    for (std::size_t c = 0; c < ci.size(); ++c)
        out << "  " << pad_left(ci[c] == kGap ? "…" : label(col_axis, ci[c]), w[c]);
    out << '\n';
    for (std::size_t i : ri) {
        out << "    " << pad_right(i == kGap ? "…" : label(row_axis, i), label_w);
        for (std::size_t c = 0; c < ci.size(); ++c) {
            std::string text = (i == kGap || ci[c] == kGap) ? "…" : cell(i, ci[c]);
            out << "  " << pad_left(text, w[c]);
        }
        out << '\n';
    }
    const auto gap = [](const std::vector<std::size_t>& at) { return std::count(at.begin(), at.end(), kGap) > 0; };
    return gap(ri) || gap(ci);
}

// Under the report's first matrix cut around "…": what it left out and how to see it.
const char* const kCutNote = "    (… stands for the rows and columns left out; --full shows every one)\n";

void check_range(const std::vector<std::size_t>& chosen, std::size_t n, const char* option, const char* what) {
    for (std::size_t i : chosen)
        if (i >= n)
            throw UsageError(std::string(option) + ": " + what + " " + std::to_string(i) +
                             " does not exist (expected 0.." + std::to_string(n - 1) + ")");
}

}  // namespace

// The header: what ran, on which sizes, with which scale, masks and experiments, what is
// shown, and the rows that see no key.
void write_run_header(std::ostream& out, const TraceView& v, const TextOptions& o) {
    const std::size_t width = o.width;
    const Dims& d = v.dims;
    out << "attnscope: " << (v.cross ? "cross-attention" : "self-attention") << ", " << d.H
        << (d.H == 1 ? " head" : " heads") << ", " << v.dtype << ", " << escape_control(v.source) << '\n';
    out << "  sizes   " << dims_line(d) << '\n';
    if (!v.batched) out << "          (x is 2-D: the results have no batch axis)\n";
    char scale[32];
    std::snprintf(scale, sizeof scale, "%.6g", v.scale);
    out << "  scale   " << scale << " = " << v.scale_source << '\n';
    // Lines that may be long wrap under their first word's column, within the width.
    const auto field = [&out, width](const char* name, const std::string& text) {
        const auto lines = wrap(text, width > 30 ? width - 10 : 20);
        for (std::size_t k = 0; k < lines.size(); ++k) out << (k ? "          " : name) << lines[k] << '\n';
    };
    if (!v.given_from.empty())
        field("  given   ", escape_control(v.given_from) + " (the run starts at Q, K and V: no x, no weights)");
    field("  masks   ",
          masks_line(v) +
              (v.spec.padding_dropped ? "; the bundle's key_padding_mask was dropped (--ignore-padding)" : ""));
    if (!v.spec.bundle_options.empty()) field("  config  ", escape_control(bundle_options_line(v.spec.bundle_options)));
    if (v.spec.zero_key)
        field("  zeroed  ", "key " + std::to_string(*v.spec.zero_key) +
                                "'s vector set to 0 in every head and batch item (--zero-key)");
    for (const auto& line : zero_key_story(v)) field("          ", line);
    if (!o.batches.empty() || !o.heads.empty()) {
        const auto list = [](const std::vector<std::size_t>& chosen, std::size_t n) {
            std::string s;
            for (std::size_t i : chosen) s += (s.empty() ? "" : ",") + std::to_string(i);
            return (chosen.size() == 1 ? " " : "s ") + s + " of " + std::to_string(n);
        };
        std::string shown;
        if (!o.batches.empty()) shown += "batch item" + list(o.batches, v.dims.B);
        if (!o.heads.empty()) shown += (shown.empty() ? "head" : "; head") + list(o.heads, v.dims.H);
        field("  shown   ", shown + " (--batch, --head)");
    }
    if (v.dims.G && v.dims.G != v.dims.H) field("  K/V     ", sharing_line(d));
    if (v.spec.rope) {
        const Rope& r = *v.spec.rope;
        const std::string where = positions_words(v);
        field("  rope    ", std::string(r.style == RopeStyle::half ? "pairs (j, j + R/2)" : "pairs (2j, 2j + 1)") +
                                ", R = " + std::to_string(r.dim.value_or(d.Dk)) + " of Dk = " + std::to_string(d.Dk) +
                                ", angle pos · " + option_num(r.base) + "^(-2j/R)" +
                                (r.scaling.empty() ? "" : ", " + r.scaling) + (where.empty() ? "" : "; " + where));
    }
    if (!v.fully_masked.empty()) {
        out << "  rows with every key masked (weights all 0):";
        for (const auto& r : v.fully_masked) {
            out << (v.batched ? " batch " + std::to_string(r.batch) + " query " : " query ") << r.query;
            if (!v.query_tokens.empty()) out << " '" << clip_label(axis_label(v, "Tq", r.batch, r.query)) << "'";
            out << (&r == &v.fully_masked.back() ? "" : ",");
        }
        out << '\n';
    }
}

namespace {

// One stage: its formula and shape, the explanation when asked, then its heatmaps or
// each chosen matrix.
// `told`: whether the report said already what "…" leaves out.
void write_stage(std::ostream& out, const TraceView& v, const StageView& s, const TextOptions& o,
                 const std::vector<std::size_t>& batches, const std::vector<std::size_t>& heads, bool& told) {
    out << "\n== " << s.name << " = " << s.formula << '\n';
    out << "   shape " << shape_text(s) << '\n';
    if (o.explain)
        for (const auto& para : explain_stage(v, s))
            for (const auto& line : wrap(para, o.width > 23 ? o.width - 3 : 20)) out << "   " << line << '\n';
    if (o.heatmap && drawn_as_heatmap(s)) {
        write_heatmaps(out, v, s, o);
        return;
    }
    // The leading axes (B, H or G, Tq) pick matrices; the last two are printed.
    for (const MatrixRef& m : matrices_of(v, s, batches, heads, o.full ? std::size_t(-1) : 2 * o.edgeitems)) {
        if (!m.title.empty())
            out << "\n  -- " << m.title << '\n';
        else
            out << '\n';
        if (print_matrix(out, v, s, m.offset, m.batch, o) && !told) {
            out << kCutNote;
            told = true;
        }
    }
}

}  // namespace

void check_selection(const TextOptions& o, const Dims& d) {
    check_range(o.batches, d.B, "{batch}", "batch item");
    check_range(o.heads, d.H, "{head}", "head");
}

void write_text(std::ostream& out, const TraceView& v, const TextOptions& o) {
    check_selection(o, v.dims);
    const auto batches = chosen_or_all(o.batches, v.dims.B);
    const auto heads = chosen_or_all(o.heads, v.dims.H);
    write_run_header(out, v, o);
    bool told = false;
    for (const auto& name : o.stages) write_stage(out, v, v.stage(name), o, batches, heads, told);
}

}  // namespace attnscope
