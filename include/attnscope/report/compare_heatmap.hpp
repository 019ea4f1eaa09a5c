// `run --compare 'OPTIONS' --heatmap`: a (query, key) stage of two runs (the weights, or
// those --stages names) and their difference as heatmaps.
#pragma once

#include <array>
#include <cstddef>
#include <iosfwd>
#include <string>

#include "attnscope/report/report.hpp"

namespace attnscope {

// Stage `stage` (a (query, key) matrix) of batch item b, head h of runs A and B side by side (one 0..1 scale,
// titled `titles`) and B − A as characters: '-' where B is lower, '+' where higher, blank
// where |B − A| < kDiffBlank, "××" masked in both; the three stacked when they do not fit
// `width`. UsageError when the two differ in shape.
inline constexpr double kDiffBlank = 0.01;
void write_compare_heatmaps(std::ostream& out, const TraceView& a, const TraceView& b, Stage stage,
                            const std::array<std::string, 2>& titles, std::size_t batch, std::size_t head,
                            const TextOptions& options);

}  // namespace attnscope
