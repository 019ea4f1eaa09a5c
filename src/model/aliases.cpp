// The other names of the stages (see aliases.hpp).
#include "attnscope/model/aliases.hpp"

#include <algorithm>
#include <cctype>

namespace attnscope {

const std::vector<StageAlias>& stage_aliases() {
    static const std::vector<StageAlias> kAliases = {{"query", "Q"},
                                                     {"queries", "Q"},
                                                     {"key", "K"},
                                                     {"keys", "K"},
                                                     {"value", "V"},
                                                     {"values", "V"},
                                                     {"rot_q", "Q_rot"},
                                                     {"rot_k", "K_rot"},
                                                     {"logits", "scores"},
                                                     {"attn_scores", "masked_scores"},
                                                     {"attn", "weights"},
                                                     {"attn_weights", "weights"},
                                                     {"probs", "weights"},
                                                     {"p_attn", "weights"},
                                                     {"attention", "weights"},
                                                     {"pattern", "weights"},
                                                     {"z", "context"},
                                                     {"attn_output_per_head", "context"},
                                                     {"result", "head_output"},
                                                     {"out", "output"},
                                                     {"attn_output", "output"},
                                                     {"attn_out", "output"}};
    return kAliases;
}

bool same_name(std::string_view a, std::string_view b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
               return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
           });
}

std::string_view aliased_stage(std::string_view name) {
    for (const StageAlias& a : stage_aliases())
        if (same_name(a.alias, name)) return a.stage;
    return {};
}

}  // namespace attnscope
