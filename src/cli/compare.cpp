// `run --compare 'OPTIONS'`: run A as the command line says, run B as A with OPTIONS
// applied on top, and how every stage of B differs from A's (analysis/compare.hpp).
#include "attnscope/analysis/compare.hpp"

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>

#include "attnscope/base/errors.hpp"
#include "attnscope/base/text.hpp"
#include "attnscope/core/attention.hpp"
#include "attnscope/core/view.hpp"
#include "attnscope/report/compare_heatmap.hpp"
#include "attnscope/report/report.hpp"
#include "run.hpp"
#include "run_output.hpp"

namespace attnscope::cli {
namespace {

// The words of --compare, split at spaces and tabs (no quoting: an option's value is one word).
std::vector<std::string> split_words(const std::string& s) {
    std::vector<std::string> out;
    std::string w;
    for (char c : s) {
        if (c == ' ' || c == '\t') {
            if (!w.empty()) out.push_back(w), w.clear();
        } else {
            w += c;
        }
    }
    if (!w.empty()) out.push_back(w);
    return out;
}

// Run B: a copy of run A's options with the delta applied. The delta is parsed as run's own
// options by a fresh `run` command whose fields start as A's values (parse_over), so an
// option it gives replaces A's value (the later value wins, as on one command line) and
// every other option keeps A's; a delta that names --compare again is refused.
RunOptions second_run(const RunOptions& a, const std::vector<std::string>& delta) {
    RunOptions copy = a;
    copy.compare.clear();
    RunOptions b;
    if (const auto error = parse_over(copy, delta, b, true))
        throw UsageError("--compare '" + a.compare + "': " + *error);
    if (!b.compare.empty()) throw UsageError("--compare: cannot be nested");
    return b;
}

// The stages --stages names ("" or all: none named).
std::vector<std::string> chosen_stages(const RunOptions& o) {
    return o.stages.empty() || o.stages == "all" ? std::vector<std::string>() : parse_stage_list(o.stages);
}

// A computed run with every stage, and those --stages names.
template <typename T>
Held compute_all(const RunOptions& o, const Bundle& bundle, const Spec& spec, std::size_t limit) {
    const StageSet keep = default_stages() | stage_set(chosen_stages(o));
    return held(attend_checked(bundle, problem_of<T>(o, bundle, spec, limit), keep, o.threads, limit));
}

Held compute_all(const RunOptions& o, std::size_t limit) {
    Spec spec = spec_of(o);
    const Bundle bundle = load_inputs(o, limit, spec);
    return o.dtype == Precision::float32 ? compute_all<float>(o, bundle, spec, limit)
                                         : compute_all<double>(o, bundle, spec, limit);
}

void print_table(const std::vector<std::vector<std::string>>& table) {
    std::vector<std::size_t> width(table[0].size(), 0);
    for (const auto& r : table)
        for (std::size_t c = 0; c < r.size(); ++c) width[c] = std::max(width[c], r[c].size());
    for (const auto& r : table) {
        std::cout << "  ";
        for (std::size_t c = 0; c < r.size(); ++c) std::cout << r[c] << std::string(width[c] - r[c].size() + 2, ' ');
        std::cout << '\n';
    }
}

std::string number(const char* format, double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, format, v);
    return buf;
}

// The table of differences: a row per stage. Where a mask changed, some differences are
// infinite: two more columns say how many, and the mean of the others.
std::vector<std::vector<std::string>> diff_table(const std::vector<StageDiff>& diffs) {
    const bool infinite = std::any_of(diffs.begin(), diffs.end(), [](const StageDiff& d) { return d.infinite > 0; });
    std::vector<std::vector<std::string>> table = {
        {"stage", "shape A", "shape B", "max |A - B|", "at", "mean |A - B|"}};
    if (infinite) table[0].insert(table[0].end(), {"inf cells", "finite mean"});
    for (const StageDiff& d : diffs) {
        std::vector<std::string> row = {stage_name(d.id), shape_str(d.shape_a), shape_str(d.shape_b)};
        if (!d.same_shape)
            row.insert(row.end(), {"(shapes differ)", "", ""});
        else
            row.insert(row.end(),
                       {number("%.4g", d.max_abs), d.at.empty() ? "" : shape_str(d.at), number("%.4g", d.mean_abs)});
        if (infinite && d.same_shape)
            row.insert(row.end(), {std::to_string(d.infinite), number("%.4g", d.finite_mean_abs)});
        table.push_back(row);
    }
    return table;
}

// The differences of the stages --stages names (each of which both runs must have), or of
// every stage; over the batch items and heads --batch and --head choose.
std::vector<StageDiff> chosen_diffs(const RunOptions& a, const Held& A, const Held& B) {
    TextOptions chosen;
    chosen.batches = a.batches, chosen.heads = a.heads_shown;
    check_selection(chosen, A.view.dims);
    check_selection(chosen, B.view.dims);
    const bool select = !a.batches.empty() || !a.heads_shown.empty();
    const auto diffs = select ? compare_stages(select_view(A.view, a.batches, a.heads_shown),
                                               select_view(B.view, a.batches, a.heads_shown))
                              : compare_stages(A.view, B.view);
    if (chosen_stages(a).empty()) return diffs;
    std::vector<StageDiff> out;
    for (const std::string& name : chosen_stages(a)) {
        const Stage id = *find_stage(name);
        const auto d = std::find_if(diffs.begin(), diffs.end(), [id](const StageDiff& x) { return x.id == id; });
        if (d == diffs.end())
            throw UsageError("{stages}: the runs compared have no stage " + name + "; it exists with " +
                             std::string(stage_info(id).exists_with));
        out.push_back(*d);
    }
    return out;
}

// The stages --heatmap draws: those --stages names that are (query, key) matrices, or weights.
std::vector<Stage> heatmap_stages(const RunOptions& a) {
    const auto names = chosen_stages(a);
    if (names.empty()) return {kWeights};
    std::vector<Stage> out;
    for (const std::string& name : names)
        if (stage_info(*find_stage(name)).over_keys()) out.push_back(*find_stage(name));
    if (out.empty())
        throw UsageError("--compare with --heatmap: draws (query, key) stages such as scores and weights; --stages " +
                         escape_control(a.stages) + " names none of them");
    return out;
}

// --heatmap's one batch item and head (--batch, --head: default 0), and the terminal; a
// selection of several, or a B whose weights differ in shape from A's, is refused.
TextOptions heatmap_options(const RunOptions& a, const Held& A, const Held& B) {
    if (a.batches.size() > 1 || a.heads_shown.size() > 1)
        throw UsageError(
            "--compare with --heatmap: draws one batch item and one head; --batch and --head give one each");
    for (const Stage id : heatmap_stages(a)) {
        const StageView &wa = A.view.stage(id), &wb = B.view.stage(id);
        if (wa.shape != wb.shape)
            throw UsageError("--compare '" + escape_control(a.compare) + "' --heatmap: " + wa.name + " of A " +
                             shape_str(wa.shape) + " and B " + shape_str(wb.shape) +
                             " differ in shape; B - A cannot be drawn");
    }
    TextOptions text = text_options(a, {});
    text.batches = {a.batches.empty() ? 0 : a.batches[0]};
    text.heads = {a.heads_shown.empty() ? 0 : a.heads_shown[0]};
    check_selection(text, A.view.dims);
    text.color = color_mode(a.color);
    text.width = a.width ? a.width : terminal_width();
    return text;
}

}  // namespace

