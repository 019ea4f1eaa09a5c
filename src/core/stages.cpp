// The stage table (see stages.hpp).
#include "attnscope/core/stages.hpp"

#include <limits>
#include <stdexcept>

#include "attnscope/model/aliases.hpp"
#include "attnscope/model/model.hpp"

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
    {kQ,            "Q",             {"B", "H", "Tq", "Dk"},   4, V::number,  C::diverging,   {}, ""},
    {kK,            "K",             {"B", "G", "Tk", "Dk"},   4, V::number,  C::diverging,   {}, ""},
    {kV,            "V",             {"B", "G", "Tk", "Dv"},   4, V::number,  C::diverging,   {}, ""},
    {kQRot,         "Q_rot",         {"B", "H", "Tq", "Dk"},   4, V::number,  C::diverging,   set_of({kQ}), "{rope}"},
    {kKRot,         "K_rot",         {"B", "G", "Tk", "Dk"},   4, V::number,  C::diverging,   set_of({kK}), "{rope}"},
    {kScores,       "scores",        {"B", "H", "Tq", "Tk"},   4, V::number,  C::sequential,  set_of({kQ, kK, kQRot, kKRot}), ""},
    // (bias is computed beside the scores, tile by tile: it needs what they need.)
    {kBias,         "bias",          {"B", "H", "Tq", "Tk"},   4, V::number,  C::diverging,   set_of({kScores}),
     "{alibi} or a float attn_mask"},
    {kMask,         "mask",          {"B", "Tq", "Tk"},        3, V::boolean, C::boolean,     {}, ""},
    {kMaskedScores, "masked_scores", {"B", "H", "Tq", "Tk"},   4, V::number,  C::sequential,  set_of({kScores, kBias, kMask}), ""},
    {kWeights,      "weights",       {"B", "H", "Tq", "Tk"},   4, V::number,  C::probability, set_of({kMaskedScores}), ""},
    {kSinkWeight,   "sink_weight",   {"B", "H", "Tq"},         3, V::number,  C::probability, set_of({kMaskedScores}),
     "an array sinks in the bundle"},
    {kContext,      "context",       {"B", "H", "Tq", "Dv"},   4, V::number,  C::diverging,   set_of({kWeights, kV}), ""},
    {kHeadOutput,   "head_output",   {"B", "Tq", "H", "Dout"}, 4, V::number,  C::diverging,   set_of({kContext}),
     "{stages} head_output"},
    {kOutput,       "output",        {"B", "Tq", "Dout"},      3, V::number,  C::diverging,   set_of({kContext}), ""},
}};
// clang-format on

}  // namespace

const std::array<StageInfo, kStageCount>& stage_table() { return kTable; }

std::size_t axis_size(std::string_view axis, const Dims& d) {
    if (axis == "B") return d.B;
    if (axis == "H") return d.H;
    if (axis == "G") return d.G ? d.G : d.H;
    if (axis == "Tq") return d.Tq;
    if (axis == "Tk") return d.Tk;
    if (axis == "Dk") return d.Dk;
    if (axis == "Dv") return d.Dv;
    if (axis == "Dout") return d.Dout;
    throw std::logic_error("stage table: unknown axis " + std::string(axis));
}

std::size_t StageInfo::elements(const Dims& d) const {
    std::size_t n = 1;
    for (std::size_t a = 0; a < rank; ++a)
        if (__builtin_mul_overflow(n, axis_size(axes[a], d), &n)) return std::numeric_limits<std::size_t>::max();
    return n;
}

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
