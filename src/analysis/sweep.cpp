// The statistics of a sweep (analysis/sweep.hpp): the mean of the rows' diagnostics.
#include "attnscope/analysis/sweep.hpp"

#include <algorithm>

namespace attnscope {

RowStats row_stats(const TraceView& view, const std::vector<std::size_t>& batches,
                   const std::vector<std::size_t>& heads) {
    const auto chosen = [](const std::vector<std::size_t>& list, std::size_t k) {
        return list.empty() || std::find(list.begin(), list.end(), k) != list.end();
    };
    RowStats s;
    for (const RowDiagnostics& r : diagnose(view)) {
        if (r.fully_masked || !chosen(batches, r.batch) || !chosen(heads, r.head)) continue;
        ++s.rows;
        s.spread += r.score_spread_scaled;
        s.entropy += r.entropy;
        s.uniform += r.nearly_uniform ? 1 : 0;
        s.one_hot += r.nearly_one_hot ? 1 : 0;
    }
    if (s.rows) s.spread /= double(s.rows), s.entropy /= double(s.rows);
    return s;
}

}  // namespace attnscope
