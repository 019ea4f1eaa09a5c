// `attnscope run BUNDLE [--heads H] [--causal] [--scale S] [--dtype float32|float64] [--dump PATH] [--json]`
#include "run.hpp"

#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iostream>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "attnscope/analysis/compare.hpp"
#include "attnscope/analysis/diagnostics.hpp"
#include "attnscope/base/errors.hpp"
#include "attnscope/base/text.hpp"
#include "attnscope/core/attention.hpp"
#include "attnscope/core/view.hpp"
#include "attnscope/io/read.hpp"
#include "attnscope/io/write.hpp"
#include "attnscope/model/checkpoint.hpp"
#include "attnscope/model/model.hpp"
#include "attnscope/model/qkv.hpp"
#include "attnscope/report/report.hpp"
#include "attnscope/report/summary_report.hpp"
#include "counts.hpp"
#include "help.hpp"
#include "long_run.hpp"
#include "subcommand.hpp"

namespace attnscope::cli {

namespace {

// Arrays that may come from their own file, overriding the bundle's entry of that name.
const char* const kArrayOptions[] = {"x",   "memory",          "W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V",
                                     "b_O", "key_padding_mask"};

using Clock = std::chrono::steady_clock;

// Colour only for a terminal, unless asked; NO_COLOR (any value) turns "auto" off.
ColorMode color_mode(const std::string& when) {
    const char* no_color = std::getenv("NO_COLOR");
    const char* term = std::getenv("TERM");
    bool on = when == "always" || (when == "auto" && ::isatty(STDOUT_FILENO) && !(no_color && *no_color) &&
                                   !(term && std::string(term) == "dumb"));
    if (!on) return ColorMode::none;
    const char* ct = std::getenv("COLORTERM");
    std::string c = ct ? ct : "";
    return c == "truecolor" || c == "24bit" ? ColorMode::truecolor : ColorMode::c256;
}

std::size_t terminal_width() {
    struct winsize ws {};
    if (::isatty(STDOUT_FILENO) && ::ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 20) return ws.ws_col;
    if (const char* c = std::getenv("COLUMNS")) {
        long n = std::strtol(c, nullptr, 10);
        if (n >= 20 && n <= 10000) return std::size_t(n);
    }
    return 80;
}

// "8G", "512M", "100k", "12345" -> bytes (binary units).
std::size_t parse_size(const std::string& text) {
    std::size_t pos = 0;
    double v = -1;
    try {
        v = std::stod(text, &pos);
    } catch (const std::exception&) {
    }
    std::string unit = text.substr(pos);
    double mult = unit.empty() || unit == "B" ? 1 : 0;
    const char* units = "KMGT";
    for (int k = 0; k < 4; ++k)
        if (unit == std::string(1, units[k]) || unit == std::string(1, units[k]) + "B" ||
            unit == std::string(1, units[k]) + "iB" || unit == std::string(1, char(units[k] + 32)))
            mult = std::pow(1024.0, k + 1);
    if (!(v > 0) || mult == 0 || v * mult > 1.8e19)
        throw UsageError("--max-memory: expected a size such as 8G, 512M or 1000000, found '" + text + "'");
    return std::size_t(v * mult);
}

}  // namespace

std::size_t memory_limit(const RunOptions& o) {
    if (!o.max_memory.empty()) return parse_size(o.max_memory);
    long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
    if (pages <= 0 || page <= 0) return kNoLimit;
    return std::size_t(pages) / 4 * 3 * std::size_t(page);
}

namespace {

// Existing outputs are kept unless --force: checked before any work is done.
void check_outputs(const RunOptions& o, const std::vector<std::string>& stages) {
    // (With every stage, whether the run has the --svg-stage is known once the bundle is read.)
    const bool all = o.stages.empty() || o.stages == "all";
    if (!o.svg.empty() && !all && std::find(stages.begin(), stages.end(), o.svg_stage) == stages.end()) {
        if (o.given.count("--svg-stage"))
            throw UsageError("--svg-stage " + o.svg_stage + ": not among the chosen --stages " + o.stages +
                             "; add it to --stages");
        // The user chose --stages, not the stage --svg draws by default: say it in those terms.
        std::string drawable;
        for (const auto& s : stages)
            if (stage_info(*find_stage(s)).over_keys()) drawable = drawable.empty() ? s : drawable;
        throw UsageError(
            "--svg " + o.svg + ": draws the " + o.svg_stage + " by default, and --stages " + o.stages +
            " leaves them out; add " + o.svg_stage + " to --stages" +
            (drawable.empty() ? std::string() : ", or draw " + drawable + " with --svg-stage " + drawable));
    }
    // Every output path, before any work: a run never computes for minutes and then fails
    // on a missing directory, nor leaves some outputs behind for another one that failed.
    for (const std::string* f : {&o.html, &o.svg, &o.dump})
        if (!f->empty() && describe_path(*f) == "a symbolic link to a regular file" && o.force)
            std::cerr << "attnscope: note: " << escape_control(*f)
                      << " is a symbolic link; --force replaces the link itself "
                      << "(the file it points to is kept)\n";
    if (!o.html.empty()) check_output_target(o.html, o.force, o.html);
    if (!o.svg.empty()) check_output_target(o.svg, o.force, o.svg);
    if (o.dump.empty()) return;
    if (dump_is_npz(o.dump)) return check_output_target(o.dump, o.force, "{dump} " + o.dump);
    const std::string found = describe_path(o.dump);
    if (found == "absent") return check_output_target(o.dump, false, "{dump} " + o.dump);
    if (found != "a directory")
        throw UsageError("--dump " + o.dump + ": exists and is " + found +
                         " (a dump is a directory or a .npz file); it is never replaced");
    for (const auto& s : stages)
        check_output_target(o.dump + "/" + s + ".npy", o.force, "--dump " + o.dump + ": " + o.dump + "/" + s + ".npy");
}

// A progress line on stderr for computations longer than a second, only when stderr is
// a terminal; silent otherwise (pipes, files, CI logs).
class Progress {
   public:
    Progress(const std::atomic<std::size_t>& done, const std::atomic<std::size_t>& total, bool quiet) {
        if (quiet || !::isatty(STDERR_FILENO)) return;
        thread_ = std::thread([this, &done, &total] {
            const auto start = Clock::now();
            bool shown = false;
            std::unique_lock<std::mutex> lock(m_);
            while (!cv_.wait_for(lock, std::chrono::milliseconds(200), [this] { return stop_; })) {
                const double s = std::chrono::duration<double>(Clock::now() - start).count();
                if (s < 1.0 || total == 0) continue;
                // tiles of query rows done, their rate, and the time left at that rate
                const double f = double(done) / double(total), left = f > 0 ? s * (1 - f) / f : 0;
                std::fprintf(stderr,
                             "\rattnscope: computing %3.0f%% (%zu/%zu tiles, %.1f/s, %.0f s, ~%.0f s left)\033[K",
                             100.0 * f, std::size_t(done), std::size_t(total), double(done) / s, s, left);
                shown = true;
            }
            if (shown) std::fprintf(stderr, "\r\033[K");
        });
    }
    ~Progress() { stop(); }
    void stop() {
        if (!thread_.joinable()) return;
        {
            std::lock_guard<std::mutex> g(m_);
            stop_ = true;
        }
        cv_.notify_one();
        thread_.join();
    }

