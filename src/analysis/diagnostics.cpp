// Diagnostics over the weights, scores and values of a trace.
#include "attnscope/analysis/diagnostics.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <ostream>
#include <string>

#include "attnscope/base/errors.hpp"

namespace attnscope {

bool key_seen(const TraceView& v, std::size_t b, std::size_t h, std::size_t i, std::size_t j) {
    if (!v.mask_rule.visible(b, i, j)) return false;
    const auto at = [&](const StageView& s) { return s.at(matrix_offset(s, b, h) + i * s.shape.back() + j); };
    constexpr double neg_inf = -std::numeric_limits<double>::infinity();
    if (const StageView* bias = v.find(kBias)) return at(*bias) != neg_inf;
    const StageView* m = v.find(kMaskedScores);
    if (m && v.has_bias()) return at(*m) != neg_inf;
    return true;
}

std::vector<RowDiagnostics> diagnose(const TraceView& v) {
    // The stages this run has among those diagnose reads.
    StageSet needs = StageSet().set(kQ).set(kK).set(kV).set(kScores).set(kWeights);
    if (v.spec.rope) needs.set(kQRot).set(kKRot);
    v.require(needs, "diagnose");
    const Dims& d = v.dims;
    const StageView &S = v.stage(kScores), &W = v.stage(kWeights), &V = v.stage(kV);
    const StageView &Q = v.stage(v.spec.rope ? kQRot : kQ), &K = v.stage(v.spec.rope ? kKRot : kK);
    const StageView* sink = v.find(kSinkWeight);
    std::vector<RowDiagnostics> out;
    for (std::size_t b = 0; b < d.B; ++b)
        for (std::size_t h = 0; h < d.H; ++h) {
            const std::size_t so = matrix_offset(S, b, h), vo = matrix_offset(V, b, h), qo = matrix_offset(Q, b, h),
                              ko = matrix_offset(K, b, h);
            for (std::size_t i = 0; i < d.Tq; ++i) {
                RowDiagnostics r;
                r.batch = b, r.head = h, r.query = i;
                r.contribution.assign(d.Tk, 0.0);
                double lo = std::numeric_limits<double>::infinity(), hi = -lo, best_c = -1;
                double raw_lo = lo, raw_hi = hi;  // q_i · k_j before scaling, from Q and K themselves
                for (std::size_t j = 0; j < d.Tk; ++j) {
                    const double w = W.at(so + i * d.Tk + j);
                    r.row_sum += w;
                    if (w > r.max_weight || j == 0) r.max_weight = w, r.max_key = j;
                    if (w > 0) r.entropy -= w * std::log(w);
                    double norm = 0;  // ||w_ij v_j||
                    for (std::size_t k = 0; k < d.Dv; ++k) norm += std::pow(w * V.at(vo + j * d.Dv + k), 2);
                    r.contribution[j] = std::sqrt(norm);
                    if (r.contribution[j] > best_c) best_c = r.contribution[j], r.max_contribution_key = j;
                    if (key_seen(v, b, h, i, j)) {
                        ++r.visible_keys;
                        const double s = S.at(so + i * d.Tk + j);
                        lo = std::min(lo, s), hi = std::max(hi, s);
                        double dot = 0;
                        for (std::size_t k = 0; k < d.Dk; ++k) dot += Q.at(qo + i * d.Dk + k) * K.at(ko + j * d.Dk + k);
                        raw_lo = std::min(raw_lo, dot), raw_hi = std::max(raw_hi, dot);
                    }
                }
                r.fully_masked = r.visible_keys == 0;
                if (sink) {  // (B, H, Tq), or (H, Tq) for a 2-D input
                    r.has_sink = true;
                    r.sink_weight = sink->at((v.batched ? b * d.H + h : h) * d.Tq + i);
                    // Entropy and flags of the keys' distribution: the weights over their sum
                    // 1 - sink_weight (-sum p ln p = -sum w ln w / S + ln S for p = w / S).
                    if (r.row_sum > 0) r.entropy = r.entropy / r.row_sum + std::log(r.row_sum);
                }
                r.effective_keys = r.fully_masked ? 0 : std::exp(r.entropy);
                if (!r.fully_masked) {
                    r.score_spread_scaled = hi - lo;
                    r.score_spread_raw = raw_hi - raw_lo;
                }
                if (r.visible_keys >= 2) {
                    r.nearly_uniform = r.effective_keys >= kUniformFraction * double(r.visible_keys);
                    r.nearly_one_hot = r.max_weight / (r.has_sink ? r.row_sum : 1.0) >= kOneHotWeight;
                }
                out.push_back(std::move(r));
            }
        }
    return out;
}

}  // namespace attnscope
