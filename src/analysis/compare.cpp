// Comparing two runs stage by stage (--compare).
#include "attnscope/analysis/compare.hpp"

#include <cmath>
#include <limits>

namespace attnscope {
namespace {

StageDiff diff(const StageView& x, const StageView& y) {
    StageDiff r;
    r.id = x.id;
    r.shape_a = x.shape;
    r.shape_b = y.shape;
    r.same_shape = x.shape == y.shape;
    if (!r.same_shape) return r;
    double sum = 0;
    std::size_t at = 0, n = 0;
    for (std::size_t k = 0; k < x.size(); ++k) {
        const double p = x.at(k), q = y.at(k);
        double d = p == q ? 0.0 : std::fabs(p - q);
        if (std::isnan(d)) d = std::numeric_limits<double>::infinity();  // -inf vs a number
        if (d > r.max_abs) r.max_abs = d, at = k;
        if (std::isfinite(d))
            sum += d, ++n;
        else
            ++r.infinite;
    }
    r.finite_mean_abs = n ? sum / double(n) : 0.0;
    r.mean_abs = r.infinite ? std::numeric_limits<double>::infinity() : r.finite_mean_abs;
    if (r.max_abs > 0) {
        r.at.resize(x.shape.size());
        for (std::size_t i = x.shape.size(), rest = at; i-- > 0;) r.at[i] = rest % x.shape[i], rest /= x.shape[i];
    }
    return r;
}

}  // namespace

std::vector<StageDiff> compare_stages(const TraceView& a, const TraceView& b) {
    std::vector<StageDiff> out;
    for (const StageView& x : a.stages)
        if (const StageView* y = b.find(x.id)) out.push_back(diff(x, *y));
    return out;
}

}  // namespace attnscope
