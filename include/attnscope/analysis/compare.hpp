// attnscope — analysis: how two runs differ, stage by stage.
#pragma once

#include <cstddef>
#include <vector>

#include "attnscope/core/view.hpp"

namespace attnscope {

struct StageDiff {
    Stage id;
    std::vector<std::size_t> shape_a, shape_b;
    bool same_shape = true;
    // Over the elements, when the shapes agree: the largest |a - b| (inf where one run has
    // -inf and the other a number, e.g. a mask changed), its index, and the mean |a - b|
    // (inf when any difference is: a mean is never smaller than a share of its terms).
    // Beside it, how many differences are infinite and the mean of the finite ones.
    double max_abs = 0;
    std::vector<std::size_t> at;  // index of max_abs (empty when the runs agree)
    double mean_abs = 0;
    std::size_t infinite = 0;
    double finite_mean_abs = 0;
};

// Every stage both views hold, in pipeline order.
std::vector<StageDiff> compare_stages(const TraceView& a, const TraceView& b);

}  // namespace attnscope
