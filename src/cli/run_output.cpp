// What `run` prints and writes (run_output.hpp).
#include "run_output.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>

#include "attnscope/analysis/diagnostics.hpp"
#include "attnscope/base/errors.hpp"
#include "attnscope/base/text.hpp"
#include "attnscope/report/summary_report.hpp"

namespace attnscope::cli {

namespace {

using Clock = std::chrono::steady_clock;

// Whether to print the report: always, unless only files were asked for (--dump, --html,
// --svg, --jsonl FILE) and no option says what to print (a view, --stages, the report's own).
bool report_wanted(const RunOptions& o) {
    const bool files = !o.dump.empty() || !o.html.empty() || !o.svg.empty() || (!o.jsonl.empty() && o.jsonl != "-");
    static const char* const kPrinted[] = {"--stages", "--heatmap",  "--panels",    "--explain", "--diagnose",
                                           "--cell",   "--decimals", "--edgeitems", "--width",   "--color"};
    return !files || std::any_of(std::begin(kPrinted), std::end(kPrinted),
                                 [&o](const char* option) { return o.given.count(option) > 0; });
}

// "== layer 2 of 12 ==" above a layer's report (run --layer all); with --explain, how its x was made.
void write_layer_heading(std::ostream& out, const LayerRun& layer) {
    out << (layer.layer ? "\n" : "") << "== layer " << layer.layer << " of " << layer.count << " ==\n";
    if (!layer.explain.empty()) out << layer.explain << '\n';
}

}  // namespace

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
    // (A link replaced under --force is said as it is replaced: AtomicFile::commit.)
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

Progress::Progress(const std::atomic<std::size_t>& done, const std::atomic<std::size_t>& total, bool quiet) {
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
            std::fprintf(stderr, "\rattnscope: computing %3.0f%% (%zu/%zu tiles, %.1f/s, %.0f s, ~%.0f s left)\033[K",
                         100.0 * f, std::size_t(done), std::size_t(total), double(done) / s, s, left);
            shown = true;
        }
        if (shown) std::fprintf(stderr, "\r\033[K");
    });
}

void Progress::stop() {
    if (!thread_.joinable()) return;
    {
        std::lock_guard<std::mutex> g(m_);
        stop_ = true;
    }
    cv_.notify_one();
    thread_.join();
}

// Colour only for a terminal, unless asked; NO_COLOR (any value) turns "auto" off.
ColorMode color_mode(ColorWhen when) {
    const char* no_color = std::getenv("NO_COLOR");
    const char* term = std::getenv("TERM");
    bool on = when == ColorWhen::always || (when == ColorWhen::automatic && ::isatty(STDOUT_FILENO) &&
                                            !(no_color && *no_color) && !(term && std::string(term) == "dumb"));
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

void say_written(const RunOptions& o, const std::string& path, const char* what) {
    if (!o.quiet) std::cerr << "attnscope: wrote " << escape_control(path) << " (" << what << ")\n";
}

void write_files(const RunOptions& o, const TraceView& view, const TraceView& selected,
                 const std::vector<std::string>& stages, std::optional<Dump>& dump, const Summary* summary,
                 bool announce) {
    if (dump) {
        dump->commit(selected, summary ? summary_arrays(*summary, view.batched) : std::vector<OutArray>{});
        if (announce)
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

void write_stdout(const RunOptions& o, const TraceView& view, const TraceView& selected,
                  const std::vector<std::string>& stages, TextOptions text, const CellRef& cell, const Summary* summary,
                  const LayerRun* layer, const Predictions* predictions) {
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
        const std::function<void(JsonWriter&)> extra = [&](JsonWriter& w) {
            if (summary) write_summary_json(w.key("summary"), *summary, view.batched);
            if (predictions) write_predictions_json(w, *predictions);
        };
        if (layer && layer->json) {
            layer->json->newline().begin_object().key("layer").value(layer->layer);
            write_json_members(*layer->json, selected, stages, o.diagnose ? &diagnostics : nullptr, extra);
            layer->json->end_object();
        } else {
            write_json(std::cout, selected, stages, o.diagnose ? &diagnostics : nullptr, extra);
        }
    } else if (o.quiet) {
        return;
    } else if (!report_wanted(o)) {
        if (predictions) write_predictions_text(std::cout, *predictions, o.width ? o.width : terminal_width());
    } else {
        text.color = color_mode(o.color);
        text.width = o.width ? o.width : terminal_width();
        if (layer) write_layer_heading(std::cout, *layer);
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
        if (predictions) write_predictions_text(std::cout << '\n', *predictions, text.width);
    }
    std::cout.flush();
    if (!std::cout) throw RuntimeFailure("<stdout>: cannot write the report");
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

}  // namespace attnscope::cli
