// --cell: one weight's arithmetic, from q_i · k_j to key j's share of the output row.
#include <cmath>
#include <cstdio>
#include <limits>
#include <ostream>

#include "attnscope/base/errors.hpp"
#include "attnscope/report/report.hpp"
#include "text_util.hpp"

namespace attnscope {

using namespace text;

void check_cell(const CellRef& c, const Dims& d) {
    auto check = [](std::size_t i, std::size_t n, const char* what) {
        if (i >= n)
            throw UsageError("{cell}: " + std::string(what) + " " + std::to_string(i) +
                             " does not exist (expected 0.." + std::to_string(n - 1) + ")");
    };
    check(c.batch, d.B, "batch item");
    check(c.head, d.H, "head");
    check(c.query, d.Tq, "query");
    check(c.key, d.Tk, "key");
}

namespace {

// The cell being explained: the run, its batch item, head, query and key, and how
// numbers are printed.
struct CellWalk {
    const TraceView& v;
    std::size_t b, h, i, j;
    int decimals;
    std::string f(double x) const { return format_number(x, decimals); }
};

// 1) q_i · k_j, term by term. Returns the sum.
double write_dot(std::ostream& out, const CellWalk& c) {
    const Dims& d = c.v.dims;
    const StageView &Q = c.v.stage(kQ), &K = c.v.stage(kK);
    const std::size_t qo = matrix_offset(Q, c.b, c.h) + c.i * d.Dk, ko = matrix_offset(K, c.b, c.h) + c.j * d.Dk;
    out << "\n  1) score before scaling: q_i · k_j = sum over the Dk = " << d.Dk << " features\n";
    double dot = 0;
    for (std::size_t k = 0; k < d.Dk; ++k) {
        const double a = Q.at(qo + k), e = K.at(ko + k);
        dot += a * e;
        out << "       " << pad_right("d" + std::to_string(k) + ":", 5) << pad_left(c.f(a), 10) << " × "
            << pad_left(c.f(e), 10) << " = " << pad_left(c.f(a * e), 10) << '\n';
    }
    out << "     sum = " << c.f(dot) << '\n';
    return dot;
}

// 2) × scale, and the stored score; 3) the mask. Returns whether key j is visible.
bool write_scale_and_mask(std::ostream& out, const CellWalk& c, double dot, double score) {
    const TraceView& v = c.v;
    char scale[32];
    std::snprintf(scale, sizeof scale, "%.6g", v.scale);
    out << "  2) × scale " << scale << " (" << v.scale_source << ") = " << c.f(dot * v.scale) << '\n';
    out << "     stored: scores" << (v.batched ? "[" + std::to_string(c.b) + "]" : "") << "[" << c.h << "][" << c.i
        << "][" << c.j << "] = " << c.f(score) << '\n';
    const StageView& M = v.stage(kMask);
    const bool visible = M.at(matrix_offset(M, c.b, 0) + c.i * v.dims.Tk + c.j) != 0;
    out << "  3) mask: key " << c.j << " is " << (visible ? "visible to" : "hidden from") << " query " << c.i << '\n';
    out << "     "
        << (visible ? "the masked score stays " + c.f(score) : "the masked score is -inf: the weight is exactly 0")
        << '\n';
    return visible;
}

// 4) the row max, exp, the row sum and the weight, checked against the stored weight w.
void write_softmax(std::ostream& out, const CellWalk& c, double score, bool visible, double w) {
    const Dims& d = c.v.dims;
    const StageView& MS = c.v.stage(kMaskedScores);
    double row_max = -std::numeric_limits<double>::infinity(), row_sum = 0;
    std::size_t arg = 0;
    for (std::size_t k = 0; k < d.Tk; ++k) {
        double m = MS.at(matrix_offset(MS, c.b, c.h) + c.i * d.Tk + k);
        if (m > row_max) row_max = m, arg = k;
    }
    if (row_max == -std::numeric_limits<double>::infinity()) {
        out << "  4) every key of query " << c.i << " is masked: the whole row of weights is 0 (not NaN)\n";
        return;
    }
    for (std::size_t k = 0; k < d.Tk; ++k) {
        double m = MS.at(matrix_offset(MS, c.b, c.h) + c.i * d.Tk + k);
        row_sum += std::exp(m - row_max);
    }
    const double e = visible ? std::exp(score - row_max) : 0.0;
    out << "  4) row max over the visible keys = " << c.f(row_max) << " (key " << arg << " '"
        << clip_label(axis_label(c.v, "Tk", c.b, arg)) << "')\n";
    out << "     exp(" << (visible ? c.f(score) : "-inf") << " - (" << c.f(row_max) << ")) = " << c.f(e) << '\n';
    out << "     row sum of exp(m - max) over the " << d.Tk << " keys = " << c.f(row_sum) << '\n';
    out << "     weight = " << c.f(e) << " / " << c.f(row_sum) << " = " << c.f(e / row_sum)
        << "    [weights = " << c.f(w) << "]\n";
}

// 5) the value's share w · v_j of the context row.
void write_share(std::ostream& out, const CellWalk& c, double w) {
    const Dims& d = c.v.dims;
    const StageView &V = c.v.stage(kV), &C = c.v.stage(kContext);
    const std::size_t vo = matrix_offset(V, c.b, c.h) + c.j * d.Dv, co = matrix_offset(C, c.b, c.h) + c.i * d.Dv;
    out << "  5) value v_j, key " << c.j << "'s share w_ij · v_j, and context row " << c.i << " (all shares):\n";
    out << "       " << pad_right("", 4) << pad_left("v_j", 10) << "  " << pad_left("w·v_j", 10) << "  "
        << pad_left("context", 10) << '\n';
    for (std::size_t k = 0; k < d.Dv; ++k)
        out << "       d" << pad_right(std::to_string(k), 3) << pad_left(c.f(V.at(vo + k)), 10) << "  "
            << pad_left(c.f(w * V.at(vo + k)), 10) << "  " << pad_left(c.f(C.at(co + k)), 10) << '\n';
}

}  // namespace

void write_cell(std::ostream& out, const TraceView& v, const CellRef& c, int decimals) {
    v.require(kCellNeeds, "cell");
    check_cell(c, v.dims);
    const CellWalk walk{v, c.batch, c.head, c.query, c.key, decimals};
    const std::string qi = clip_label(axis_label(v, "Tq", c.batch, c.query));
    const std::string kj = clip_label(axis_label(v, "Tk", c.batch, c.key));
    out << "\n== one cell: " << (v.batched ? "batch " + std::to_string(c.batch) + ", " : std::string()) << "head "
        << c.head << ", query " << c.query << " '" << qi << "', key " << c.key << " '" << kj << "'\n";
    // The score and the weight as stored, at (b, h, i, j).
    const StageView &S = v.stage(kScores), &W = v.stage(kWeights);
    const std::size_t so = matrix_offset(S, c.batch, c.head) + c.query * v.dims.Tk + c.key;
    const double score = S.at(so), w = W.at(so);
    const double dot = write_dot(out, walk);
    const bool visible = write_scale_and_mask(out, walk, dot, score);
    write_softmax(out, walk, score, visible, w);
    write_share(out, walk, w);
}

}  // namespace attnscope
