// `attnscope run BUNDLE [options]`: options → io → model → core → report. The options are
// the groups of options.hpp; the shared steps are inputs.cpp's, the outputs run_output.cpp's,
// --compare is compare.cpp's.
#include "run.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>

#include "attnscope/base/errors.hpp"
#include "attnscope/base/json_writer.hpp"
#include "attnscope/base/text.hpp"
#include "attnscope/core/attention.hpp"
#include "attnscope/core/view.hpp"
#include "attnscope/report/report.hpp"
#include "long_run.hpp"
#include "run_output.hpp"
#include "subcommand.hpp"

namespace attnscope::cli {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// --cell B,H,I,J (H,I,J for a 2-D x), checked against the sizes.
CellRef parse_cell(const RunOptions& o, bool batched, const Dims& dims) {
    CellRef cell;
    if (o.cell.empty()) return cell;
    const std::size_t n = o.cell.size(), want = batched ? 4 : 3;
    if (n != want)
        throw UsageError("--cell: expected " + std::string(batched ? "B,H,I,J" : "H,I,J (x is 2-D)") + ", found " +
                         std::to_string(n) + " numbers");
    cell = {batched ? o.cell[0] : 0, o.cell[n - 3], o.cell[n - 2], o.cell[n - 1]};
    check_cell(cell, dims);
    return cell;
}

// The stages to compute and keep: those chosen, and those each chosen view needs.
StageSet kept_stages(const RunOptions& o, const std::vector<std::string>& stages) {
    StageSet keep = stage_set(stages);
    if (o.heatmap || o.panels) keep |= kHeatmapNeeds;
    if (o.panels) keep |= kPanelsNeeds;
    if (o.diagnose) keep |= kDiagnoseNeeds;
    if (!o.cell.empty()) keep |= kCellNeeds;
    if (o.zero_key && !o.summary) keep |= stage_set({"masked_scores", "weights"});  // the zeroed key's row, worked out
    return keep;
}

// Finite inputs whose arithmetic overflowed: say where a NaN or infinity first appears.
template <typename T>
void warn_overflow(const Problem<T>& problem, const Trace<T>& trace) {
    if (!trace.first_nonfinite || !problem.warnings.empty()) return;  // non-finite inputs are reported already
    const auto& f = *trace.first_nonfinite;
    std::vector<std::size_t> at(f.at.begin() + (problem.batched ? 0 : 1), f.at.begin() + long(f.rank));
    std::cerr << "attnscope: warning: every input is finite, but " << stage_name(f.stage)
              << " holds a non-finite value, the first at " << shape_str(at)
              << ": the numbers overflow; every later stage it reaches carries it\n";
}

// The stages of this run: those asked for, each of which the problem must have; by
// default, every stage the problem has but head_output.
std::vector<std::string> stages_of_run(const RunOptions& o, StageSet has) {
    std::vector<std::string> out;
    if (o.summary && o.stages.empty()) return out;  // the summaries alone: no (Tq, Tk) stage
    if (o.stages.empty() || o.stages == "all") {
        for (Stage id : stages_in(has & default_stages())) out.push_back(stage_name(id));
        return out;
    }
    for (const auto& name : parse_stage_list(o.stages)) {
        const Stage id = *find_stage(name);
        if (!has[id])
            throw UsageError("{stages}: this run has no stage " + name + "; it exists with " +
                             std::string(stage_info(id).exists_with));
        out.push_back(name);
    }
    return out;
}

// What the computation writes as it goes: --jsonl's rows (this run's file, or that of every
// layer), --dump's stages.
struct Sinks {
    std::optional<JsonlOutput> own_jsonl;
    JsonlOutput* jsonl = nullptr;
    std::optional<Dump> dump;
};

// How to compute: the stages kept, the summaries, the sinks, the progress counters.
template <typename T>
Compute plan(const RunOptions& o, const Problem<T>& problem, const Bundle& bundle,
             const std::vector<std::string>& stages, std::size_t limit, Sinks& sinks, const LayerRun* layer) {
    Compute how;
    how.keep = kept_stages(o, stages);
    how.threads = o.threads;
    if (layer) how.arena = layer->arena;
    if (o.summary)  // no --sink-keys: the window scales with Tk (sink_window)
        how.summary =
            SummarySpec{o.topk, o.given.count("--sink-keys") ? std::optional(o.sink_keys) : std::nullopt, o.local};
    check_memory_limit(bundle, problem, how, limit);
    if (layer && layer->jsonl) {
        sinks.jsonl = layer->jsonl;
        sinks.jsonl->start_layer(layer->layer, problem.dims);
    } else if (!o.jsonl.empty()) {
        sinks.jsonl = &sinks.own_jsonl.emplace(o.jsonl, o.force, bundle.source, problem.dims, problem.batched);
    }
    if (sinks.jsonl) {
        auto& jsonl = *sinks.jsonl;
        if (o.summary)
            how.on_summary = [&jsonl](const Summary& s, std::size_t b, std::size_t h, std::size_t i0, std::size_t n) {
                jsonl.rows(s, b, h, i0, n);
            };
    }
    // A directory dump is prepared first: large stages are computed in their files.
    if (!o.dump.empty()) {
        auto& dump = sinks.dump.emplace(o.dump, stages, o.force);
        if (o.batches.empty() && o.heads_shown.empty())  // a selection is copied out: nothing computed in place
            how.place = [&dump](Stage s, std::size_t bytes) { return dump.place(stage_name(s), bytes); };
    }
    return how;
}

template <typename T>
int run_typed(const RunOptions& o, const Bundle& bundle, const Spec& spec, std::size_t limit, Clock::time_point t0,
              const LayerRun* layer = nullptr, const Predictions* predictions = nullptr) {
    Problem<T> problem = problem_of<T>(o, bundle, spec, limit);
    const auto stages = stages_of_run(o, stages_of(problem));
    if (!o.svg.empty() && std::find(stages.begin(), stages.end(), o.svg_stage) == stages.end())
        throw UsageError("{svg_stage} " + o.svg_stage + ": this run has no stage " + o.svg_stage + "; it exists with " +
                         std::string(stage_info(*find_stage(o.svg_stage)).exists_with));
    const TextOptions text = text_options(o, stages);
    check_selection(text, problem.dims);  // before anything is written
    const CellRef cell = parse_cell(o, problem.batched, problem.dims);
    const double load_s = seconds_since(t0);
    const auto t1 = Clock::now();
    print_warnings(problem.warnings);

    Sinks sinks;
    Compute how = plan(o, problem, bundle, stages, limit, sinks, layer);
    std::atomic<std::size_t> done{0}, total{0};
    how.progress_done = &done;
    how.progress_total = &total;
    Progress progress(done, total, o.quiet);
    Trace<T> trace = attend(problem, how);
    progress.stop();
    const double compute_s = seconds_since(t1);
    const auto t2 = Clock::now();
    const TraceView view = view_of(bundle.source, problem, trace);
    warn_fully_masked(trace.fully_masked, problem.batched);
    warn_overflow(problem, trace);
    // --json and --dump write stages whole: only the chosen batch items and heads.
    const bool select = (o.json || sinks.dump) && (!o.batches.empty() || !o.heads_shown.empty());
    const TraceView selected = select ? select_view(view, o.batches, o.heads_shown) : TraceView();
    const TraceView& whole = select ? selected : view;
    write_files(o, view, whole, stages, sinks.dump, trace.summary.get(), !layer);  // --layer all: said once
    write_stdout(o, view, whole, stages, text, cell, trace.summary.get(), layer, predictions);
    // last: a run killed while writing its report (a closed pipe) leaves no .jsonl behind
    if (sinks.own_jsonl) sinks.own_jsonl->finish(view, stages, trace.summary.get(), predictions);
    if (sinks.own_jsonl && o.jsonl != "-") say_written(o, o.jsonl, "line-delimited JSON");
    if (layer && layer->jsonl) layer->jsonl->add_stages(view, stages, trace.summary.get());
    if (o.timings) {
        char line[128];
        std::snprintf(line, sizeof line, "attnscope: timings: load=%.6f compute=%.6f output=%.6f\n", load_s, compute_s,
                      seconds_since(t2));
        std::cerr << line;
    }
    return 0;
}

// Layer `l`'s folder name of `n`: layer_00, ... (two digits at least).
std::string layer_folder(std::size_t l, std::size_t n) {
    std::string name = std::to_string(l);
    name.insert(0, std::max<std::size_t>(2, std::to_string(n - 1).size()) - name.size(), '0');
    return "layer_" + name;
}

// --layer all's options for layer `l` of `n`: its own folder of the dump under `root`
// (DIR/layer_00; the run writes them under a folder beside DIR first).
RunOptions layer_options(const RunOptions& o, std::size_t l, std::size_t n, const std::string& root) {
    RunOptions c = o;
    c.layer = l;
    c.every_layer = false;
    if (!o.dump.empty()) c.dump = root + "/" + layer_folder(l, n);
    return c;
}

// --dump DIR with --layer all: DIR absent or a directory, each layer's folder in it checked
// as a dump of its own. A layer's folder is replaced whole: one that holds anything needs
// --force, and then nothing but .npy files.
void check_layer_outputs(const RunOptions& o, std::size_t n) {
    const auto stages = parse_stage_list(o.stages);
    if (o.dump.empty() || describe_path(o.dump) != "a directory") return check_outputs(o, stages);
    for (std::size_t l = 0; l < n; ++l) {
        const RunOptions c = layer_options(o, l, n, o.dump);
        check_outputs(c, stages);
        std::error_code ec;
        for (const auto& e : std::filesystem::directory_iterator(c.dump, ec)) {
            const std::string found = escape_control(c.dump) + " holds " + escape_control(e.path().filename().string());
            if (!o.force)
                throw UsageError("--dump " + escape_control(o.dump) + ": " + found +
                                 "; --force replaces each layer's folder whole");
            if (!e.is_regular_file() || e.path().extension() != ".npy")
                throw UsageError("--dump " + escape_control(o.dump) +
                                 ": --force replaces each layer's folder whole, "
                                 "and " +
                                 found + "; choose another directory");
        }
    }
}

// --dump DIR of --layer all: every layer's folder is written under a new folder beside DIR
// and moved in once every layer has run, so DIR holds one run whole (the old one, or the
// new one); a run that fails leaves DIR as it was.
class LayerDumps {
   public:
    LayerDumps(const std::string& dir, std::size_t n) : dir_(dir), n_(n) {
        if (dir.empty()) return;
        std::string name = dir;
        while (name.size() > 1 && name.back() == '/') name.pop_back();
        name += ".attnscope-XXXXXX";
        if (!::mkdtemp(name.data()))
            throw RuntimeFailure("--dump " + escape_control(dir) +
                                 ": cannot make a folder beside it: " + std::strerror(errno));
        staging_ = name;
        const mode_t mask = ::umask(0);  // made as a directory is made: mkdtemp's is private
        ::umask(mask);
        ::chmod(staging_.c_str(), 0777 & ~mask);
    }
    ~LayerDumps() {
        std::error_code ec;
        if (!staging_.empty()) std::filesystem::remove_all(staging_, ec);
    }
    const std::string& root() const { return staging_; }
    // The new folders in place of the old ones (DIR made when absent).
    void commit() {
        try {
            move_in();
        } catch (const std::filesystem::filesystem_error& e) {
            throw RuntimeFailure("--dump " + escape_control(dir_) +
                                 ": cannot move the layers' folders in: " + e.code().message());
        }
    }

