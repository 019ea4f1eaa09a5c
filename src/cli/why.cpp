// `run --why B,H,I` (docs/classroom.md, "Why this key"): the run computed with the stages
// the breakdown reads, then one row's winner against its runner-up, feature by feature.
#include "attnscope/analysis/why.hpp"

#include <iostream>
#include <string>

#include "attnscope/base/errors.hpp"
#include "attnscope/core/attention.hpp"
#include "attnscope/core/view.hpp"
#include "attnscope/report/report.hpp"
#include "attnscope/report/why_report.hpp"
#include "run.hpp"

namespace attnscope::cli {
namespace {

template <typename T>
void why_typed(const RunOptions& o, const Bundle& bundle, const Spec& spec, std::size_t limit) {
    Problem<T> p = problem_of<T>(o, bundle, spec, limit);
    const std::size_t n = o.why.size(), want = p.batched ? 3 : 2;
    if (n != want)
        throw UsageError("{why}: expected " + std::string(p.batched ? "B,H,I" : "H,I (x is 2-D)") + ", found " +
                         std::to_string(n) + " numbers");
    const std::size_t b = p.batched ? o.why[0] : 0, h = o.why[n - 2], i = o.why[n - 1];
    const Dims& d = p.dims;
    if (b >= d.B || h >= d.H || i >= d.Tq)
        throw UsageError("{why} " + std::to_string(b) + "," + std::to_string(h) + "," + std::to_string(i) +
                         ": expected batch < " + std::to_string(d.B) + ", head < " + std::to_string(d.H) +
                         ", query < " + std::to_string(d.Tq));
    const auto run = attend_checked(bundle, std::move(p), kWhyNeeds, o.threads, limit);
    const TraceView& v = run->view;
    const WhyRow r = why_row(v, b, h, i);
    if (o.json)
        write_why_json(std::cout, v, r);
    else
        write_why_text(std::cout, v, r, o.explain);
}

}  // namespace

int run_why(const RunOptions& o) {
    const std::size_t limit = memory_limit(o);
    Spec spec = spec_of(o);
    const Bundle bundle = load_inputs(o, limit, spec);
    if (o.dtype == Precision::float32)
        why_typed<float>(o, bundle, spec, limit);
    else
        why_typed<double>(o, bundle, spec, limit);
    std::cout.flush();
    if (!std::cout) throw RuntimeFailure("<stdout>: cannot write the report");
    return 0;
}

}  // namespace attnscope::cli
