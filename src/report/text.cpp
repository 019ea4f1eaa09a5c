// The readable report: each chosen stage with its formula, shape and values, token
// labels on rows and columns, long axes summarised around "…" as numpy prints them.
#include "attnscope/base/errors.hpp"
#include "attnscope/report/report.hpp"

#include "text_util.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ostream>

namespace attnscope {
namespace {

using namespace text;

// The indices shown along an axis of length n: all, or the ends with a gap (npos) between.
std::vector<std::size_t> shown(std::size_t n, const TextOptions& o) {
    std::vector<std::size_t> idx;
    if (o.full || n <= 2 * o.edgeitems + 2) {
        for (std::size_t i = 0; i < n; ++i) idx.push_back(i);
        return idx;
    }
    for (std::size_t i = 0; i < o.edgeitems; ++i) idx.push_back(i);
    idx.push_back(std::string::npos);
    for (std::size_t i = n - o.edgeitems; i < n; ++i) idx.push_back(i);
    return idx;
}

void print_matrix(std::ostream& out, const TraceView& v, const StageView& s, std::size_t offset, std::size_t b,
                  const TextOptions& o) {
    const std::size_t nd = s.shape.size();
    const std::size_t rows = s.shape[nd - 2], cols = s.shape[nd - 1];
    const std::string& row_axis = s.axes[nd - 2];
    const std::string& col_axis = s.axes[nd - 1];
    auto ri = shown(rows, o), ci = shown(cols, o);
    auto cell = [&](std::size_t i, std::size_t j) {
        double x = s.at(offset + i * cols + j);
        return s.dtype == DType::boolean ? std::string(x != 0 ? "1" : "0") : format_number(x, o.decimals);
    };
    // Column widths from the labels and every shown cell.
    std::size_t label_w = 0;
    for (std::size_t i : ri) label_w = std::max(label_w, i == std::string::npos ? 1 : display_width(axis_label(v, row_axis, b, i)));
    std::vector<std::size_t> w;
    auto measure = [&] {
        w.assign(ci.size(), 1);
        std::size_t total = 4 + label_w;
        for (std::size_t c = 0; c < ci.size(); ++c) {
            if (ci[c] != std::string::npos) {
                w[c] = display_width(axis_label(v, col_axis, b, ci[c]));
                for (std::size_t i : ri)
                    if (i != std::string::npos) w[c] = std::max(w[c], cell(i, ci[c]).size());
            }
            total += 2 + w[c];
        }
        return total;
    };
    // Fewer columns around "…" until the matrix fits the terminal width (unless --full).
    for (std::size_t edge = o.edgeitems; measure() > o.width && !o.full && edge > 1;) {
        TextOptions narrower = o;
        narrower.edgeitems = --edge;
        ci = shown(cols, narrower);
        if (cols <= 2 * edge + 2) {  // shown() keeps short axes whole: summarise by hand
            ci.clear();
            for (std::size_t k = 0; k < edge; ++k) ci.push_back(k);
            ci.push_back(std::string::npos);
            for (std::size_t k = cols - edge; k < cols; ++k) ci.push_back(k);
        }
    }
    out << "    " << std::string(label_w, ' ');
    for (std::size_t c = 0; c < ci.size(); ++c)
        out << "  " << pad_left(ci[c] == std::string::npos ? "…" : axis_label(v, col_axis, b, ci[c]), w[c]);
    out << '\n';
    for (std::size_t i : ri) {
        out << "    " << pad_right(i == std::string::npos ? "…" : axis_label(v, row_axis, b, i), label_w);
        for (std::size_t c = 0; c < ci.size(); ++c) {
            std::string text = (i == std::string::npos || ci[c] == std::string::npos) ? "…" : cell(i, ci[c]);
            out << "  " << pad_left(text, w[c]);
        }
        out << '\n';
    }
}


void check_range(const std::vector<std::size_t>& chosen, std::size_t n, const char* option, const char* what) {
    for (std::size_t i : chosen)
        if (i >= n)
            throw UsageError(std::string(option) + ": " + what + " " + std::to_string(i) + " does not exist (expected 0.." +
                             std::to_string(n - 1) + ")");
}

}  // namespace

void check_selection(const TextOptions& o, const Dims& d) {
    check_range(o.batches, d.B, "{batch}", "batch item");
    check_range(o.heads, d.H, "{head}", "head");
}

void write_text(std::ostream& out, const TraceView& v, const TextOptions& o) {
    const Dims& d = v.dims;
    check_selection(o, d);
    const auto batches = chosen_or_all(o.batches, d.B);
    const auto heads = chosen_or_all(o.heads, d.H);

    // Header: what ran, on which sizes, with which scale and masks.
    out << "attnscope: " << (v.cross ? "cross-attention" : "self-attention") << ", " << d.H
        << (d.H == 1 ? " head" : " heads") << ", " << v.dtype << ", " << v.source << '\n';
    out << "  sizes   " << dims_line(d) << '\n';
    if (!v.batched) out << "          (x is 2-D: the results have no batch axis)\n";
    char scale[32];
    std::snprintf(scale, sizeof scale, "%.6g", v.scale);
    out << "  scale   " << scale << " = " << v.scale_source << '\n';
    out << "  masks   " << masks_line(v) << '\n';
    if (!v.fully_masked.empty()) {
        out << "  rows with every key masked (weights all 0):";
        for (const auto& r : v.fully_masked) {
            out << (v.batched ? " batch " + std::to_string(r.batch) + " query " : " query ") << r.query;
            if (!v.query_tokens.empty()) out << " '" << v.query_tokens[r.batch][r.query] << "'";
            out << (&r == &v.fully_masked.back() ? "" : ",");
        }
        out << '\n';
    }

    for (const auto& name : o.stages) {
        const StageView& s = v.stage(name);
        std::string axes, sizes;
        for (std::size_t k = 0; k < s.shape.size(); ++k) {
            axes += (k ? ", " : "") + s.axes[k];
            sizes += (k ? ", " : "") + std::to_string(s.shape[k]);
        }
        out << "\n== " << s.name << " = " << s.formula << '\n';
        out << "   shape (" << axes << ") = (" << sizes << ")\n";
        if (o.explain)
            for (const auto& para : explain_stage(v, s))
                for (const auto& line : wrap(para, o.width > 23 ? o.width - 3 : 20)) out << "   " << line << '\n';
        if (o.heatmap && s.axes.size() >= 2 && s.axes.back() == "Tk" && s.axes[s.axes.size() - 2] == "Tq") {
            write_heatmaps(out, v, s, o);
            continue;
        }
        // The leading axes (B and/or H) pick matrices; the last two are printed.
        const bool has_heads = std::find(s.axes.begin(), s.axes.end(), "H") != s.axes.end();
        const std::size_t matrix = s.shape[s.shape.size() - 2] * s.shape.back();
        for (std::size_t b : batches) {
            for (std::size_t h : has_heads ? heads : std::vector<std::size_t>{0}) {
                std::string title;
                if (v.batched) title += "batch " + std::to_string(b);
                if (has_heads) title += std::string(title.empty() ? "" : ", ") + "head " + std::to_string(h);
                if (!title.empty()) out << "\n  -- " << title << '\n';
                else out << '\n';
                std::size_t offset = (b * (has_heads ? d.H : 1) + (has_heads ? h : 0)) * matrix;
                print_matrix(out, v, s, offset, b, o);
            }
        }
    }
}

}  // namespace attnscope
