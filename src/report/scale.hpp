// The one colour-scale rule of every heatmap: terminal (--heatmap, --panels), HTML and
// SVG. Internal to the library.
//
//   * One scale per stage, shared by every batch item, head and panel drawn: the same
//     number has the same colour wherever the stage is drawn.
//   * scores and masked_scores are the same logits before and after the mask: when the
//     run has both, they share one scale (over the finite values of both).
//   * weights and sink_weight are probabilities: 0..1. The mask: may attend / masked.
//   * Q, K, V, context, output, bias, head_output are signed: −m..m, white at 0, m the
//     largest |value|.
//   * --range changes the extent: auto (the above, over the matrices drawn), fixed (over
//     every batch item and head of the run, drawn or not, so pictures made separately
//     compare), row (each query row from its own smallest to its largest visible value),
//     LO,HI (given; values beyond are drawn at the ends). --log-scale places weights and
//     sink_weight by log10 (the other stages stay linear).
// Every legend states the rule it used (Scale::rule).
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "attnscope/report/report.hpp"
#include "colour.hpp"
#include "text_util.hpp"

namespace attnscope::scale {

struct Scale {
    colour::Palette palette = colour::Palette::viridis;
    ColorKind kind = ColorKind::sequential;
    double lo = 0, hi = 1;  // the values at the two ends (row mode: of the row, see for_row)
    bool log = false;       // positions by log10 (lo > 0)
    bool per_row = false;   // --range row
    std::string rule;       // the rule in words, for the legend

