// The check's comparison: theirs and the reference cell by cell, within the tolerance of
// the precision theirs was computed in.
#include <algorithm>
#include <cmath>

#include "check_internal.hpp"

namespace attnscope::check_detail {

Cmp compare(const std::vector<double>& theirs, const std::vector<double>& ref, Tolerance tol) {
    Cmp c;
    double num2 = 0, den2 = 0;
    for (std::size_t k = 0; k < ref.size(); ++k) {
        const double u = theirs[k], r = ref[k];
        double d;
        if (u == r || (std::isnan(u) && std::isnan(r))) {
            d = 0;
        } else if (r == -kInf && u <= kLargeNegative) {
            d = 0, ++c.large_negative;
        } else if (!std::isfinite(u) || !std::isfinite(r)) {
            d = kInf, ++c.nonfinite;
        } else {
            d = std::fabs(u - r);
            num2 += d * d;
            c.needed = std::max(c.needed, d / std::max(1.0, std::fabs(r)));
        }
        if (std::isfinite(r)) den2 += r * r;
        if (d > std::max(tol.atol, tol.rtol * std::fabs(r)) || (d > 0 && !std::isfinite(d))) ++c.bad;
        if (d > c.max_abs) c.max_abs = d, c.at = k;
    }
    c.match = c.bad == 0;
    c.relative = c.nonfinite ? kInf : den2 > 0 ? std::sqrt(num2 / den2) : std::sqrt(num2);
    if (c.nonfinite) c.needed = kInf;
    return c;
}

const Precision& precision_info(const std::string& dtype) {
    for (const Precision& p : kPrecisions)
        if (p.name == dtype) return p;
    return kPrecisions[0];
}

Tolerance tolerance_of(const Array& a, const CheckOptions& o) {
    Tolerance t = default_tolerance(precision_of(a.dtype, o.computed));
    if (o.rtol) t.rtol = t.atol = *o.rtol;
    if (o.atol) t.atol = *o.atol;
    return t;
}

// One stage of the reference, and theirs compared with it when given.
StageCheck check_stage(const StageView& s, const Theirs* t) {
    StageCheck sc;
    sc.id = s.id, sc.name = s.name, sc.ref_axes = s.axes, sc.ref_shape = s.shape;
    if (!t) return sc;
    std::vector<double> r(s.size());
    for (std::size_t k = 0; k < r.size(); ++k) r[k] = s.at(k);
    const Cmp c = compare(t->values, r, t->tol);
    sc.given = true, sc.their_name = t->name, sc.dtype = t->array->dtype, sc.axes = t->layout.name();
    sc.precision = t->precision, sc.reading = t->reading;
    sc.their_shape = t->array->shape, sc.tol = t->tol, sc.match = c.match, sc.max_abs_diff = c.max_abs;
    sc.relative_error = c.relative, sc.mismatched = c.bad, sc.cells = r.size();
    sc.rtol_needed = c.needed, sc.nonfinite = c.nonfinite, sc.large_negative_fill = c.large_negative;
    // Rounding: every cell within √eps of the precision (half its digits), in float32 or less.
    const Precision& p = precision_info(t->precision);
    sc.rounding_level = !c.match && p.eps > kPrecisions[0].eps && c.needed <= std::sqrt(p.eps);
    if (c.max_abs > 0) {
        const std::size_t k = std::size_t(std::find(t->map.begin(), t->map.end(), c.at) - t->map.begin());
        sc.at = unravel(k, t->array->shape);
        sc.at_ref = unravel(c.at, s.shape);
        sc.theirs_at = t->values[c.at], sc.ref_at = r[c.at];
    }
    return sc;
}

}  // namespace attnscope::check_detail

namespace attnscope {

using namespace check_detail;

Tolerance default_tolerance(const std::string& precision) {
    const Precision& p = precision_info(precision);
    return {p.tol, p.tol};
}

std::string precision_of(const std::string& dtype, const std::string& computed) {
    return precision_info(computed).eps > precision_info(dtype).eps ? computed : dtype;
}

}  // namespace attnscope