   private:
    std::thread thread_;
    std::mutex m_;
    std::condition_variable cv_;
    bool stop_ = false;
};

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

TextOptions text_options(const RunOptions& o, const std::vector<std::string>& stages) {
    TextOptions text;
    text.stages = stages;
    text.batches = o.batches;
    text.heads = o.heads_shown;
    text.decimals = o.decimals;
    text.edgeitems = o.edgeitems;
    text.full = o.full;
    text.heatmap = o.heatmap;
    text.explain = o.explain;
    text.range = parse_range(o.range, o.log_scale);
    return text;
}

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
    return keep;
}

void warn_fully_masked(const std::vector<MaskedRow>& rows, bool batched) {
    if (rows.empty()) return;
    std::string list;
    for (const auto& r : rows)
        list += (list.empty() ? "" : ", ") + (batched ? "batch " + std::to_string(r.batch) + " query " : "query ") +
                std::to_string(r.query);
    std::cerr << "attnscope: warning: " << rows.size() << " query row" << (rows.size() > 1 ? "s see" : " sees")
              << " no key (every key masked); their weights are all 0: " << list << '\n';
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

// One line on stderr for each file written, unless --quiet: "attnscope: wrote r.html (HTML report)".
void say_written(const RunOptions& o, const std::string& path, const char* what) {
    if (!o.quiet) std::cerr << "attnscope: wrote " << escape_control(path) << " (" << what << ")\n";
}

// Whether to print the report: always, unless only files were asked for (--dump, --html,
// --svg, --jsonl FILE) and no option says what to print (a view, --stages, the report's own).
bool report_wanted(const RunOptions& o) {
    const bool files = !o.dump.empty() || !o.html.empty() || !o.svg.empty() || (!o.jsonl.empty() && o.jsonl != "-");
    static const char* const kPrinted[] = {"--stages", "--heatmap",  "--panels",    "--explain", "--diagnose",
                                           "--cell",   "--decimals", "--edgeitems", "--width",   "--color"};
    return !files || std::any_of(std::begin(kPrinted), std::end(kPrinted),
                                 [&o](const char* option) { return o.given.count(option) > 0; });
}

// The files: --dump (prepared before the computation, committed here; only the chosen
// batch items and heads: `selected`, with the summaries when asked for), --html, --svg.
void write_files(const RunOptions& o, const TraceView& view, const TraceView& selected,
                 const std::vector<std::string>& stages, std::optional<Dump>& dump, const Summary* summary) {
    if (dump) {
        dump->commit(selected, summary ? summary_arrays(*summary, view.batched) : std::vector<OutArray>{});
        say_written(o, o.dump, dump_is_npz(o.dump) ? "the stages in one .npz archive" : "the stages as NAME.npy");
    }
    FigureOptions figure;
    figure.full = o.full;
    figure.range = parse_range(o.range, o.log_scale);
    figure.batches = o.batches, figure.heads = o.heads_shown;
    if (!o.html.empty()) {
        AtomicTextFile f(o.html, o.force);
        write_html(f, view, stages, o.batches, o.heads_shown, figure);
        f.commit();
        say_written(o, o.html, "HTML report");
    }
    if (!o.svg.empty()) {
        AtomicTextFile f(o.svg, o.force);
        write_svg(f, view, o.svg_stage, o.batches.empty() ? 0 : o.batches[0],
                  o.heads_shown.empty() ? 0 : o.heads_shown[0], figure);
        f.commit();
        say_written(o, o.svg, "SVG heatmap");
    }
}

// Standard output: one JSON document, or the report a person reads.
void write_stdout(const RunOptions& o, const TraceView& view, const TraceView& selected,
                  const std::vector<std::string>& stages, TextOptions text, const CellRef& cell,
                  const Summary* summary) {
    std::vector<RowDiagnostics> diagnostics;
    if (o.diagnose) diagnostics = diagnose(view);
    if (o.jsonl == "-") return;  // standard output holds the line-delimited JSON
    if (o.json) {
        const auto chosen = [](const std::vector<std::size_t>& list, std::size_t i) {
            return list.empty() || std::find(list.begin(), list.end(), i) != list.end();
        };
        diagnostics.erase(std::remove_if(diagnostics.begin(), diagnostics.end(),
                                         [&](const RowDiagnostics& r) {
                                             return !chosen(o.batches, r.batch) || !chosen(o.heads_shown, r.head);
                                         }),
                          diagnostics.end());
        std::function<void(JsonWriter&)> extra;
        if (summary)
            extra = [&](JsonWriter& w) {
                w.key("summary");
                write_summary_json(w, *summary, view.batched);
            };
        write_json(std::cout, selected, stages, o.diagnose ? &diagnostics : nullptr, extra);
    } else if (o.quiet || !report_wanted(o)) {
        return;
    } else {
        text.color = color_mode(o.color);
        text.width = o.width ? o.width : terminal_width();
        if (summary && stages.empty()) {
            write_run_header(std::cout, view, text);
        } else if (o.panels) {
            write_run_header(std::cout, view, text);
            write_panels(std::cout, view, text);
        } else if (o.cell.empty() || !o.stages.empty())
            write_text(std::cout, view, text);
        if (o.diagnose) write_diagnostics_text(std::cout, view, diagnostics, text);
        if (!o.cell.empty()) write_cell(std::cout, view, cell, o.decimals);
        if (summary) write_summary_text(std::cout, *summary, view, text);
    }
    std::cout.flush();
    if (!std::cout) throw RuntimeFailure("<stdout>: cannot write the report");
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

// The run's problem: from the bundle's x and weights, or from {qkv}'s own Q, K and V.
template <typename T>
Problem<T> problem_of(const RunOptions& o, const Bundle& bundle, const Spec& spec, std::size_t limit) {
    if (o.qkv.empty()) return make_problem<T>(bundle, spec);
    std::map<std::string, std::string> axes;
    for (const auto& item : o.axes) {
        const auto eq = item.find('=');
        if (eq == std::string::npos || eq == 0 || eq + 1 == item.size())
            throw UsageError("--axes " + item + ": expected NAME=ORDER, e.g. q=bthd or k=bt(hd)");
        axes[item.substr(0, eq)] = item.substr(eq + 1);
    }
    const GivenQKV qkv =
        read_qkv(load_named_arrays(o.qkv, limit), spec.heads, spec.kv_heads.value_or(spec.heads), axes);
    return make_problem_qkv<T>(bundle, qkv, spec);
}

template <typename T>
int run_typed(const RunOptions& o, const Bundle& bundle, const Spec& spec, std::size_t limit, Clock::time_point t0) {
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
    for (const auto& w : problem.warnings) std::cerr << "attnscope: warning: " << escape_control(w) << '\n';

    Compute how;
    how.keep = kept_stages(o, stages);
    how.threads = o.threads;
    if (o.summary) how.summary = SummarySpec{o.topk, o.sink_keys, o.local};
    check_memory_limit(bundle, problem, how, limit);
    std::optional<JsonlOutput> jsonl;
    if (!o.jsonl.empty()) {
        jsonl.emplace(o.jsonl, o.force, bundle.source, problem.dims, problem.batched);
        if (o.summary)
            how.on_summary = [&jsonl](const Summary& s, std::size_t b, std::size_t h, std::size_t i0, std::size_t n) {
                jsonl->rows(s, b, h, i0, n);
            };
    }
    // A directory dump is prepared first: large stages are computed in their files.
    std::optional<Dump> dump;
    const bool selecting = !o.batches.empty() || !o.heads_shown.empty();
    if (!o.dump.empty()) {
        dump.emplace(o.dump, stages, o.force);
        if (!selecting)  // a selection is copied out of the stages: nothing is computed in place
            how.place = [&dump](Stage s, std::size_t bytes) { return dump->place(stage_name(s), bytes); };
    }
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
    const TraceView selected =
        (o.json || dump) && selecting ? select_view(view, o.batches, o.heads_shown) : TraceView();
    const TraceView& whole = (o.json || dump) && selecting ? selected : view;
    write_files(o, view, whole, stages, dump, trace.summary.get());
    write_stdout(o, view, whole, stages, text, cell, trace.summary.get());
    // last: a run killed while writing its report (a closed pipe) leaves no .jsonl behind
    if (jsonl) jsonl->finish(view, stages, trace.summary.get());
    if (jsonl && o.jsonl != "-") say_written(o, o.jsonl, "line-delimited JSON");
    if (o.timings) {
        char line[128];
        std::snprintf(line, sizeof line, "attnscope: timings: load=%.6f compute=%.6f output=%.6f\n", load_s, compute_s,
                      seconds_since(t2));
        std::cerr << line;
    }
    return 0;
}

}  // namespace

namespace {

// The stages drawn as (query, key) heatmaps: --svg-stage takes one of them.
std::vector<std::string> matrix_stage_names() {
    std::vector<std::string> names;
    for (const StageInfo& s : stage_table())
        if (s.over_keys()) names.emplace_back(s.name);
    return names;
}

}  // namespace

void add_selection_options(CLI::App* cmd, RunOptions& o, const std::string& where) {
    cmd->add_option("--batch", o.batches, "Batch items shown in " + where + " (default all)")
        ->delimiter(',')
        ->check(index_check())
        ->group(kSelections);
    cmd->add_option("--head", o.heads_shown, "Heads shown in " + where + " (default all)")
        ->delimiter(',')
        ->check(index_check())
        ->group(kSelections);
}

// Options that choose the inputs: the bundle and arrays from their own files.
void add_input_options(CLI::App* run, RunOptions& o) {
    run->add_option("bundle", o.bundle,
                    "Named arrays: a .npz archive, a .json object, or - for JSON on stdin "
                    "(x, memory, W_Q, W_K, W_V, W_O, b_Q, b_K, b_V, b_O, key_padding_mask, query_tokens, key_tokens)");
    auto* arrays = run->add_option_group(kInputs);
    for (const char* name : kArrayOptions)
        arrays->add_option_function<std::string>(
            std::string("--") + name, [&o, name](const std::string& f) { o.array_files[name] = f; },
            std::string(name) + " from this .npy or .json file, not the bundle");
    auto* ckpt = run->add_option_group(kCheckpoint);
    ckpt->add_option("--checkpoint", o.checkpoint,
                     "Weights from a model checkpoint: .safetensors, model.safetensors.index.json, a torch.save "
                     "file (.pt, .pth, .bin) or a directory holding one (x comes from the bundle or --x)");
    ckpt->add_option_function<std::size_t>(
            "--layer", [&o](std::size_t n) { o.layer = n; }, "The checkpoint's layer N (default: its only layer)")
        ->check(index_check());
    ckpt->add_option("--preset", o.preset,
                     "How the checkpoint names its layers: auto (config.json's model_type), gpt2, bert, llama, "
                     "mistral, qwen2, mha, tl")
        ->capture_default_str();
    ckpt->add_option("--prefix", o.prefix,
                     "The layer's tensors begin with this (e.g. encoder.layers.2.self_attn.), instead of --layer");
    // Which options were given, so a checkpoint's config fills in only the others.
    // (CLI11 keeps an option group's options in the group, an unnamed subcommand.)
    run->parse_complete_callback([run, &o] {
        std::function<void(CLI::App*)> collect = [&](CLI::App* app) {
            for (const CLI::Option* opt : app->get_options())
                if (opt->count() > 0) o.given.insert(opt->get_name());
            for (CLI::App* group : app->get_subcommands([](CLI::App* a) { return a->get_name().empty(); }))
                collect(group);
        };
        collect(run);
    });
}

// Options of the model and the masks.
void add_model_options(CLI::App* run, RunOptions& o) {
    run->add_option("--heads", o.heads, "Number of heads H (splits the projected widths)")
        ->capture_default_str()
        ->check(count_in(1, kMaxHeads))
        ->group(kModel);
    run->add_flag("--causal,!--no-causal", o.causal, "Causal mask: query i sees only keys j <= i")->group(kMasks);
    run->add_option("--causal-align", o.causal_align,
                    "top-left (like torch.tril) or bottom-right (query i sits at i + Tk - Tq, the KV-cache view)")
        ->capture_default_str()
        ->check(CLI::IsMember({"top-left", "bottom-right"}))
        ->group(kMasks);
    run->add_option("--scale", o.scale_text, "Score scale: a number, or none (= 1); default 1/sqrt(Dk)")->group(kModel);
    run->add_option("--dtype", o.dtype, "Arithmetic precision")
        ->capture_default_str()
        ->check(CLI::IsMember({"float32", "float64"}))
        ->group(kModel);
    auto* modern = run->add_option_group(kModern);
    modern
        ->add_option_function<std::size_t>(
            "--kv-heads", [&o](std::size_t g) { o.kv_heads = g; },
            "K/V heads G (grouped-query attention; 1: multi-query): query head h reads K/V head h / (H/G)")
        ->check(count_in(1, kMaxHeads));
    modern->add_flag("--rope", o.rope, "Rotary position embeddings on Q and K (stages Q_rot, K_rot)");
    modern->add_option_function<double>(
        "--rope-base", [&o](double v) { o.rope_base = v; }, "RoPE's base θ: inv_freq_j = θ^(-2j/R) (default 10000)");
    modern
        ->add_option_function<std::size_t>(
            "--rope-dim", [&o](std::size_t v) { o.rope_dim = v; },
            "Features of each head that rotate, R (even; default Dk, the rest pass through)")
        ->check(count_in(1, kMaxHeads));
    modern
        ->add_option("--rope-style", o.rope_style,
                     "half: feature j pairs with j + R/2 (Llama, GPT-NeoX; default); interleaved: 2j with 2j+1 "
                     "(RoFormer, GPT-J)")
        ->check(CLI::IsMember({"half", "interleaved"}));
    modern->add_flag("--alibi", o.alibi,
                     "ALiBi bias m_h · (k_pos - q_pos), slopes 2^(-8(h+1)/H) (or the bundle's alibi_slopes)");
    modern
        ->add_option_function<std::size_t>(
            "--window", [&o](std::size_t w) { o.window = w; },
            "Sliding window W: with --causal the W latest keys (q_pos - W < k_pos <= q_pos), else |q_pos - k_pos| < W")
        ->check(count_in(1, kMaxPositions));
    modern->add_option_function<double>(
        "--softcap", [&o](double c) { o.softcap = c; },
        "Logit soft-capping C · tanh(scores / C) before bias and mask (Gemma 2)");
    modern
        ->add_option("--attn-mask-means", o.attn_mask_means,
                     "A bool/int attn_mask's convention: allow (true = may attend, scaled_dot_product_attention) or "
                     "block (true = blocked, nn.MultiheadAttention)")
        ->check(CLI::IsMember({"allow", "block"}));
    modern->add_flag("--add-zero-attn", o.add_zero_attn,
                     "nn.MultiheadAttention's add_zero_attn: one zero key/value position appended (always visible)");
    run->add_option("--layout", o.layout,
                    "Weight layout: math (in, out), Q = x · W_Q; torch (out, in) as nn.Linear and "
                    "nn.MultiheadAttention store them; tl: TransformerLens's W_Q (H, Dm, Dk), W_O (H, Dv, Dm)")
        ->capture_default_str()
        ->check(CLI::IsMember({"math", "torch", "tl"}))
        ->group(kModel);
}

namespace {

// What is shown and written, and the limits of a run.
void add_output_options(CLI::App* run, RunOptions& o) {
    run->add_option("--stages", o.stages,
                    "Stages to show and dump, comma-separated, e.g. scores,weights (default all; none: no stage): Q, "
                    "K, V, scores, mask, masked_scores, weights, context, output; with the variants Q_rot, K_rot, "
                    "bias, sink_weight; head_output when asked for")
        ->group(kOutputs);
    add_selection_options(run, o, "every output");
    run->add_option("--decimals", o.decimals, "Decimals in the printed report")
        ->capture_default_str()
        ->check(CLI::Range(0, 17))
        ->group(kViews);
    run->add_option("--edgeitems", o.edgeitems, "Rows/columns shown at each end of a long axis")
        ->capture_default_str()
        ->check(count_in(1, 1000))
        ->group(kViews);
    run->add_flag("--full", o.full,
                  "Never summarise: every number, every key of a heatmap, every cell of --html and --svg. "
                  "Without it a long axis shows its first and last cells around a gap (…): printed numbers beyond "
                  "2*edgeitems+2 or the width, heatmap keys beyond the width, HTML beyond 2048 cells (and about 8 "
                  "million cells a page), SVG beyond 256")
        ->group(kViews);
    run->add_option("--dump", o.dump, "Write each stage as NAME.npy into this directory, or into one .npz archive")
        ->group(kOutputs);
    run->add_flag("--json", o.json, "Print one JSON document instead of the report")->group(kOutputs);
    run->add_flag("-q,--quiet", o.quiet, "Print no report (useful with --dump)")->group(kOutputs);
    run->add_option("--threads", o.threads, "Compute threads (default: every core)")
        ->check(count_in(1, kMaxThreads))
        ->group(kLimits);
    run->add_flag("--timings", o.timings, "Print the seconds spent loading, computing and writing to stderr")
        ->group(kLimits);
    run->add_option("--max-memory", o.max_memory,
                    "Refuse runs needing more memory than this (e.g. 8G, 512M; default 3/4 of physical memory)")
        ->group(kLimits);
    run->add_flag("--force", o.force, "Replace existing outputs (--dump, --html, --svg)")->group(kOutputs);
}

void add_experiment_options(CLI::App* run, RunOptions& o) {
    auto* experiments = run->add_option_group(kExperiments);
    experiments->add_option("--temperature", o.temperature, "Scale 1/(sqrt(Dk) * T): T > 1 flattens, T < 1 sharpens");
    experiments
        ->add_option_function<std::size_t>(
            "--zero-key", [&o](std::size_t j) { o.zero_key = j; },
            "Set key vector J to 0 in every head (its score column collapses)")
        ->check(index_check());
    experiments->add_flag("--ignore-padding", o.ignore_padding, "Drop the key padding mask");
    experiments->add_option(
        "--compare", o.compare,
        "Compare with run B: these options added to this run's (one given again replaces its value), "
        "e.g. --compare '--scale none'");
}

void add_view_options(CLI::App* run, RunOptions& o) {
    auto* views = run->add_option_group(kViews);
    views->add_flag("--diagnose", o.diagnose,
                    "Per head and query: entropy, effective keys, max weight, uniform/one-hot flags, ||w·v||");
    views->add_option("--cell", o.cell, "One weight's arithmetic: B,H,I,J (H,I,J for a 2-D x)")
        ->delimiter(',')
        ->expected(3, 4)
        ->check(index_check());
    views->add_flag("--heatmap", o.heatmap, "Draw scores, mask, masked_scores and weights as heatmaps");
    views->add_flag("--panels", o.panels, "Per head: scores | masked_scores | weights side by side, as heatmaps");
    views->add_flag("--explain", o.explain, "Narrate each stage: formula, shapes with numbers, what the masks hide");
    views
        ->add_option("--color", o.color,
                     "Colour in heatmaps: auto (a terminal, unless NO_COLOR is set), always (even with NO_COLOR: "
                     "the option wins), never")
        ->capture_default_str()
        ->check(CLI::IsMember({"auto", "always", "never"}));
    views
        ->add_option("--range", o.range,
                     "Heatmap colour scale (terminal, --panels, --html, --svg): auto (one per stage, shared by every "
                     "head and panel drawn; scores with masked_scores; weights 0..1), fixed (the same over every batch "
                     "item and head of the run), row (each query row on its own), or LO,HI")
        ->capture_default_str();
    views->add_flag("--log-scale", o.log_scale,
                    "Colour weights and sink_weight by log10 (long rows, where 0..1 leaves every cell dark)");
    views->add_option("--width", o.width, "Terminal width for heads side by side (default: the terminal's)")
        ->check(count_in(20, 10000));
    run->add_option("--html", o.html, "Write a self-contained HTML report of the chosen stages (opens offline)")
        ->group(kOutputs);
    run->add_option("--svg", o.svg, "Write one stage of one head as an SVG heatmap (the first --batch and --head)")
        ->group(kOutputs);
    run->add_option("--svg-stage", o.svg_stage, "Stage drawn by --svg")
        ->capture_default_str()
        ->check(CLI::IsMember(matrix_stage_names()))
        ->group(kOutputs);
}

}  // namespace

void later_options_replace(CLI::App* cmd) {
    for (CLI::Option* opt : cmd->get_options())
        if (opt->get_expected_max() == 1 && opt->get_type_size_max() == 1)
            opt->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    for (CLI::App* group : cmd->get_subcommands([](CLI::App* a) { return a->get_name().empty(); }))
        later_options_replace(group);
}

CLI::App* setup_run(CLI::App& app, RunOptions& o) {
    auto* run = app.add_subcommand("run", "Compute attention on a bundle of arrays and show every stage");
    run->footer(
        "Selections (--batch, --head) apply to every output: the report, --json, --dump, --html, --svg, the "
        "heatmaps and views; each output records what was run (options, masks, experiments, selections).");
    add_input_options(run, o);
    auto* own = run->add_option_group(kOwnQKV);
    own->add_option("--qkv", o.qkv,
                    "Start at the scores from your q, k and v, as fused kernels take them (an .npz, JSON object or "
                    "directory of NAME.npy; names q/query, k/key, v/value); the bundle, if given, adds masks, "
                    "positions and tokens");
    own->add_option("--axes", o.axes,
                    "NAME=ORDER: the axis order of one --qkv array in the letters b, h, t, d with (..) around merged "
                    "axes, e.g. q=bthd or k=bt(hd); repeat for more")
        ->allow_extra_args(false);
    add_model_options(run, o);
    add_output_options(run, o);
    add_experiment_options(run, o);
    add_view_options(run, o);
    add_long_options(run, o);
    later_options_replace(run);
    return run;
}

Spec spec_of(const RunOptions& o) {
    Spec spec;
    spec.heads = o.heads;
    spec.causal = o.causal;
    spec.causal_align = o.causal_align == "bottom-right" ? CausalAlign::bottom_right : CausalAlign::top_left;
    spec.layout = o.layout == "torch" ? Layout::torch : Layout::math;
    spec.temperature = o.temperature;
    spec.zero_key = o.zero_key;
    spec.scale_text = o.scale_text;
    if (o.scale_text == "none") {
        spec.scale = 1.0;
    } else if (!o.scale_text.empty()) {
        // strtod, not stod: a subnormal such as 1e-320 is a number too (stod throws on ERANGE).
        const char* begin = o.scale_text.c_str();
        char* end = nullptr;
        const double v = std::strtod(begin, &end);
        if (end == begin || *end != '\0' || std::isspace(static_cast<unsigned char>(*begin)))
            throw UsageError("--scale: expected a number or none, found '" + o.scale_text + "'");
        spec.scale = v;
    }
    if (spec.scale && o.temperature != 1) throw UsageError("--temperature: contradicts --scale; give one of them");
    spec.kv_heads = o.kv_heads;
    if (o.rope) {
        spec.rope = Rope{};
        if (o.rope_base) spec.rope->base = *o.rope_base;
        spec.rope->dim = o.rope_dim;
        spec.rope->style = o.rope_style == "interleaved" ? RopeStyle::interleaved : RopeStyle::half;
    } else if (o.rope_base || o.rope_dim || !o.rope_style.empty()) {
        throw UsageError(std::string(o.rope_base  ? "--rope-base"
                                     : o.rope_dim ? "--rope-dim"
                                                  : "--rope-style") +
                         ": has no effect without --rope");
    }
    spec.alibi = o.alibi;
    spec.add_zero_attn = o.add_zero_attn;
    spec.window = o.window;
    spec.softcap = o.softcap;
    spec.attn_mask_means = o.attn_mask_means == "allow"   ? MaskMeans::allow
                           : o.attn_mask_means == "block" ? MaskMeans::block
                                                          : MaskMeans::unset;
    // The alignment places the queries: it matters to the causal mask, and to anything
    // else that reads positions (RoPE, ALiBi, a window).
    if (o.causal_align != "top-left" && !o.causal && !o.rope && !o.alibi && !o.window)
        throw UsageError("--causal-align: has no effect without --causal (or --rope, --alibi, --window)");
    if (!o.qkv.empty() && !o.checkpoint.empty())
        throw UsageError("--qkv: starts the run at Q, K and V; --checkpoint's weights would not be used");
    if (!o.axes.empty() && o.qkv.empty())
        throw UsageError("--axes: says how --qkv's arrays are laid out; give --qkv FILE");
    if (o.bundle.empty() && o.array_files.empty() && o.qkv.empty())
        throw UsageError("run: expected a bundle (.npz, .json or -) or arrays given with --x, --W_Q, ...");
    return spec;
}

// Someone's own arrays: an .npz, a JSON object, or a directory of NAME.npy files.
Bundle load_named_arrays(const std::string& path, std::size_t limit) {
    std::error_code ec;
    if (!std::filesystem::is_directory(path, ec)) {
        if (path.size() >= 4 && path.compare(path.size() - 4, 4, ".npy") == 0)
            throw InputError(path +
                             ": one .npy holds one array; give a directory of NAME.npy files, an .npz or a "
                             "JSON object of your stages");
        return load_bundle(path, limit);
    }
    std::vector<std::filesystem::path> files;
    for (const auto& e : std::filesystem::directory_iterator(path, ec))
        if (e.path().extension() == ".npy") files.push_back(e.path());
    if (ec) throw InputError(path + ": cannot list the directory (" + ec.message() + ")");
    if (files.empty()) throw InputError(path + ": a directory without .npy files (expected NAME.npy per stage)");
    std::sort(files.begin(), files.end());
    Bundle b;
    b.source = path;
    for (const auto& f : files) b.arrays[f.stem().string()] = load_array(f.string(), f.stem().string(), limit);
    return b;
}

Bundle load_inputs(const RunOptions& command_line, std::size_t limit, Spec& spec) {
    Bundle bundle;
    if (!command_line.bundle.empty())
        bundle = load_bundle(command_line.bundle, limit, check_array_name);  // an unknown array is never read
    else
        bundle.source =
            command_line.qkv.empty() ? "<options>" : command_line.qkv;  // a run of --qkv alone is that file's
    // The options the bundle carries, under the command line's (bundle_config.cpp).
    const RunOptions o = with_bundle_config(command_line, bundle, spec);
    for (const auto& [name, file] : o.array_files) {
        if (file == "-")  // one standard input: it can be read once, as the bundle
            throw UsageError("--" + name + " -: standard input can only hold the whole bundle (run -); give " + name +
                             " as a .npy or .json file");
        bundle.arrays[name] = load_array(file, name, limit);
    }
    if (o.ignore_padding) {
        spec.padding_dropped = bundle.arrays.erase("key_padding_mask") > 0;
        if (!spec.padding_dropped)
            std::cerr << "attnscope: note: --ignore-padding: the inputs hold no key_padding_mask; nothing dropped\n";
    }
    if (!o.checkpoint.empty()) {
        add_checkpoint_layer(o, limit, bundle, spec);
    } else if (o.layout == "tl") {
        const std::size_t h = convert_tl_layout(bundle);
        if (o.given.count("--heads") && o.heads != h)
            throw UsageError("--heads " + std::to_string(o.heads) + ": W_Q holds " + std::to_string(h) +
                             " heads ({layout} tl: its first axis)");
        spec.heads = h;
    }
    return bundle;
}

namespace {

// A computed run with every stage, kept alive behind a type-erased handle.
struct Held {
    TraceView view;
    std::shared_ptr<void> keep;
};

template <typename T>
Held compute_all(const RunOptions& o, const Bundle& bundle, const Spec& spec, std::size_t threads, std::size_t limit) {
    auto state = std::make_shared<std::pair<Problem<T>, Trace<T>>>();
    state->first = problem_of<T>(o, bundle, spec, limit);
    Compute how;
    how.threads = threads;
    check_memory_limit(bundle, state->first, how, limit);
    state->second = attend(state->first, how);
    return {view_of(bundle.source, state->first, state->second), state};
}

Held compute_all(const RunOptions& o, std::size_t limit) {
    Spec spec = spec_of(o);
    const Bundle bundle = load_inputs(o, limit, spec);
    return o.dtype == "float32" ? compute_all<float>(o, bundle, spec, o.threads, limit)
                                : compute_all<double>(o, bundle, spec, o.threads, limit);
}

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

// Run B of --compare: run A's options with the words of --compare applied on top (an
// option given there replaces A's value). Only those words are parsed.
RunOptions second_run(const RunOptions& a, const std::vector<std::string>& extra) {
    CLI::App app;
    auto b = std::make_shared<RunOptions>(a);
    b->compare.clear();
    CLI::App* run = setup_run(app, *b);
    run->allow_extras(false);
    for (const std::string& word : extra)
        if (const auto error = single_dash_error(*run, word))
            throw UsageError("--compare '" + a.compare + "': " + *error);
    std::vector<std::string> args = {"run"};
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<std::string> reversed(args.rbegin(), args.rend());
    try {
        app.parse(reversed);
    } catch (const CLI::ParseError& e) {
        throw UsageError("--compare '" + a.compare + "': " + parse_error_message(*run, e));
    }
    if (!b->compare.empty()) throw UsageError("--compare: cannot be nested");
    return *b;
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

// --compare prints a table (or with --json a document) of differences; the outputs
// and views of a single run have no meaning there and are refused, never ignored.
void check_compare_options(const RunOptions& o) {
    const std::pair<bool, const char*> single[] = {
        {!o.dump.empty(), "--dump"}, {!o.html.empty(), "--html"}, {!o.svg.empty(), "--svg"},
        {o.heatmap, "--heatmap"},    {o.panels, "--panels"},      {o.explain, "--explain"},
        {o.diagnose, "--diagnose"},  {!o.cell.empty(), "--cell"}, {!o.stages.empty(), "--stages"}};
    for (const auto& [given, flag] : single)
        if (given)
            throw UsageError(std::string("--compare: prints the differences of two runs; ") + flag +
                             " belongs to a single run (run it without --compare)");
}

// Prints, stage by stage, how run B differs from run A.
int run_compare(const RunOptions& a) {
    check_compare_options(a);
    const auto extra = split_words(a.compare);
    const RunOptions b = second_run(a, extra);
    const std::size_t limit = memory_limit(a);
    const Held A = compute_all(a, limit), B = compute_all(b, limit);
    if (a.json) {
        write_compare_json(std::cout, extra, A.view.scale, B.view.scale, compare_stages(A.view, B.view));
        std::cout.flush();
        if (!std::cout) throw RuntimeFailure("<stdout>: cannot write the report");
        return 0;
    }

    std::cout << "attnscope: compare  A = run " << escape_control(a.bundle.empty() ? "<options>" : a.bundle)
              << "  vs  B = A +";
    for (const auto& w : extra) std::cout << ' ' << w;
    std::cout << "\n  scale  A " << A.view.scale << " (" << A.view.scale_source << ")   B " << B.view.scale << " ("
              << B.view.scale_source << ")\n\n";
    const std::vector<StageDiff> diffs = compare_stages(A.view, B.view);
    // Where a mask changed, some differences are infinite: two more columns say how many,
    // and the mean of the others.
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
    print_table(table);
    std::cout << "  (inf where one run has -inf and the other a number: a mask changed)\n";
    std::cout.flush();
    if (!std::cout) throw RuntimeFailure("<stdout>: cannot write the report");
    return 0;
}

}  // namespace

Subcommand setup_run_command(CLI::App& parent) {
    auto opts = std::make_shared<RunOptions>();
    CLI::App* app = setup_run(parent, *opts);
    return {app, [opts] { return run_run(*opts); }};
}

namespace {

// Views that only the report shows are refused with --json, never dropped in silence.
void check_json_options(const RunOptions& o) {
    if (!o.json) return;
    const std::pair<bool, const char*> text_only[] = {
        {o.explain, "--explain"}, {!o.cell.empty(), "--cell"}, {o.heatmap, "--heatmap"}, {o.panels, "--panels"}};
    for (const auto& [given, flag] : text_only)
        if (given)
            throw UsageError(std::string(flag) +
                             ": a view of the printed report, which --json replaces; run it without --json "
                             "(the JSON holds every number it shows)");
}

// --panels draws the chosen among scores, masked_scores and weights: one at least.
void check_panels_options(const RunOptions& o) {
    if (!o.panels || o.stages.empty() || o.stages == "all") return;
    for (const auto& s : parse_stage_list(o.stages))
        if (s == "scores" || s == "masked_scores" || s == "weights") return;
    throw UsageError("--panels: draws scores, masked_scores and weights; --stages " + o.stages + " names none of them");
}

}  // namespace

int run_run(const RunOptions& o) {
    const auto t0 = Clock::now();
    Spec spec = spec_of(o);
    check_json_options(o);
    check_panels_options(o);
    if (!o.compare.empty()) return run_compare(o);
    check_outputs(o, parse_stage_list(o.stages));
    const std::size_t limit = memory_limit(o);
    const Bundle bundle = load_inputs(o, limit, spec);
    return o.dtype == "float32" ? run_typed<float>(o, bundle, spec, limit, t0)
                                : run_typed<double>(o, bundle, spec, limit, t0);
}

}  // namespace attnscope::cli