   private:
    void move_in() {
        namespace fs = std::filesystem;
        if (staging_.empty()) return;
        if (describe_path(dir_) == "absent") {
            fs::rename(staging_, dir_);
            staging_.clear();
            return;
        }
        const fs::path old = fs::path(staging_) / ".old";
        fs::create_directory(old);
        for (std::size_t l = 0; l < n_; ++l)  // the old folders out, then the new ones in
            if (fs::exists(fs::path(dir_) / layer_folder(l, n_)))
                fs::rename(fs::path(dir_) / layer_folder(l, n_), old / layer_folder(l, n_));
        for (std::size_t l = 0; l < n_; ++l)
            fs::rename(fs::path(staging_) / layer_folder(l, n_), fs::path(dir_) / layer_folder(l, n_));
    }
    std::string dir_, staging_;
    std::size_t n_;
};

// The layers' document of --json (attnscope.layers/1): opened before the first layer, the
// predictions after the last.
void open_layers_json(JsonWriter& json) {
    json.begin_object().key("schema").value("attnscope.layers/1").key("layers").begin_array();
}

void close_layers_json(JsonWriter& json, const Predictions* predictions) {
    json.newline().end_array();
    if (predictions) write_predictions_json(json, *predictions);
    json.end_object();
    std::cout << '\n' << std::flush;
    if (!std::cout) throw RuntimeFailure("<stdout>: cannot write the report");
}

// run --model DIR --layer all: ONE forward pass keeping every layer's attention input, then
// each layer's run in turn (its stages freed before the next), into the outputs they share.
int run_every_layer(const RunOptions& o, const Spec& spec, std::size_t limit, Clock::time_point t0) {
    ModelLayers model(o, limit);
    const std::size_t n = model.count();
    check_layer_outputs(o, n);
    std::optional<JsonlOutput> jsonl;
    if (!o.jsonl.empty()) jsonl.emplace(o.jsonl, o.force, o.model_text.model, Dims{}, false);
    model.forward();
    LayerDumps dumps(o.dump, n);
    std::optional<JsonWriter> json;
    if (o.json) open_layers_json(json.emplace(std::cout));
    Arena arena;  // each layer's stages are freed before the next: one block for them all
    for (std::size_t l = 0; l < n; ++l) {
        Spec layer_spec = spec;
        Bundle bundle;
        model.add_layer(l, bundle, layer_spec);
        const LayerRun layer{.layer = l,
                             .count = n,
                             .json = json ? &*json : nullptr,
                             .jsonl = jsonl ? &*jsonl : nullptr,
                             .explain = o.explain ? model.describe(l) : std::string(),
                             .arena = &arena};
        const RunOptions c = layer_options(o, l, n, dumps.root());
        if (o.dtype == Precision::float32)
            run_typed<float>(c, bundle, layer_spec, limit, t0, &layer);
        else
            run_typed<double>(c, bundle, layer_spec, limit, t0, &layer);
    }
    dumps.commit();
    if (!o.dump.empty()) say_written(o, o.dump, "a folder of the stages per layer");
    if (json) close_layers_json(*json, model.predictions());
    if (!o.json && !o.quiet && o.jsonl != "-" && model.predictions())
        write_predictions_text(std::cout << '\n', *model.predictions(), o.width ? o.width : terminal_width());
    if (jsonl) jsonl->complete(model.predictions());
    if (jsonl && o.jsonl != "-") say_written(o, o.jsonl, "line-delimited JSON, every layer");
    return 0;
}

}  // namespace

