// --explain: each stage narrated as a lecture would, with the real shapes and numbers.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "attnscope/report/report.hpp"
#include "text_util.hpp"

namespace attnscope {
namespace {

using namespace text;

std::string tuple(std::initializer_list<std::size_t> dims) {
    std::string s = "(";
    for (std::size_t d : dims) s += (s.size() > 1 ? ", " : "") + std::to_string(d);
    return s + ")";
}

std::string num(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.4g", v);
    return buf;
}

// Range [min, max] of the finite values of a stage.
std::pair<double, double> finite_range(const StageView& s) {
    double lo = std::numeric_limits<double>::infinity(), hi = -lo;
    for (std::size_t k = 0; k < s.size(); ++k) {
        double x = s.at(k);
        if (std::isfinite(x)) lo = std::min(lo, x), hi = std::max(hi, x);
    }
    return {lo, hi};
}

// A shape of the run written with its sizes, the batch size first when x is batched:
// shape(v, {Tq, Dk}) is "(2, 6, 4)" or "(6, 4)".
std::string shape(const TraceView& v, std::initializer_list<std::size_t> rest) {
    const std::string t = tuple(rest);
    return v.batched ? "(" + std::to_string(v.dims.B) + ", " + t.substr(1) : t;
}

// Q, K, V: the projection, the head split, and what queries, keys and values are for.
std::vector<std::string> explain_projection(const TraceView& v, const StageView& s) {
    const Dims& d = v.dims;
    const std::string src = v.cross ? "memory" : "x";
    const bool q = s.id == kQ, is_v = s.id == kV;
    const std::size_t T = q ? d.Tq : d.Tk, in = q ? d.Dm : d.Dkv, D = is_v ? d.Dv : d.Dk;
    std::vector<std::string> L;
    L.push_back(s.name + " = " + (q ? "x" : src) + " · W_" + s.name + ": " + shape(v, {T, in}) + " @ " +
                tuple({in, d.H * D}) + " -> " + shape(v, {T, d.H * D}) +
                ", then split into H = " + std::to_string(d.H) + " heads of " + (is_v ? "Dv" : "Dk") + " = " +
                std::to_string(D) + " columns (feature h*" + std::to_string(D) + " + j belongs to head h) -> " +
                shape(v, {d.H, T, D}) + ".");
    if (q) L.push_back("Each query row is what that position is looking for.");
    if (s.id == kK)
        L.push_back(
            std::string("Keys come from ") +
            (v.cross ? "the encoder memory (cross-attention)." : "the same sequence as the queries (self-attention).") +
            " A key is an address for matching: keys only shape the weights.");
    if (is_v) L.push_back("A value is the payload: the output is a weighted sum of value rows, never of keys.");
    return L;
}

// scores: the product per head and for all heads, the shared width, the scale and the range.
std::vector<std::string> explain_scores(const TraceView& v, const StageView& s) {
    const Dims& d = v.dims;
    std::vector<std::string> L;
    L.push_back("scores = Q · Kᵀ: per head " + tuple({d.Tq, d.Dk}) + " @ " + tuple({d.Dk, d.Tk}) + " -> " +
                tuple({d.Tq, d.Tk}) + "; all heads " + shape(v, {d.H, d.Tq, d.Dk}) + " @ " +
                shape(v, {d.H, d.Dk, d.Tk}) + " -> " + shape(v, {d.H, d.Tq, d.Tk}) +
                ": one row per query, one column per key.");
    L.push_back("Queries and keys share one width, Dk = " + std::to_string(d.Dk) +
                ", so each score is a dot product q_i · k_j.");
    auto [lo, hi] = finite_range(s);
    std::string before = "unknown (the scale is 0)";
    if (v.scale != 0) {
        const double a = lo / v.scale, b = hi / v.scale;  // a negative scale swaps the ends
        before = "[" + num(std::min(a, b)) + ", " + num(std::max(a, b)) + "]";
    }
    L.push_back("Scaled by " + num(v.scale) + " = " + v.scale_source +
                " (dividing by sqrt(Dk) keeps scores from growing " + "with width). Range before scaling " + before +
                ", after [" + num(lo) + ", " + num(hi) + "].");
    return L;
}

// mask: where it comes from, how many pairs it hides, its polarity and alignment.
std::vector<std::string> explain_mask(const TraceView& v, const StageView& s) {
    const Dims& d = v.dims;
    std::vector<std::string> L;
    std::size_t visible = 0;
    for (std::size_t k = 0; k < s.size(); ++k) visible += s.at(k) != 0;
    std::string what = v.has_padding() && v.spec.causal ? "key padding AND causal"
                       : v.has_padding()                ? "key padding"
                       : v.spec.causal                  ? "causal"
                                                        : "nothing (no mask given)";
    L.push_back("mask: true where query i may see key j; from " + what + ". " + std::to_string(visible) + " of " +
                std::to_string(s.size()) + " (query, key) pairs are visible, " + std::to_string(s.size() - visible) +
                " hidden.");
    if (v.has_padding())
        L.push_back("key_padding_mask marks PAD keys with 1; the mask shown here is the opposite (1 = may attend).");
    if (v.spec.causal)
        L.push_back(v.spec.causal_align == CausalAlign::top_left
                        ? "Causal, top-left: query i sees keys j <= i, only the past (a decoder)."
                        : "Causal, bottom-right: query i sits at position i + Tk - Tq = i + " +
                              std::to_string((long long)d.Tk - (long long)d.Tq) + " and sees keys up to there.");
    if (!v.fully_masked.empty())
        L.push_back(std::to_string(v.fully_masked.size()) +
                    " query row(s) see no key at all; their weights will be all 0.");
    return L;
}

// weights: softmax along each row, and why the row maximum is subtracted.
std::vector<std::string> explain_weights(const TraceView& v) {
    return {"weights = softmax over the key axis (along each row of " + std::to_string(v.dims.Tk) +
                " keys, not over values): w_ij = exp(m_ij - max_j m_ij) / sum_j exp(m_ij - max_j m_ij).",
            "Subtracting the row maximum changes nothing mathematically and keeps exp from overflowing. Each row "
            "sums to 1; a row with every key masked is all 0 (not NaN)."};
}

// context: the product per head and for all heads.
std::vector<std::string> explain_context(const TraceView& v) {
    const Dims& d = v.dims;
    return {"context = weights · V: per head " + tuple({d.Tq, d.Tk}) + " @ " + tuple({d.Tk, d.Dv}) + " -> " +
            tuple({d.Tq, d.Dv}) + "; all heads " + shape(v, {d.H, d.Tq, d.Tk}) + " @ " + shape(v, {d.H, d.Tk, d.Dv}) +
            " -> " + shape(v, {d.H, d.Tq, d.Dv}) + ". Row i is a weighted average of the value rows."};
}

// output: the heads concatenated, then W_O when the run has one.
std::vector<std::string> explain_output(const TraceView& v, const StageView& s) {
    const Dims& d = v.dims;
    const std::string concat = shape(v, {d.Tq, d.H * d.Dv});
    if (s.formula.find("· W_O") != std::string::npos)
        return {"Heads concatenated: " + shape(v, {d.H, d.Tq, d.Dv}) + " -> " + concat + ", then · W_O: " + concat +
                " @ " + tuple({d.H * d.Dv, d.Dout}) + " -> " + shape(v, {d.Tq, d.Dout}) + "."};
    return {"Heads concatenated: " + shape(v, {d.H, d.Tq, d.Dv}) + " -> " + concat +
            " (then · W_O when one is given). Multi-head attention gives each head its own key space."};
}

}  // namespace

std::vector<std::string> explain_stage(const TraceView& v, const StageView& s) {
    switch (s.id) {
        case kQ:
        case kK:
        case kV:
            return explain_projection(v, s);
        case kScores:
            return explain_scores(v, s);
        case kMask:
            return explain_mask(v, s);
        case kMaskedScores:
            return {
                "masked_scores: the scores with -inf wherever the mask is false. exp(-inf) = 0, so those keys get a "
                "weight of exactly 0, whatever their score was."};
        case kWeights:
            return explain_weights(v);
        case kContext:
            return explain_context(v);
        case kOutput:
            return explain_output(v, s);
        case kStageCount:
            break;
    }
    return {};
}

}  // namespace attnscope
