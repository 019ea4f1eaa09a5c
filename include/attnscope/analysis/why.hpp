// attnscope — analysis: why one key wins a query row (run --why B,H,I; docs/classroom.md,
// "Why this key"): the winner (the largest weight) against the runner-up, feature by
// feature. Score_ij = scale · sum_d q_d · k_jd, so the gap between two keys' scores is
// sum_d scale · q_d · (k_win,d - k_run,d): each feature's share of it.
#pragma once

#include <cstddef>
#include <vector>

#include "attnscope/core/view.hpp"

namespace attnscope {

struct WhyFeature {
    std::size_t d = 0;
    double q = 0, k_win = 0, k_run = 0;
    double win = 0, run = 0;  // scale · q_d · k_d of the winner and the runner-up
    double diff() const { return win - run; }
};

struct WhyRow {
    std::size_t batch = 0, head = 0, query = 0;
    std::size_t winner = 0, runner = 0;  // keys: the largest weight, the second largest
    double scale = 1;
    double score_win = 0, score_run = 0;    // the scores stage (scale included)
    double weight_win = 0, weight_run = 0;  // the weights stage
    bool rope = false;                      // the features are Q_rot's and K_rot's
    std::vector<WhyFeature> features;       // (Dk,), the largest contribution to the gap first
};

// The stages it reads: Q and K (Q_rot and K_rot with RoPE), scores, weights; masks from
// the view's rule. UsageError naming {why} when the row sees fewer than two keys.
inline const StageSet kWhyNeeds =
    StageSet().set(kQ).set(kK).set(kQRot).set(kKRot).set(kScores).set(kBias).set(kWeights);
WhyRow why_row(const TraceView& view, std::size_t b, std::size_t h, std::size_t i);

}  // namespace attnscope
