// What `run` prints and writes (run_output.cpp): the outputs checked before any work, the
// files, standard output, and a progress line while computing.
#pragma once

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "attnscope/core/attention.hpp"
#include "attnscope/core/view.hpp"
#include "attnscope/io/write.hpp"
#include "attnscope/report/report.hpp"
#include "options.hpp"

namespace attnscope::cli {

class JsonlOutput;

// run --layer all (docs/models.md): the layer a run shows, and where its outputs join the others'.
struct LayerRun {
    std::size_t layer = 0, count = 0;
    JsonWriter* json = nullptr;    // --json: the open "layers" list of attnscope.layers/1
    JsonlOutput* jsonl = nullptr;  // --jsonl: one file for every layer
    std::string explain;           // --explain: how the layer's x was made
    Arena* arena = nullptr;        // lent to every layer's attend(): its pages touched once
};

// Existing outputs are kept unless --force: checked before any work is done.
void check_outputs(const RunOptions& o, const std::vector<std::string>& stages);

// The printed report's options (colour and width are set when it is printed).
TextOptions text_options(const RunOptions& o, const std::vector<std::string>& stages);
// --color as a mode for stdout (NO_COLOR, TERM=dumb, a pipe: none); the terminal's columns (COLUMNS, else 80).
ColorMode color_mode(ColorWhen when);
std::size_t terminal_width();

// One line on stderr for each file written, unless --quiet: "attnscope: wrote r.html (HTML report)".
void say_written(const RunOptions& o, const std::string& path, const char* what);

// The files: --dump (prepared before the computation, committed here; only the chosen
// batch items and heads: `selected`, with the summaries when asked for), --html, --svg.
// `announce`: say each file written (say_written).
void write_files(const RunOptions& o, const TraceView& view, const TraceView& selected,
                 const std::vector<std::string>& stages, std::optional<Dump>& dump, const Summary* summary,
                 bool announce = true);

// Standard output: one JSON document, or the report a person reads. With `layer`: an
// element of the layers' document, or the report under the layer's heading.
// --predict's table comes after the report (a single run's; --layer all prints it once, after
// every layer), its JSON member "predictions" in the document.
void write_stdout(const RunOptions& o, const TraceView& view, const TraceView& selected,
                  const std::vector<std::string>& stages, TextOptions text, const CellRef& cell, const Summary* summary,
                  const LayerRun* layer = nullptr, const Predictions* predictions = nullptr);

// "N query rows see no key" on stderr, naming them.
void warn_fully_masked(const std::vector<MaskedRow>& rows, bool batched);

// A progress line on stderr for computations longer than a second, only when stderr is
// a terminal; silent otherwise (pipes, files, CI logs).
class Progress {
   public:
    Progress(const std::atomic<std::size_t>& done, const std::atomic<std::size_t>& total, bool quiet);
    ~Progress() { stop(); }
    void stop();

   private:
    std::thread thread_;
    std::mutex m_;
    std::condition_variable cv_;
    bool stop_ = false;
};

}  // namespace attnscope::cli
