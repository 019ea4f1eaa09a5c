// --cell: one weight's arithmetic, from q_i · k_j to key j's share of the output row.
#include "attnscope/base/errors.hpp"
#include "attnscope/report/report.hpp"

#include "text_util.hpp"

#include <cmath>
#include <cstdio>
#include <limits>
#include <ostream>

namespace attnscope {

using namespace text;

void check_cell(const CellRef& c, const Dims& d) {
    auto check = [](std::size_t i, std::size_t n, const char* what) {
        if (i >= n)
            throw UsageError("{cell}: " + std::string(what) + " " + std::to_string(i) + " does not exist (expected 0.." +
                             std::to_string(n - 1) + ")");
    };
    check(c.batch, d.B, "batch item");
    check(c.head, d.H, "head");
    check(c.query, d.Tq, "query");
    check(c.key, d.Tk, "key");
}

void write_cell(std::ostream& out, const TraceView& v, const CellRef& c, int decimals) {
    const Dims& d = v.dims;
    v.require(kCellNeeds, "cell");
    check_cell(c, d);
    const std::size_t b = c.batch, h = c.head, i = c.query, j = c.key;
    const StageView &Q = v.stage(kQ), &K = v.stage(kK), &V = v.stage(kV), &S = v.stage(kScores), &M = v.stage(kMask),
                    &MS = v.stage(kMaskedScores), &W = v.stage(kWeights), &C = v.stage(kContext);
    auto f = [&](double x) { return format_number(x, decimals); };
    const std::string qi = clip_label(axis_label(v, "Tq", b, i)), kj = clip_label(axis_label(v, "Tk", b, j));
    const std::size_t qo = matrix_offset(Q, b, h) + i * d.Dk, ko = matrix_offset(K, b, h) + j * d.Dk;
    const std::size_t so = matrix_offset(S, b, h) + i * d.Tk, mo = matrix_offset(M, b, 0) + i * d.Tk;

    out << "\n== one cell: " << (v.batched ? "batch " + std::to_string(b) + ", " : std::string()) << "head " << h
        << ", query " << i << " '" << qi << "', key " << j << " '" << kj << "'\n";
    // 1) q_i · k_j, term by term
    out << "\n  1) score before scaling: q_i · k_j = sum over the Dk = " << d.Dk << " features\n";
    double dot = 0;
    for (std::size_t k = 0; k < d.Dk; ++k) {
        const double a = Q.at(qo + k), e = K.at(ko + k);
        dot += a * e;
        out << "       " << pad_right("d" + std::to_string(k) + ":", 5) << pad_left(f(a), 10) << " × " << pad_left(f(e), 10) << " = " << pad_left(f(a * e), 10)
            << '\n';
    }
    out << "     sum = " << f(dot) << '\n';
    // 2) scale
    const double score = S.at(so + j);
    char scale[32];
    std::snprintf(scale, sizeof scale, "%.6g", v.scale);
    out << "  2) × scale " << scale << " (" << v.scale_source << ") = " << f(dot * v.scale) << '\n';
    out << "     stored: scores" << (v.batched ? "[" + std::to_string(b) + "]" : "") << "[" << h << "][" << i << "]["
        << j << "] = " << f(score) << '\n';
    // 3) mask
    const bool visible = M.at(mo + j) != 0;
    out << "  3) mask: key " << j << " is " << (visible ? "visible to" : "hidden from") << " query " << i << '\n';
    out << "     " << (visible ? "the masked score stays " + f(score) : "the masked score is -inf: the weight is exactly 0")
        << '\n';
    // 4) row max, exp, row sum, weight
    double row_max = -std::numeric_limits<double>::infinity(), row_sum = 0;
    std::size_t arg = 0;
    for (std::size_t k = 0; k < d.Tk; ++k) {
        double m = MS.at(matrix_offset(MS, b, h) + i * d.Tk + k);
        if (m > row_max) row_max = m, arg = k;
    }
    const double w = W.at(so + j);
    if (row_max == -std::numeric_limits<double>::infinity()) {
        out << "  4) every key of query " << i << " is masked: the whole row of weights is 0 (not NaN)\n";
    } else {
        for (std::size_t k = 0; k < d.Tk; ++k) {
            double m = MS.at(matrix_offset(MS, b, h) + i * d.Tk + k);
            row_sum += std::exp(m - row_max);
        }
        const double e = visible ? std::exp(score - row_max) : 0.0;
        out << "  4) row max over the visible keys = " << f(row_max) << " (key " << arg << " '"
            << clip_label(axis_label(v, "Tk", b, arg)) << "')\n";
        out << "     exp(" << (visible ? f(score) : "-inf") << " - (" << f(row_max) << ")) = " << f(e) << '\n';
        out << "     row sum of exp(m - max) over the " << d.Tk << " keys = " << f(row_sum) << '\n';
        out << "     weight = " << f(e) << " / " << f(row_sum) << " = " << f(e / row_sum) << "    [weights = " << f(w)
            << "]\n";
    }
    // 5) the value's share of the context row
    const std::size_t vo = matrix_offset(V, b, h) + j * d.Dv, co = matrix_offset(C, b, h) + i * d.Dv;
    out << "  5) value v_j, key " << j << "'s share w_ij · v_j, and context row " << i << " (all shares):\n";
    out << "       " << pad_right("", 4) << pad_left("v_j", 10) << "  " << pad_left("w·v_j", 10) << "  "
        << pad_left("context", 10) << '\n';
    for (std::size_t k = 0; k < d.Dv; ++k)
        out << "       d" << pad_right(std::to_string(k), 3) << pad_left(f(V.at(vo + k)), 10) << "  "
            << pad_left(f(w * V.at(vo + k)), 10) << "  " << pad_left(f(C.at(co + k)), 10) << '\n';
}

}  // namespace attnscope
