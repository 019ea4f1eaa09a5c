// attnscope — model layer: the other names people and libraries give the stages of
// attention, one table for `run --qkv` (q, k and v) and `check` (every stage).
//
// Each alias names a stage of the stage table (core/stages.hpp) by its name; the table
// sits here, below core, because `run --qkv` reads q, k and v in this layer.
// core's stage_of_alias() resolves our names and these alike.
#pragma once

#include <string_view>
#include <vector>

namespace attnscope {

// query/queries, key/keys, value/values, logits, attn/attn_weights/probs/p_attn/attention/
// pattern, z/attn_output_per_head, out/attn_output/attn_out, and TransformerLens's hook
// names without their prefix: rot_q, rot_k, attn_scores (recorded after the causal mask,
// so our masked_scores), pattern, z, result (each head's share of the output before b_O:
// our head_output), attn_out.
struct StageAlias {
    std::string_view alias;  // lower case
    std::string_view stage;  // the stage's name in the stage table: "Q", "masked_scores"
};
const std::vector<StageAlias>& stage_aliases();

// Whether `a` and `b` are the same name in any case (ASCII).
bool same_name(std::string_view a, std::string_view b);

// The stage name `name` is an alias of (any case), or "" when it is none.
std::string_view aliased_stage(std::string_view name);

}  // namespace attnscope
