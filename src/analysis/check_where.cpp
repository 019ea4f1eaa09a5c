// Where a difference sits when no mistake of the catalogue reproduces it: which cells,
// rows, heads or batch items, a factor or an offset, another axis order.
#include <algorithm>
#include <cmath>
#include <set>

#include "check_internal.hpp"

namespace attnscope::check_detail {
namespace {

std::string index_list(const std::set<std::size_t>& s, std::size_t max = 8) {
    std::string out;
    std::size_t n = 0;
    for (std::size_t v : s) {
        if (n++ == max) return out + ", … (" + std::to_string(s.size()) + " in all)";
        out += (out.empty() ? "" : ", ") + std::to_string(v);
    }
    return out;
}

// What the differing cells of one stage have in common.
struct Tally {
    Axes canon;
    std::size_t ax_b = 99, ax_h = 99, ax_t = 99, ax_k = 99;  // axes (99: none)
    std::set<std::size_t> batches, heads, rows;
    std::size_t bad = 0, bad_masked = 0, bad_nan = 0;
    bool factor_ok = true, offset_ok = true;  // theirs = c · ref, theirs = ref + c everywhere
    double factor = kNaN, offset = kNaN;
};

void tally_cell(Tally& y, const Tolerance& tol, double u, double x) {
    if (std::isfinite(x) && std::isfinite(u)) {
        if (std::fabs(x) > 1e-12) {
            if (std::isnan(y.factor)) y.factor = u / x;
            y.factor_ok &= std::fabs(u / x - y.factor) <= 1e-6 * std::max(1.0, std::fabs(y.factor));
        } else {
            y.factor_ok &= std::fabs(u) <= tol.atol;
        }
        if (std::isnan(y.offset)) y.offset = u - x;
        y.offset_ok &= std::fabs(u - x - y.offset) <= std::max(tol.atol, tol.rtol * std::fabs(x));
    } else if (!(u == x || (x == -kInf && u <= kLargeNegative))) {
        y.factor_ok = y.offset_ok = false;
    }
}

Tally tally(const TraceView& ref, const StageView& s, const Theirs& t, const Dense& r, const Dense& ref_mask) {
    Tally y;
    y.canon = canonical_axes(ref, s);
    for (std::size_t i = 0; i < y.canon.size(); ++i) {
        const char c = y.canon[i].letter;
        if (c == 'b') y.ax_b = i;
        if (c == 'h') y.ax_h = i;
        if (c == 't' || c == 'q') y.ax_t = i;
        if (c == 'k') y.ax_k = i;
    }
    std::vector<std::size_t> full;
    for (const auto& a : y.canon) full.push_back(a.size);
    const bool with_mask = y.ax_k < full.size() && y.ax_b < full.size() && y.ax_t < full.size() &&
                           ref_mask.v.size() == full[y.ax_b] * full[y.ax_t] * full[y.ax_k];
    for (std::size_t k = 0; k < r.v.size(); ++k) {
        const double u = t.values[k], x = r.v[k], d = std::fabs(u - x);
        tally_cell(y, t.tol, u, x);
        const bool differs = !(u == x || (x == -kInf && u <= kLargeNegative)) &&
                             (!std::isfinite(d) || d > std::max(t.tol.atol, t.tol.rtol * std::fabs(x)));
        if (!differs) continue;
        ++y.bad;
        if (std::isnan(u)) ++y.bad_nan;
        const auto at = unravel(k, full);
        if (y.ax_b < at.size()) y.batches.insert(at[y.ax_b]);
        if (y.ax_h < at.size()) y.heads.insert(at[y.ax_h]);
        if (y.ax_t < at.size()) y.rows.insert(at[y.ax_t]);
        if (with_mask && ref_mask.v[(at[y.ax_b] * full[y.ax_t] + at[y.ax_t]) * full[y.ax_k] + at[y.ax_k]] == 0)
            ++y.bad_masked;
    }
    return y;
}

std::string factor_words(double factor, double dk) {
    const double sq = std::sqrt(dk);
    std::string hint;
    if (std::fabs(factor - sq) < 1e-6 * sq) hint = " = √Dk";
    if (std::fabs(factor - 1 / sq) < 1e-6) hint = " = 1/√Dk";
    if (std::fabs(factor - dk) < 1e-6 * dk && dk != sq) hint = " = Dk";
    if (std::fabs(factor - 1 / dk) < 1e-6 && dk != sq) hint = " = 1/Dk";
    const double delta = factor - 1;  // near 1, "1 ×" would hide it: (1 + 4e-05)
    const std::string f = std::fabs(delta) < 1e-2
                              ? "(1 " + std::string(delta < 0 ? "- " : "+ ") + num(std::fabs(delta)) + ")"
                              : num(factor);
    return "theirs = " + f + hint + " × the reference everywhere (a scale factor)";
}

}  // namespace

std::vector<Finding> describe(const TraceView& ref, const StageView& s, const Theirs& t, const Dense& r,
                              const Dense& ref_mask) {
    const Tally y = tally(ref, s, t, r, ref_mask);
    auto size = [&](std::size_t ax) { return ax < y.canon.size() ? y.canon[ax].size : 0; };
    std::vector<Finding> out;
    out.push_back({"cells", std::to_string(y.bad) + " of " + std::to_string(r.v.size()) + " cells differ"});
    if (y.bad_nan) out.push_back({"nan", std::to_string(y.bad_nan) + " of them are NaN in theirs"});
    if (y.factor_ok && !std::isnan(y.factor) && std::fabs(y.factor - 1) > 1e-9)
        out.push_back({"factor", factor_words(y.factor, double(ref.dims.Dk))});
    else if (y.offset_ok && !std::isnan(y.offset) && y.offset != 0)
        out.push_back({"offset", "theirs = the reference + " + num(y.offset) + " everywhere (a constant added)"});
    if (size(y.ax_k) && y.bad && y.bad_masked == y.bad)
        out.push_back({"masked-cells", "only in masked cells (keys the mask hides): check how the mask is applied"});
    else if (size(y.ax_k) && y.bad && y.bad_masked == 0 && ref.mask_rule.masking())
        out.push_back({"visible-cells", "only in cells the mask leaves visible"});
    if (size(y.ax_b) > 1 && y.batches.size() < size(y.ax_b))
        out.push_back({"batch", "only in batch items " + index_list(y.batches)});
    if (size(y.ax_h) > 1 && y.heads.size() < size(y.ax_h))
        out.push_back({"heads", "only in heads " + index_list(y.heads)});
    if (size(y.ax_t) > 1 && y.rows.size() < size(y.ax_t))
        out.push_back(
            {"rows", std::string("only in ") + (size(y.ax_k) ? "query" : "position") + " rows " + index_list(y.rows)});
    return out;
}

void describe_orders(const TraceView& ref, const StageView& s, const Theirs& t, const Dense& r,
                     std::vector<Finding>& out) {
    const auto canon = canonical_axes(ref, s);
    std::string letters;
    for (const auto& a : canon)
        if (a.size > 1) letters += a.letter;
    if (letters.size() != t.array->shape.size() || letters.size() > 4) return;
    std::sort(letters.begin(), letters.end());
    const std::vector<double> raw = t.array->doubles();
    do {
        const auto l = stage_layout(letters, canon, nullptr);
        if (!l || l->shape != t.array->shape || l->signature == t.layout.signature) continue;
        const auto map = cell_map(*l, canon);
        std::vector<double> v(raw.size());
        for (std::size_t k = 0; k < raw.size(); ++k) v[map[k]] = raw[k];
        if (compare(v, r.v, t.tol).match) {
            std::string swapped = t.layout.signature;
            for (char& ch : swapped) ch = ch == 'q' ? 'k' : ch == 'k' ? 'q' : ch;
            if (swapped != t.layout.signature && l->signature == swapped)
                out.push_back({"transpose", "theirs is the reference transposed (query and key axes swapped)"});
            out.push_back({"axes", "their numbers match when read in the order " + l->name() + ": pass {axes} " +
                                       t.name + "=" + l->name()});
            return;
        }
    } while (std::next_permutation(letters.begin(), letters.end()));
}

}  // namespace attnscope::check_detail
