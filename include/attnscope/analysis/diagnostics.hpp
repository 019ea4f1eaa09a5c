// attnscope — diagnostics: why is this attention uniform, one-hot or NaN?
//
// Per head and query row: the entropy of the weights and the effective number of keys
// attended (exp(entropy)), the largest weight and its key, flags for nearly uniform
// and nearly one-hot rows (badly scaled scores do both), the spread of the visible
// scores before and after scaling, fully masked rows, the row-sum check, and each
// key's value-weighted contribution ||w_ij · v_j|| beside its weight w_ij (a large
// weight on a tiny value contributes little). Grouped K/V heads, RoPE (the spread of
// q_rot · k_rot), -inf biases (hidden keys) and sinks (rows summing to 1 - sink_weight)
// are taken as the run has them.
#pragma once

#include <cstddef>
#include <vector>

#include "attnscope/core/view.hpp"

namespace attnscope {

struct RowDiagnostics {
    std::size_t batch = 0, head = 0, query = 0;
    std::size_t visible_keys = 0;
    double entropy = 0;         // -sum_j w_ij ln w_ij, in nats (0 for one-hot, ln n for uniform)
    double effective_keys = 0;  // exp(entropy): how many keys the row really spreads over
    double max_weight = 0;
    std::size_t max_key = 0;
    double row_sum = 0;                // 1, or 0 for a fully masked row
    double score_spread_raw = 0;       // max - min of the visible q_i · k_j before scaling
    double score_spread_scaled = 0;    // ... and after
    std::vector<double> contribution;  // ||w_ij · v_j|| per key j
    std::size_t max_contribution_key = 0;
    bool fully_masked = false, nearly_uniform = false, nearly_one_hot = false;
    // With sinks: the sink's share of the row (sink_weight); the weights sum to 1 - it, and
    // entropy, effective_keys and the flags describe the keys' share, w_ij / (1 - sink_weight).
    bool has_sink = false;
    double sink_weight = 0;
};

// Thresholds: nearly uniform when the effective number of keys is at least 90% of the
// visible keys; nearly one-hot when one weight is at least 0.9 (rows with 2+ keys).
inline constexpr double kUniformFraction = 0.9, kOneHotWeight = 0.9;

// Needs these stages in the view (those the run has: Q_rot and K_rot with RoPE, for the
// spread of q · k before scaling; bias, whose -inf hides a key; sink_weight with sinks).
// clang-format off
inline const StageSet kDiagnoseNeeds = StageSet().set(kQ).set(kK).set(kV).set(kQRot).set(kKRot).set(kScores)
    .set(kBias).set(kMask).set(kWeights).set(kSinkWeight);
// clang-format on
std::vector<RowDiagnostics> diagnose(const TraceView& view);

// Whether query i of batch item b may see key j in head h: the run's mask rule says so
// (MaskRule::visible) and no -inf bias hides the key (asked of the bias stage when kept,
// else of masked_scores when the run adds a bias). Every view asks this; none recomputes it.
bool key_seen(const TraceView& view, std::size_t b, std::size_t h, std::size_t i, std::size_t j);

}  // namespace attnscope