CLI::App* setup_run(CLI::App& app, RunOptions& o) {
    auto* run = app.add_subcommand("run", "Compute attention on a bundle of arrays and show every stage");
    run->footer(
        "Selections (--batch, --head) apply to every output: the report, --json, --dump, --html, --svg, the "
        "heatmaps and views; each output records what was run (options, masks, experiments, selections).");
    o.InputOptions::add(*run);
    add_model_text_options(run, o);
    o.CheckpointOptions::add(*run);
    o.OwnQKVOptions::add(*run);
    o.ModelOptions::add(*run);
    o.MaskOptions::add(*run);
    o.ModernOptions::add(*run);
    o.OutputOptions::add(*run);
    o.SelectionOptions::add(*run, "every output");
    o.ViewOptions::add(*run);
    o.ExperimentOptions::add(*run);
    o.LimitOptions::add(*run, {"Refuse runs needing more memory than this (e.g. 8G, 512M; default 3/4 of physical "
                               "memory)",
                               "Compute threads (default: every core)", true});
    o.LongContextOptions::add(*run);
    note_given_options(*run, o.given, &o.headings);  // a bundle's config fills in only the others
    later_options_replace(run);
    return run;
}

Subcommand setup_run_command(CLI::App& parent) {
    auto opts = std::make_shared<RunOptions>();
    CLI::App* app = setup_run(parent, *opts);
    return {app, [opts] { return run_run(*opts); }};
}

int run_run(const RunOptions& o) {
    const auto t0 = Clock::now();
    o.validate();  // before any work
    Spec spec = spec_of(o);
    check_conflicts(o, Scope::run);
    if (!o.sweep.empty()) return run_sweep(o);
    if (!o.why.empty()) return run_why(o);
    if (!o.compare.empty()) return run_compare(o);
    if (o.every_layer) return run_every_layer(o, spec, memory_limit(o), t0);
    check_outputs(o, parse_stage_list(o.stages));
    const std::size_t limit = memory_limit(o);
    std::optional<Predictions> predicted;
    const Bundle bundle = load_inputs(o, limit, spec, o.model_text.predict ? &predicted.emplace() : nullptr);
    const Predictions* p = predicted ? &*predicted : nullptr;
    return o.dtype == Precision::float32 ? run_typed<float>(o, bundle, spec, limit, t0, nullptr, p)
                                         : run_typed<double>(o, bundle, spec, limit, t0, nullptr, p);
}

}  // namespace attnscope::cli
