// Reading their arrays: names to stages (ours, the aliases, TransformerLens's hooks),
// shapes to axis orders, values to the reference's order; input arrays against the bundle.
#include <algorithm>
#include <cctype>

#include "attnscope/base/errors.hpp"
#include "attnscope/model/aliases.hpp"
#include "check_internal.hpp"

namespace attnscope::check_detail {
namespace {

std::string origin_of(const Bundle& b, const std::string& name, const Array& a) {
    return a.origin.empty() ? b.source + ": " + name : a.origin;
}

// Input arrays in THEIRS (x, W_Q, ...) must be the bundle's: otherwise their stages come
// from other inputs and no comparison means anything.
void check_input_array(const Bundle& inputs, const std::string& where, const std::string& name, const Array& a,
                       const CheckOptions& o) {
    const auto it = inputs.arrays.find(name);
    if (it == inputs.arrays.end())
        throw InputError(where + ": an input array that " + inputs.source +
                         " does not have (these tensors come from other inputs?)");
    const Array& b = it->second;
    if (a.is_text() || b.is_text()) {
        if (a.strings != b.strings || a.shape != b.shape)
            throw InputError(where + ": differs from " + name + " of " + inputs.source);
        return;
    }
    if (a.shape != b.shape)
        throw InputError(where + ": the shape " + shape_str(a.shape) + " differs from " + name + " of " +
                         inputs.source + " " + shape_str(b.shape) + " (tensors of another bundle?)");
    const Cmp c = compare(a.doubles(), b.doubles(), tolerance_of(a, o));
    if (!c.match)
        throw InputError(where + ": differs from " + name + " of " + inputs.source + " (max |Δ| " + num(c.max_abs) +
                         " at " + shape_str(unravel(c.at, a.shape)) + "): tensors of another bundle?");
}

// A bare attn_scores (no hook prefix) is TransformerLens's scores after the mask in one
// library and the scaled scores before it in many others: read by its content. A cell at
// -inf or a fill value (<= kLargeNegative: -1e9, -10000, the dtype's lowest) is a mask
// applied, so masked_scores; every cell finite above it, the scores; and the other of the
// two when THEIRS names one of them already (`named`). `reading` says which and why.
Stage bare_scores_stage(const TraceView& ref, const std::vector<double>& values, std::optional<Stage> named,
                        std::string& reading) {
    const bool has_masked = ref.find(kMaskedScores) != nullptr;
    if (named == kScores && has_masked) {
        reading = "read as masked_scores: a bare attn_scores beside scores of their own";
        return kMaskedScores;
    }
    if (named == kMaskedScores) {
        reading = "read as scores: a bare attn_scores beside masked_scores of their own";
        return kScores;
    }
    const bool filled = std::any_of(values.begin(), values.end(), [](double v) { return v <= kLargeNegative; });
    if (filled && has_masked) {
        reading = "read as masked_scores: a bare attn_scores with -inf or a fill value (<= -1e4), a mask applied";
        return kMaskedScores;
    }
    reading = "read as scores: a bare attn_scores with no -inf and no fill value (<= -1e4), before the mask";
    return kScores;
}

// The stage scores or masked_scores when an array of THEIRS other than a bare attn_scores
// names it.
std::optional<Stage> scores_named(const Bundle& theirs) {
    for (const auto& [name, array] : theirs.arrays) {
        bool hook = false;
        if (without_hook_prefix(name, &hook) == "attn_scores" && !hook) continue;
        const auto id = stage_of_name(name);
        if (id == kScores || id == kMaskedScores) return id;
    }
    return std::nullopt;
}

}  // namespace

std::string without_hook_prefix(std::string_view name, bool* had_prefix) {
    std::string l = lower(name);
    const std::string in = l;
    if (l.rfind("blocks.", 0) == 0) {
        std::size_t i = 7;
        while (i < l.size() && std::isdigit(static_cast<unsigned char>(l[i]))) ++i;
        if (i > 7 && i < l.size() && l[i] == '.') l.erase(0, i + 1);
    }
    if (l.rfind("attn.", 0) == 0) l.erase(0, 5);
    if (l.rfind("hook_", 0) == 0) l.erase(0, 5);
    if (had_prefix) *had_prefix = l != in;
    return l;
}

std::string names_expected() {
    std::string ours, aliases = "q, k, v";
    for (const StageInfo& s : stage_table()) ours += (ours.empty() ? "" : ", ") + std::string(s.name);
    for (const StageAlias& a : stage_aliases()) aliases += ", " + std::string(a.alias);
    return ours + ", or an alias: " + aliases + "; TransformerLens's blocks.L.attn.hook_NAME and hook_NAME alike";
}

std::map<Stage, Theirs> read_theirs(const TraceView& ref, const Bundle& inputs, const Bundle& theirs,
                                    const CheckOptions& options, std::vector<std::string>& inputs_found) {
    for (const auto& [name, order] : options.axes)
        if (!theirs.arrays.count(name)) {
            std::vector<std::string> names;
            for (const auto& a : theirs.arrays) names.push_back(a.first);
            throw InputError("{axes} " + name + "=" + order + ": " + theirs.source + " has no array " + name +
                             " (it has: " + join(names) + ")");
        }
    std::map<Stage, Theirs> given;
    const auto& input_names = known_array_names();
    for (const auto& [name, array] : theirs.arrays) {
        const std::string where = origin_of(theirs, name, array);
        if (std::find(input_names.begin(), input_names.end(), name) != input_names.end()) {
            check_input_array(inputs, where, name, array, options);
            inputs_found.push_back(name);
            continue;
        }
        auto id = stage_of_name(name);
        bool hook = false;
        const bool bare_scores = without_hook_prefix(name, &hook) == "attn_scores" && !hook;
        if (bare_scores) id = kScores;  // read by its content below (masked_scores has the same axes)
        if (!id && hook)
            throw InputError(where +
                             ": a TransformerLens hook that is no attention stage (keep one layer's "
                             "blocks.L.attn.hook_q, hook_k, hook_v, hook_attn_scores, hook_pattern, hook_z, "
                             "hook_result and blocks.L.hook_attn_out)");
        if (!id) throw InputError(where + ": not a stage name (expected " + names_expected() + ")");
        const StageView* s = ref.find(*id);
        if (!s) throw InputError(where + ": this run has no stage " + stage_name(*id) + " (see the model options)");
        if (given.count(*id))
            throw InputError(where + ": names the stage " + s->name + " like " + given[*id].name +
                             " does; keep one of them");
        if (array.is_text()) throw InputError(where + ": holds text, expected the numbers of " + s->name);
        Theirs t;
        t.array = &array, t.name = name, t.tol = tolerance_of(array, options);
        t.precision = precision_of(array.dtype, options.computed);
        const auto ax = options.axes.find(name);
        t.layout = resolve_layout(ref, *s, where, name, array,
                                  ax == options.axes.end() ? std::nullopt : std::optional<std::string>(ax->second));
        t.map = cell_map(t.layout, canonical_axes(ref, *s));
        const std::vector<double> raw = array.doubles();
        t.values.resize(raw.size());
        for (std::size_t k = 0; k < raw.size(); ++k) t.values[t.map[k]] = raw[k];
        if (bare_scores) {
            id = bare_scores_stage(ref, t.values, scores_named(theirs), t.reading);
            if (given.count(*id))
                throw InputError(where + ": " + t.reading + ", the stage " + stage_name(*id) + " of " +
                                 given[*id].name + "; keep one of them");
        }
        given[*id] = std::move(t);
    }
    return given;
}

}  // namespace attnscope::check_detail

namespace attnscope {

using namespace check_detail;

std::optional<Stage> stage_of_name(std::string_view name) { return stage_of_alias(without_hook_prefix(name)); }

}  // namespace attnscope