int run_compare(const RunOptions& a) {
    const auto delta = split_words(a.compare);
    const RunOptions b = second_run(a, delta);
    const std::size_t limit = memory_limit(a);
    const Held A = compute_all(a, limit), B = compute_all(b, limit);
    const std::optional<TextOptions> heat = a.heatmap ? std::optional(heatmap_options(a, A, B)) : std::nullopt;
    const std::vector<StageDiff> diffs = chosen_diffs(a, A, B);
    if (a.json) {
        write_compare_json(std::cout, delta, A.view.scale, B.view.scale, diffs);
    } else {
        std::cout << "attnscope: compare  A = run " << escape_control(a.bundle.empty() ? "<options>" : a.bundle)
                  << "  vs  B = A +";
        for (const auto& w : delta) std::cout << ' ' << w;
        std::cout << "\n  scale  A " << A.view.scale << " (" << A.view.scale_source << ")   B " << B.view.scale << " ("
                  << B.view.scale_source << ")\n\n";
        print_table(diff_table(diffs));
        std::cout << "  (inf where one run has -inf and the other a number: a mask changed)\n";
        if (heat)
            for (const Stage id : heatmap_stages(a))
                write_compare_heatmaps(std::cout, A.view, B.view, id, {"A", "B: " + escape_control(a.compare)},
                                       heat->batches[0], heat->heads[0], *heat);
    }
    std::cout.flush();
    if (!std::cout) throw RuntimeFailure("<stdout>: cannot write the report");
    return 0;
}

}  // namespace attnscope::cli