    // Where x sits on the palette, 0..1. -inf at 0, inf at 1; a constant scale in the middle.
    double position(double x) const {
        if (std::isinf(x)) return x < 0 ? 0 : 1;
        if (std::isnan(x)) return 0;
        if (log) {
            if (!(x > lo)) return 0;
            if (!(hi > lo)) return 0.5;
            return std::clamp((std::log10(x) - std::log10(lo)) / (std::log10(hi) - std::log10(lo)), 0.0, 1.0);
        }
        if (!(hi > lo)) return 0.5;
        return std::clamp((x - lo) / (hi - lo), 0.0, 1.0);
    }
};

inline bool probability(const StageView& s) { return stage_info(s.id).color == ColorKind::probability; }

// The stages whose values share the scale of s: scores and masked_scores together, when
// the view has both; otherwise s alone.
inline std::vector<const StageView*> scale_group(const TraceView& v, const StageView& s) {
    if (s.id == kScores || s.id == kMaskedScores) {
        const StageView *a = v.find(kScores), *b = v.find(kMaskedScores);
        if (a && b) return {a, b};
    }
    return {&s};
}

// lo and hi of the finite values of rows [r0, r1) of matrix (b, h) of s into lo, hi;
// `positive` keeps values > 0 only (for log scales).
inline void extend(const StageView& s, std::size_t b, std::size_t h, std::size_t r0, std::size_t r1, bool positive,
                   double& lo, double& hi, double& big) {
    const std::size_t nd = s.shape.size(), cols = s.shape[nd - 1];
    const std::size_t off = matrix_offset(s, b, h);
    for (std::size_t k = r0 * cols; k < r1 * cols; ++k) {
        const double x = s.at(off + k);
        if (!std::isfinite(x) || (positive && !(x > 0))) continue;
        lo = std::min(lo, x), hi = std::max(hi, x), big = std::max(big, std::fabs(x));
    }
}

// Ends for the values gathered: diverging -m..m; else lo..hi; none: 0..0 (or 0..1).
inline void settle(Scale& sc, double lo, double hi, double big) {
    if (sc.kind == ColorKind::diverging) {
        sc.lo = big > 0 ? -big : -1, sc.hi = big > 0 ? big : 1;
    } else if (lo <= hi) {
        sc.lo = lo, sc.hi = hi;
    } else {
        sc.lo = 0, sc.hi = sc.kind == ColorKind::probability ? 1 : 0;
    }
}

// The scale of stage s drawn for `batches` x `heads` (heads: query heads; ignored by a
// stage without a head axis).
inline Scale stage_scale(const TraceView& v, const StageView& s, const std::vector<std::size_t>& batches,
                         const std::vector<std::size_t>& heads, const ColourRange& range) {
    Scale sc;
    sc.kind = stage_info(s.id).color;
    sc.palette = sc.kind == ColorKind::diverging ? colour::Palette::blue_red : colour::Palette::viridis;
    sc.log = range.log && probability(s);
    const bool all = range.mode == ColourRange::fixed;
    const auto bs = all ? text::chosen_or_all({}, v.dims.B) : batches;
    const auto hs = all ? text::chosen_or_all({}, v.dims.H) : heads;
    const std::string where = all ? " over every batch item and head of the run (--range fixed)" : "";
    if (sc.kind == ColorKind::boolean) {
        sc.rule = "may attend or masked";
        return sc;
    }
    if (range.mode == ColourRange::given) {
        sc.lo = range.lo, sc.hi = range.hi;
        sc.rule = text::short_num(range.lo) + ".." + text::short_num(range.hi) + " as given (--range), " +
                  (sc.log ? "log10, " : "") + "values beyond at the ends";
        return sc;
    }
    if (range.mode == ColourRange::row) {
        sc.per_row = true;
        sc.rule = std::string("each query row on its own scale, ") +
                  (sc.kind == ColorKind::diverging     ? "-m..m (m its largest |value|)"
                   : sc.log                            ? "log10, its smallest positive to its largest value"
                   : sc.kind == ColorKind::probability ? "0 to its largest value"
                                                       : "its smallest to its largest finite value");
        return sc;
    }
    // auto and fixed: over every matrix of the scale group drawn (fixed: of the run).
    const auto group = scale_group(v, s);
    double lo = std::numeric_limits<double>::infinity(), hi = -lo, big = 0;
    if (!(sc.kind == ColorKind::probability && !sc.log))
        for (const StageView* g : group) {
            const std::size_t rows = g->shape[g->shape.size() - 2];
            for (std::size_t b : bs)
                for (std::size_t h : (text::has_heads(*g) ? hs : std::vector<std::size_t>{0}))
                    extend(*g, b, h, 0, rows, sc.log, lo, hi, big);
        }
    if (sc.kind == ColorKind::probability) {
        sc.hi = 1;
        sc.lo = sc.log ? (lo <= hi ? lo : 1e-6) : 0;
        sc.rule = sc.log ? "log10, the smallest positive value" + where + " to 1" : "0..1";
    } else {
        settle(sc, lo, hi, big);
        const std::string of = group.size() > 1 ? "scores and masked_scores (they share it)" : s.name;
        sc.rule = sc.kind == ColorKind::diverging ? "-m..m, white at 0, m the largest |value|" + where
                                                  : "the smallest to the largest finite value of " + of + where;
    }
    return sc;
}

// Row mode: the scale of row i of matrix (b, h) (its finite, and for log positive, values;
// hidden cells of masked_scores are -inf and of weights 0, so they do not count).
inline Scale for_row(const Scale& base, const StageView& s, std::size_t b, std::size_t h, std::size_t i) {
    if (!base.per_row) return base;
    Scale sc = base;
    double lo = std::numeric_limits<double>::infinity(), hi = -lo, big = 0;
    extend(s, b, h, i, i + 1, sc.log, lo, hi, big);
    settle(sc, lo, hi, big);
    if (sc.kind == ColorKind::probability && !sc.log) sc.lo = 0;  // 0 to the row's largest weight
    return sc;
}

// Row mode for a row given as n values get(0..n-1).
template <typename Get>
Scale for_values(const Scale& base, std::size_t n, Get get) {
    if (!base.per_row) return base;
    Scale sc = base;
    double lo = std::numeric_limits<double>::infinity(), hi = -lo, big = 0;
    for (std::size_t k = 0; k < n; ++k) {
        const double x = get(k);
        if (!std::isfinite(x) || (sc.log && !(x > 0))) continue;
        lo = std::min(lo, x), hi = std::max(hi, x), big = std::max(big, std::fabs(x));
    }
    settle(sc, lo, hi, big);
    if (sc.kind == ColorKind::probability && !sc.log) sc.lo = 0;
    return sc;
}

// The numbers at the ends of a legend: "row min" / "row max" in row mode.
inline std::pair<std::string, std::string> end_words(const Scale& sc) {
    if (sc.per_row) return {"row min", "row max"};
    return {text::short_num(sc.lo), text::short_num(sc.hi)};
}

}  // namespace attnscope::scale
