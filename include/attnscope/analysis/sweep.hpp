// attnscope — analysis: what a sweep measures in one run's weight rows (docs/classroom.md,
// "Sweeps"), from the rows' diagnostics (diagnostics.hpp) so that the words mean what
// --diagnose says: the spread of the visible scores, the entropy of the weights, and how
// many rows are nearly uniform or nearly one-hot (kUniformFraction, kOneHotWeight).
#pragma once

#include <cstddef>
#include <vector>

#include "attnscope/analysis/diagnostics.hpp"

namespace attnscope {

// Over the rows (b, h, i) that see at least one key, of the chosen batch items and heads
// (empty: all): the mean of score_spread_scaled (max - min of the row's visible scores,
// scale included), the mean entropy (nats), and the counts of nearly uniform and nearly
// one-hot rows.
struct RowStats {
    std::size_t rows = 0;
    double spread = 0, entropy = 0;
    std::size_t uniform = 0, one_hot = 0;
};

// The view must hold kDiagnoseNeeds's stages (those the run has).
RowStats row_stats(const TraceView& view, const std::vector<std::size_t>& batches,
                   const std::vector<std::size_t>& heads);

}  // namespace attnscope
