// `attnscope report --html OUT.html A.npz B.npz ... [model/mask options of run]`: the
// model view. Each bundle is one layer (a directory stands for its .npz and .json files,
// in name order); every layer runs with the same options, and the page lays out layers x
// heads as thumbnails of the weights: options → io → model → core → report.
#include "attnscope/report/report.hpp"

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "attnscope/base/errors.hpp"
#include "attnscope/base/text.hpp"
#include "attnscope/core/attention.hpp"
#include "attnscope/core/view.hpp"
#include "attnscope/io/read.hpp"
#include "attnscope/io/write.hpp"
#include "attnscope/model/model.hpp"
#include "counts.hpp"
#include "run.hpp"
#include "subcommand.hpp"

namespace attnscope::cli {
namespace {

struct ReportArgs {
    RunOptions run;  // model and mask options, --max-memory, --threads
    std::vector<std::string> bundles;
    std::string html;
    bool force = false;
    bool full = false;
    std::string range = "auto";
    bool log_scale = false;
};

// One computed layer, kept alive behind a type-erased handle.
struct Layer {
    TraceView view;
    std::shared_ptr<void> keep;
};

template <typename T>
Layer compute(const Bundle& bundle, const Spec& spec, std::size_t threads, std::size_t limit) {
    auto state = std::make_shared<std::pair<Problem<T>, Trace<T>>>();
    state->first = make_problem<T>(bundle, spec);
    for (const auto& w : state->first.warnings) std::cerr << "attnscope: warning: " << escape_control(w) << '\n';
    Compute how;
    how.keep = StageSet().set(kWeights) | kHeatmapNeeds;
    how.threads = threads;
    check_memory_limit(bundle, state->first, how, limit);
    state->second = attend(state->first, how);
    return {view_of(bundle.source, state->first, state->second), state};
}

// The bundles named: files as they are, a directory as its .npz and .json files by name.
std::vector<std::string> expand(const std::vector<std::string>& paths) {
    std::vector<std::string> out;
    for (const auto& p : paths) {
        std::error_code ec;
        if (!std::filesystem::is_directory(p, ec)) {
            out.push_back(p);
            continue;
        }
        std::vector<std::string> found;
        for (const auto& e : std::filesystem::directory_iterator(p, ec)) {
            const std::string ext = e.path().extension().string();
            if (e.is_regular_file(ec) && (ext == ".npz" || ext == ".json")) found.push_back(e.path().string());
        }
        if (ec) throw InputError(p + ": cannot list the directory: " + ec.message());
        if (found.empty()) throw InputError(p + ": expected .npz or .json bundles in the directory, found none");
        std::sort(found.begin(), found.end());
        out.insert(out.end(), found.begin(), found.end());
    }
    return out;
}

int run_report(ReportArgs& a) {
    const Spec spec = spec_of([&] {
        RunOptions o = a.run;
        o.bundle = a.bundles.empty() ? "" : a.bundles[0];
        return o;
    }());
    FigureOptions figure;
    figure.full = a.full;
    figure.range = parse_range(a.range, a.log_scale);
    check_output_target(a.html, a.force, a.html);
    const std::size_t limit = memory_limit(a.run);
    std::vector<Layer> layers;
    std::vector<std::string> names;
    for (const std::string& path : expand(a.bundles)) {
        RunOptions o = a.run;
        o.bundle = path;
        Spec layer_spec = spec;
        const Bundle bundle = load_inputs(o, limit, layer_spec);
        layers.push_back(o.dtype == "float32" ? compute<float>(bundle, layer_spec, o.threads, limit)
                                              : compute<double>(bundle, layer_spec, o.threads, limit));
        names.push_back(path);
    }
    std::vector<const TraceView*> views;
    for (const Layer& l : layers) views.push_back(&l.view);
    AtomicTextFile f(a.html, a.force);
    write_model_html(f, views, names, figure);
    f.commit();
    return 0;
}

}  // namespace

Subcommand setup_report_command(CLI::App& parent) {
    auto a = std::make_shared<ReportArgs>();
    CLI::App* cmd = parent.add_subcommand(
        "report",
        "The model view: several bundles (layers) x heads as thumbnails of the weights on one HTML page; a click "
        "opens one");
    cmd->add_option("bundles", a->bundles, "Bundles, one per layer (.npz or .json), or directories of them")
        ->required();
    cmd->add_option("--html", a->html, "The HTML page to write")->required();
    add_model_options(cmd, a->run);
    cmd->add_flag("--force", a->force, "Replace an existing --html file");
    cmd->add_flag("--full", a->full, "Draw every cell (without it, the ends of an axis longer than 2048)");
    cmd->add_option("--range", a->range, "Colour scale: auto, fixed, row or LO,HI (as run's --range)")
        ->capture_default_str();
    cmd->add_flag("--log-scale", a->log_scale, "Colour the weights by log10 (as run's --log-scale)");
    cmd->add_option("--max-memory", a->run.max_memory, "Refuse inputs needing more memory than this (e.g. 8G)");
    cmd->add_option("--threads", a->run.threads, "Compute threads (default: every core)")
        ->check(count_in(1, kMaxThreads));
    return {cmd, [a] { return run_report(*a); }};
}

}  // namespace attnscope::cli
