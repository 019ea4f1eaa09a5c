// The check of someone's own attention tensors against the reference (attnscope check):
// their arrays read, compared stage by stage, and the first that differs diagnosed. The
// parts are in the files check_internal.hpp lists.
#include <algorithm>

#include "attnscope/base/errors.hpp"
#include "check_internal.hpp"

namespace attnscope {

using namespace check_detail;

bool CheckResult::matches() const {
    return !first_divergent && std::any_of(stages.begin(), stages.end(), [](const StageCheck& s) { return s.given; });
}

CheckResult check_tensors(const TraceView& ref, const Problem<double>& problem, const Bundle& inputs,
                          const Bundle& theirs, const CheckOptions& options) {
    CheckResult result;
    // 1. Their arrays, in our stages and axis order.
    const std::map<Stage, Theirs> given = read_theirs(ref, inputs, theirs, options, result.inputs);
    if (given.empty())  // nothing compared is never a match
        throw InputError(theirs.source + ": no stage to compare" +
                         (result.inputs.empty()
                              ? std::string(", no array at all")
                              : ": only the input arrays " + join(result.inputs) + " (the bundle itself?)") +
                         "; expected " + names_expected());
    // 2. Stage by stage, in pipeline order; the first that differs.
    for (const StageView& s : ref.stages) {
        const auto it = given.find(s.id);
        result.stages.push_back(check_stage(s, it == given.end() ? nullptr : &it->second));
        if (result.stages.back().given && !result.stages.back().match && !result.first_divergent)
            result.first_divergent = s.id;
    }
    // 3. Which mistake makes it.
    if (result.first_divergent) diagnose_first(ref, problem, given, result);
    return result;
}

}  // namespace attnscope
