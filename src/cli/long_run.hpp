// `attnscope run` for long contexts: --jsonl's output (the options: LongContextOptions).
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <mutex>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "attnscope/core/attention.hpp"
#include "attnscope/core/view.hpp"
#include "attnscope/io/write.hpp"
#include "model_text.hpp"

namespace attnscope::cli {

// --jsonl PATH (or - for standard output): one JSON object a line, written as computed;
// a path is written under a temporary name and renamed by finish() (a run that fails or is
// killed leaves nothing behind).
class JsonlOutput {
   public:
    JsonlOutput(const std::string& path, bool force, std::string source, const Dims& dims, bool batched);
    // For Compute::on_summary: the rows of a finished tile.
    void rows(const Summary& s, std::size_t b, std::size_t h, std::size_t i0, std::size_t n);
    // The dense stages (a line per stage, batch item and head) and the per-head summaries;
    // then the file is complete.
    void finish(const TraceView& view, const std::vector<std::string>& stages, const Summary* s,
                const Predictions* predictions = nullptr) {
        add_stages(view, stages, s);
        complete(predictions);
    }
    // run --layer all: the lines that follow are layer `layer`'s, each naming it (its own
    // run line first); add_stages ends each layer, complete() the file.
    void start_layer(std::size_t layer, const Dims& dims);
    void add_stages(const TraceView& view, const std::vector<std::string>& stages, const Summary* s);
    // The file complete: with --predict, a last line of kind "predictions" (the model's, no layer).
    void complete(const Predictions* predictions = nullptr);

   private:
    void header(const Summary* s);
    std::optional<std::size_t> layer_;
    std::unique_ptr<AtomicTextFile> file_;
    std::ostream* out_;
    std::mutex lock_;
    std::string source_;
    Dims dims_;
    bool batched_, started_ = false;
};

}  // namespace attnscope::cli
