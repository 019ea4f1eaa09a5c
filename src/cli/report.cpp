// `attnscope report --html OUT.html A.npz B.npz ... [model/mask options of run]`: the
// model view. Each bundle is one row, labelled by its name (a directory stands for the
// bundles under it, searched recursively, in name order); each runs with its own config
// record under the command line's options, and the page lays out bundles x heads as
// thumbnails of the weights: options → io → model → core → report. With --model DIR and a
// text, the rows are every layer of one forward pass (docs/models.md).
#include "attnscope/report/report.hpp"

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
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
#include "help.hpp"
#include "run.hpp"
#include "run_output.hpp"
#include "subcommand.hpp"

namespace attnscope::cli {
namespace {

struct ReportArgs {
    RunOptions run;  // model and mask options, --max-memory, --threads; --html, --force, --full, --range, --log-scale
    std::vector<std::string> bundles;
};

// One computed layer.
using Layer = Held;

// What a row of the page keeps: the weights and what the heatmaps need.
const StageSet kPageKeeps = StageSet().set(kWeights) | kHeatmapNeeds;

template <typename T>
Layer compute(const Bundle& bundle, const Spec& spec, std::size_t threads, std::size_t limit) {
    Problem<T> problem = make_problem<T>(bundle, spec);
    print_warnings(problem.warnings);
    return held(attend_checked(bundle, std::move(problem), kPageKeeps, threads, limit));
}

// --model: the page keeps every layer's stages, so before the first is computed, `layers`
// times one layer's kept stages (layer 0's shapes: every layer of a model has them), the
// forward pass's inputs (T, Dm) of every layer and one layer's run are checked against the limit.
template <typename T>
void check_page_memory(const Bundle& bundle, const Spec& spec, std::size_t layers, std::size_t threads,
                       std::size_t limit) {
    const Problem<T> p = make_problem<T>(bundle, spec);
    const Dims& d = p.dims;
    double kept = 0;
    for (const StageInfo& s : stage_table())
        if (kPageKeeps[s.id]) kept += double(s.value == ValueKind::boolean ? 1 : sizeof(T)) * double(s.elements(d));
    Compute how;
    how.keep = kPageKeeps;
    how.threads = threads;
    const double inputs = double(layers) * double(d.Tq) * double(d.Dm) * sizeof(T);
    const double need = double(layers) * kept + inputs + double(planned_bytes(d, sizeof(T), how));
    if (need <= double(limit)) return;
    throw MemoryLimitError("the page keeps every layer's weights: " + std::to_string(layers) + " layers of " +
                           format_bytes(std::size_t(kept)) + ", about " +
                           format_bytes(need >= 1.8e19 ? ~std::size_t{0} : std::size_t(need)) +
                           " with the forward pass's inputs and a layer's run, more than {max_memory} " +
                           format_bytes(limit) + "; give fewer tokens, or raise {max_memory}");
}

// One bundle of the page: its file, and the name its row is labelled with.
struct Named {
    std::string path, name;
};

// "call10" after "call9": names compared with their runs of digits as numbers.
bool natural_less(const std::string& a, const std::string& b) {
    std::size_t i = 0, j = 0;
    const auto digit = [](char c) { return c >= '0' && c <= '9'; };
    while (i < a.size() && j < b.size()) {
        if (!digit(a[i]) || !digit(b[j])) {
            if (a[i] != b[j]) return a[i] < b[j];
            ++i, ++j;
            continue;
        }
        std::size_t i1 = i, j1 = j;
        while (i1 < a.size() && digit(a[i1])) ++i1;
        while (j1 < b.size() && digit(b[j1])) ++j1;
        const std::string x = a.substr(i, i1 - i), y = b.substr(j, j1 - j);
        const std::size_t zx = std::min(x.find_first_not_of('0'), x.size() - 1);
        const std::size_t zy = std::min(y.find_first_not_of('0'), y.size() - 1);
        if (x.size() - zx != y.size() - zy) return x.size() - zx < y.size() - zy;
        if (x.compare(zx, std::string::npos, y, zy, std::string::npos) != 0) return x.substr(zx) < y.substr(zy);
        i = i1, j = j1;
    }
    return a.size() - i < b.size() - j;
}

std::string without_extension(const std::filesystem::path& p) { return (p.parent_path() / p.stem()).generic_string(); }

// Whether a file found in a directory is a bundle: an .npz or .json file, but not the
// side files scripts/capture_bundle.py writes beside callN.npz (callN.expected.npz, callN.json).
bool is_bundle_file(const std::filesystem::path& p) {
    const std::string name = p.filename().string(), ext = p.extension().string();
    if (ext == ".npz") return !ends_with(name, ".expected.npz");
    if (ext != ".json") return false;
    std::error_code ec;
    return !std::filesystem::exists(std::filesystem::path(p).replace_extension(".npz"), ec);
}

// The bundles under a directory, searched recursively (capture folders: OUT/NAME/callN.npz),
// each named by its path from `dir` without the extension; a link that leads nowhere is named.
std::vector<Named> bundles_under(const std::string& dir) {
    namespace fs = std::filesystem;
    std::vector<Named> found;
    std::error_code ec;
    fs::recursive_directory_iterator it(dir, ec), end;
    for (; !ec && it != end; it.increment(ec)) {
        const fs::path& p = it->path();
        std::error_code st;
        const fs::file_status target = fs::status(p, st);
        if (it->is_symlink(st) && !fs::exists(target) && is_bundle_file(p))
            throw InputError(escape_control(p.string()) + ": a symbolic link to nothing (" +
                             escape_control(fs::read_symlink(p, st).string()) + " does not exist)");
        if (fs::is_regular_file(target) && is_bundle_file(p))
            found.push_back({p.string(), escape_control(without_extension(p.lexically_relative(dir)))});
    }
    if (ec) throw InputError(escape_control(dir) + ": cannot list the directory: " + ec.message());
    if (found.empty())
        throw InputError(escape_control(dir) + ": expected .npz or .json bundles in the directory, found none");
    std::sort(found.begin(), found.end(), [](const Named& a, const Named& b) { return natural_less(a.name, b.name); });
    return found;
}

// The bundles named: files as they are (named by their path without the extension), a
// directory as the bundles under it.
std::vector<Named> expand(const std::vector<std::string>& paths) {
    std::vector<Named> out;
    for (const auto& p : paths) {
        std::error_code ec;
        if (!std::filesystem::is_directory(p, ec)) {
            out.push_back({p, escape_control(without_extension(p))});
            continue;
        }
        const std::vector<Named> found = bundles_under(p);
        out.insert(out.end(), found.begin(), found.end());
    }
    return out;
}

Layer compute_layer(const RunOptions& o, const Bundle& bundle, const Spec& spec, std::size_t limit) {
    return o.dtype == Precision::float32 ? compute<float>(bundle, spec, o.threads, limit)
                                         : compute<double>(bundle, spec, o.threads, limit);
}

// The page's rows: one per bundle, each with its own config record under the command line's.
void add_bundles(const ReportArgs& a, const Spec& spec, std::size_t limit, std::vector<Layer>& layers,
                 std::vector<std::string>& names) {
    for (const Named& b : expand(a.bundles)) {
        RunOptions o = a.run;
        o.bundle = b.path;
        Spec layer_spec = spec;  // with the bundle's own config under the command line's (load_inputs)
        layers.push_back(compute_layer(o, load_inputs(o, limit, layer_spec), layer_spec, limit));
        names.push_back(b.name);
    }
}

// --model DIR: a row per layer of ONE forward pass ("layer N"), each with the layer's own
// options as run --model --layer N takes them.
void add_model_layers(const ReportArgs& a, const Spec& spec, std::size_t limit, std::vector<Layer>& layers,
                      std::vector<std::string>& names) {
    ModelLayers model(a.run, limit);
    model.check_layer(a.run.layer.value_or(0));
    model.forward();
    {
        Spec first_spec = spec;
        Bundle first;
        model.add_layer(0, first, first_spec);
        (a.run.dtype == Precision::float32
             ? check_page_memory<float>
             : check_page_memory<double>)(first, first_spec, model.count(), a.run.threads, limit);
    }
    for (std::size_t l = 0; l < model.count(); ++l) {
        Spec layer_spec = spec;
        Bundle bundle;
        model.add_layer(l, bundle, layer_spec);
        layers.push_back(compute_layer(a.run, bundle, layer_spec, limit));
        names.push_back("layer " + std::to_string(l));
    }
}

int run_report(ReportArgs& a) {
    const bool model = !a.run.model_text.model.empty();
    if (model == !a.bundles.empty())
        throw UsageError(model ? "--model: the page's rows are its layers; give it without bundles"
                               : "report: expected bundles (.npz, .json or directories of them), or --model DIR");
    if (a.run.layer && !model) throw UsageError("--layer: chooses the head view's layer of --model DIR");
    const Spec spec = spec_of([&] {
        RunOptions o = a.run;
        o.bundle = a.bundles.empty() ? "" : a.bundles[0];
        return o;
    }());
    FigureOptions figure;
    figure.full = a.run.full;
    figure.range = parse_range(a.run.range, a.run.log_scale);
    check_output_target(a.run.html, a.run.force, a.run.html);
    const std::size_t limit = memory_limit(a.run);
    std::vector<Layer> layers;
    std::vector<std::string> names;
    (model ? add_model_layers : add_bundles)(a, spec, limit, layers, names);
    std::vector<const TraceView*> views;
    for (const Layer& l : layers) views.push_back(&l.view);
    AtomicTextFile f(a.run.html, a.run.force);
    // --model: the head view and the coloured text of one layer, on the model's tokens
    write_model_html(f, views, names, figure, model ? std::optional(a.run.layer.value_or(0)) : std::nullopt);
    f.commit();
    say_written(a.run, a.run.html, model ? "HTML model view, every layer" : "HTML model view");
    return 0;
}

}  // namespace

Subcommand setup_report_command(CLI::App& parent) {
    auto a = std::make_shared<ReportArgs>();
    CLI::App* cmd = parent.add_subcommand(
        "report",
        "The model view: several bundles (layers), or every layer of --model DIR on a text, x heads as thumbnails "
        "of the weights on one HTML page; a click opens one");
    cmd->add_option("bundles", a->bundles,
                    "Bundles, one per row (.npz or .json), or directories searched for them (capture folders "
                    "OUT/NAME/callN.npz); or --model DIR");
    RunOptions& o = a->run;
    add_model_source_options(cmd, o);
    cmd->add_option_function<std::size_t>(
           "--layer", [&o](std::size_t n) { o.layer = n; },
           "With --model: the layer whose head view and coloured text the page shows (default 0)")
        ->check(index_check())
        ->group(kViews);
    cmd->add_option("--html", o.html, "The HTML page to write")->required()->group(kOutputs);
    o.ModelOptions::add(*cmd);
    o.MaskOptions::add(*cmd);
    o.ModernOptions::add(*cmd);
    note_given_options(*cmd, o.given);  // they override each bundle's config
    cmd->add_flag("--force", o.force, "Replace an existing --html file")->group(kOutputs);
    cmd->add_flag("--full", o.full, "Draw every cell (without it, the ends of an axis longer than 2048)")
        ->group(kViews);
    cmd->add_option("--range", o.range, "Colour scale: auto, fixed, row or LO,HI (as run's --range)")
        ->capture_default_str()
        ->group(kViews);
    cmd->add_flag("--log-scale", o.log_scale, "Colour the weights by log10 (as run's --log-scale)")->group(kViews);
    o.LimitOptions::add(
        *cmd, {"Refuse inputs needing more memory than this (e.g. 8G)", "Compute threads (default: every core)"});
    return {cmd, [a] { return run_report(*a); }};
}

}  // namespace attnscope::cli
