// Why one key wins a query row (analysis/why.hpp).
#include "attnscope/analysis/why.hpp"

#include <algorithm>
#include <string>

#include "attnscope/analysis/diagnostics.hpp"
#include "attnscope/base/errors.hpp"

namespace attnscope {

WhyRow why_row(const TraceView& v, std::size_t b, std::size_t h, std::size_t i) {
    const Dims& d = v.dims;
    WhyRow r;
    r.batch = b, r.head = h, r.query = i, r.scale = v.scale, r.rope = v.spec.rope.has_value();
    const StageView &W = v.stage(kWeights), &S = v.stage(kScores);  // (B, H, Tq, Tk)
    const StageView& Q = v.stage(r.rope ? kQRot : kQ);              // (B, H, Tq, Dk)
    const StageView& K = v.stage(r.rope ? kKRot : kK);              // (B, G, Tk, Dk)
    // 1. the winner and the runner-up: the two largest weights among the visible keys
    std::vector<std::size_t> seen;
    for (std::size_t j = 0; j < d.Tk; ++j)
        if (key_seen(v, b, h, i, j)) seen.push_back(j);
    if (seen.size() < 2)
        throw UsageError("{why} " + std::to_string(b) + "," + std::to_string(h) + "," + std::to_string(i) +
                         ": the row sees " + std::to_string(seen.size()) +
                         " key(s); a winner needs a runner-up (choose a row that sees two keys or more)");
    const std::size_t wo = matrix_offset(W, b, h) + i * d.Tk;
    std::stable_sort(seen.begin(), seen.end(),
                     [&](std::size_t x, std::size_t y) { return W.at(wo + x) > W.at(wo + y); });
    r.winner = seen[0], r.runner = seen[1];
    r.weight_win = W.at(wo + r.winner), r.weight_run = W.at(wo + r.runner);
    r.score_win = S.at(matrix_offset(S, b, h) + i * d.Tk + r.winner);
    r.score_run = S.at(matrix_offset(S, b, h) + i * d.Tk + r.runner);
    // 2. per feature: scale · q_d · k_d for both keys, (Dk,), sorted by their difference
    const std::size_t qo = matrix_offset(Q, b, h) + i * d.Dk, ko = matrix_offset(K, b, h);
    for (std::size_t k = 0; k < d.Dk; ++k) {
        WhyFeature f;
        f.d = k, f.q = Q.at(qo + k), f.k_win = K.at(ko + r.winner * d.Dk + k), f.k_run = K.at(ko + r.runner * d.Dk + k);
        f.win = r.scale * f.q * f.k_win, f.run = r.scale * f.q * f.k_run;
        r.features.push_back(f);
    }
    std::stable_sort(r.features.begin(), r.features.end(),
                     [](const WhyFeature& x, const WhyFeature& y) { return x.diff() > y.diff(); });
    return r;
}

}  // namespace attnscope
