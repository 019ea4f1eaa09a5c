// The stage table (see stages.hpp).
#include "attnscope/core/stages.hpp"

#include "attnscope/model/aliases.hpp"

namespace attnscope {
namespace {

constexpr StageSet set_of(std::initializer_list<Stage> stages) {
    unsigned long long bits = 0;
    for (Stage s : stages) bits |= 1ULL << s;
    return StageSet(bits);
}

using V = ValueKind;
using C = ColorKind;

// clang-format off
const std::array<StageInfo, kStageCount> kTable = {{
    {kQ, "Q", {"B", "H", "Tq", "Dk"}, 4, "x · W_Q (+ b_Q), split into heads", V::number, C::diverging, {}, ""},
    {kK, "K", {"B", "G", "Tk", "Dk"}, 4, "src · W_K (+ b_K), split into heads", V::number, C::diverging, {}, ""},
    {kV, "V", {"B", "G", "Tk", "Dv"}, 4, "src · W_V (+ b_V), split into heads", V::number, C::diverging, {}, ""},
    {kQRot, "Q_rot", {"B", "H", "Tq", "Dk"}, 4, "Q with feature pairs rotated by position · inv_freq (RoPE)",
     V::number, C::diverging, set_of({kQ}), "{rope}"},
    {kKRot, "K_rot", {"B", "G", "Tk", "Dk"}, 4, "K with feature pairs rotated by position · inv_freq (RoPE)",
     V::number, C::diverging, set_of({kK}), "{rope}"},
    {kScores, "scores", {"B", "H", "Tq", "Tk"}, 4, "Q · Kᵀ · scale", V::number, C::sequential,
     set_of({kQ, kK, kQRot, kKRot}), ""},
    // (bias is computed beside the scores, tile by tile: it needs what they need.)
    {kBias, "bias", {"B", "H", "Tq", "Tk"}, 4, "ALiBi slope · (k_pos − q_pos) and/or the float attn_mask",
     V::number, C::diverging, set_of({kScores}), "{alibi} or a float attn_mask"},
    {kMask, "mask", {"B", "Tq", "Tk"}, 3, "true where query i may see key j", V::boolean, C::boolean, {}, ""},
    {kMaskedScores, "masked_scores", {"B", "H", "Tq", "Tk"}, 4, "scores, -inf where mask is false", V::number,
     C::sequential, set_of({kScores, kBias, kMask}), ""},
    {kWeights, "weights", {"B", "H", "Tq", "Tk"}, 4, "softmax over the key axis", V::number, C::probability,
     set_of({kMaskedScores}), ""},
    {kSinkWeight, "sink_weight", {"B", "H", "Tq"}, 3, "the share of each row's softmax taken by the head's sink",
     V::number, C::probability, set_of({kMaskedScores}), "an array sinks in the bundle"},
    {kContext, "context", {"B", "H", "Tq", "Dv"}, 4, "weights · V", V::number, C::diverging, set_of({kWeights, kV}), ""},
    {kHeadOutput, "head_output", {"B", "Tq", "H", "Dout"}, 4, "context of head h · W_O rows h·Dv .. (h+1)·Dv",
     V::number, C::diverging, set_of({kContext}), "{stages} head_output"},
    {kOutput, "output", {"B", "Tq", "Dout"}, 3, "heads concatenated (B, Tq, H·Dv), then · W_O (+ b_O)", V::number,
     C::diverging, set_of({kContext}), ""},
}};
// clang-format on

}  // namespace

const std::array<StageInfo, kStageCount>& stage_table() { return kTable; }

StageSet classic_stages() {
    StageSet s;
    for (const StageInfo& info : kTable)
        if (info.exists_with.empty()) s.set(info.id);
    return s;
}

std::optional<Stage> find_stage(std::string_view name) {
    for (const StageInfo& s : kTable)
        if (s.name == name) return s.id;
    return std::nullopt;
}

StageSet with_prerequisites(StageSet wanted) {
    // The table is in pipeline order: one backward pass reaches every prerequisite.
    for (std::size_t k = kStageCount; k-- > 0;)
        if (wanted[k]) wanted |= kTable[k].needs;
    return wanted;
}

std::vector<Stage> stages_in(StageSet set) {
    std::vector<Stage> out;
    for (const StageInfo& s : kTable)
        if (set[s.id]) out.push_back(s.id);
    return out;
}

std::optional<Stage> stage_of_alias(std::string_view name) {
    for (const StageInfo& s : kTable)
        if (same_name(s.name, name)) return s.id;
    return find_stage(aliased_stage(name));
}

}  // namespace attnscope
