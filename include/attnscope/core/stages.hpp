// attnscope — core: the stage table. Every stage of the pipeline is one row here: its
// name (the same in printed headings, JSON keys, dump files, golden files and the
// Python reference), axes (and so its element count), kind of values, colour kind and
// prerequisites. Reports, the memory plan and the command line read this table; none of
// them keeps a list of stage names of its own. Its formula in words is view_of's
// (view.cpp), for the run at hand. Adding a stage: CONTRIBUTING.md, "A stage".
#pragma once

#include <array>
#include <bitset>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace attnscope {

struct Dims;

// Stage ids, in pipeline order (the order of the table).
enum Stage : std::size_t {
    kQ,
    kK,
    kV,
    kQRot,
    kKRot,
    kScores,
    kBias,
    kMask,
    kMaskedScores,
    kWeights,
    kSinkWeight,
    kContext,
    kHeadOutput,
    kOutput,
    kStageCount
};
using StageSet = std::bitset<kStageCount>;

// What a stage holds: numbers in the run's precision, or booleans.
enum class ValueKind { number, boolean };

// How a stage is coloured in heatmaps, HTML and SVG.
enum class ColorKind {
    diverging,    // signed features: blue-white-red around 0 (Q, K, V, context, output)
    sequential,   // viridis over the finite min..max (scores, masked_scores)
    probability,  // viridis over 0..1 (weights)
    boolean       // visible / masked (mask)
};

struct StageInfo {
    Stage id;
    std::string_view name;
    std::array<std::string_view, 4> axes;  // outermost first; the first `rank` are used
    std::size_t rank;
    ValueKind value;
    ColorKind color;
    StageSet needs;  // the stages it is computed from (those the run has)
    // When the stage exists: "" for every run, else what brings it ("{rope}"; the CLI
    // spells the field as its flag).
    std::string_view exists_with;
    // Elements of the stage for a run of dims d: the product of its axes' sizes
    // (saturating at SIZE_MAX, for a shape from a hostile header).
    std::size_t elements(const Dims& d) const;
    // A (query, key) matrix per batch item and head: scores-like stages drawn as heatmaps.
    bool over_keys() const { return rank >= 2 && axes[rank - 2] == "Tq" && axes[rank - 1] == "Tk"; }
};

const std::array<StageInfo, kStageCount>& stage_table();
// The size of axis "B", "H", "G" (K/V heads; H when not grouped), "Tq", "Tk", "Dk", "Dv" or
// "Dout" in a run of dims d.
std::size_t axis_size(std::string_view axis, const Dims& d);
inline const StageInfo& stage_info(Stage s) { return stage_table()[s]; }
inline std::string stage_name(Stage s) { return std::string(stage_info(s).name); }

// The stages every run has (the classic pipeline), and those a run computes when no
// list is given: all it has except head_output, which is computed only when asked for.
StageSet classic_stages();

// The stage called `name`, if any.
std::optional<Stage> find_stage(std::string_view name);
inline StageSet all_stages() { return StageSet().set(); }
// What a run keeps unless told otherwise: every stage it has, but head_output.
inline StageSet default_stages() { return all_stages().reset(kHeadOutput); }
// `wanted` and every stage they are computed from, transitively.
StageSet with_prerequisites(StageSet wanted);
// The stages of `set` in pipeline order.
std::vector<Stage> stages_in(StageSet set);

// The stage `name` means, in any case: its name in the table ("q", "Masked_Scores") or one
// of the aliases of model/aliases.hpp ("query", "pattern", "attn_scores").
std::optional<Stage> stage_of_alias(std::string_view name);

}  // namespace attnscope
