// `attnscope run`: options → io → model → core → report.
#pragma once

#include <CLI/CLI.hpp>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "attnscope/io/array.hpp"
#include "attnscope/model/model.hpp"
#include "model_text.hpp"

namespace attnscope::cli {

struct RunOptions {
    std::string bundle;
    std::map<std::string, std::string> array_files;  // array name -> .npy/.json file
    std::size_t heads = 1;
    bool causal = false;
    std::string causal_align = "top-left";
    std::string dtype = "float64";
    std::string layout = "math";
    std::optional<std::size_t> kv_heads;  // grouped-query attention: K/V heads
    bool rope = false;
    std::optional<double> rope_base;
    std::optional<std::size_t> rope_dim;
    std::string rope_style;  // half | interleaved (empty: half)
    bool alibi = false;
    std::optional<std::size_t> window;
    std::optional<double> softcap;
    std::string attn_mask_means;  // allow | block (empty: a float mask, or refused)
    bool add_zero_attn = false;
    std::string dump;
    bool json = false;
    bool quiet = false;
    std::string stages;
    std::vector<std::size_t> batches, heads_shown;
    int decimals = 4;
    std::size_t edgeitems = 3;
    bool full = false;
    std::size_t threads = 0;  // 0: every core
    bool timings = false;
    std::string max_memory;  // "8G", "512M", bytes; empty: 3/4 of physical memory
    bool force = false;      // replace existing outputs
    std::string html;        // HTML report file
    std::string svg;         // SVG heatmap file
    std::string svg_stage = "weights";
    bool heatmap = false, panels = false, explain = false;
    std::string color = "auto";
    std::string range = "auto";  // --range auto|fixed|row|LO,HI
    bool log_scale = false;      // --log-scale
    std::size_t width = 0;       // 0: the terminal's, or $COLUMNS, or 80
    bool diagnose = false;
    std::vector<std::size_t> cell;  // batch,head,query,key (batch omitted for a 2-D x)
    std::string scale_text;         // a number, or "none" (= 1)
    double temperature = 1;
    std::optional<std::size_t> zero_key;
    bool ignore_padding = false;
    std::string compare;  // options of a second run to compare with
    // A checkpoint's layer as the weights (README "Real checkpoints")
    std::string checkpoint;
    std::optional<std::size_t> layer;
    std::string preset = "auto";
    std::string prefix;
    std::set<std::string> given;  // the options given on the command line ("--heads", "--causal", …)
    // Bring your own Q, K, V: the run starts at the scores (model/qkv.hpp)
    std::string qkv;
    std::vector<std::string> axes;  // NAME=ORDER
    // Long contexts (README "Long contexts")
    bool summary = false;  // per-row summaries
    std::size_t topk = 8, sink_keys = 4, local = 64;
    std::string jsonl;  // line-delimited JSON: a path, or - for standard output
    // A model folder and text (model_text.cpp): --model DIR --text S
    ModelTextOptions model_text;
};

CLI::App* setup_run(CLI::App& app, RunOptions& opts);
int run_run(const RunOptions& opts);

// The parts of `run` that other subcommands share: the inputs (bundle and --ARRAY files),
// the model and mask options, the Spec they give, and the bundle as loaded.
void add_input_options(CLI::App* cmd, RunOptions& o);
void add_model_options(CLI::App* cmd, RunOptions& o);
Spec spec_of(const RunOptions& o);  // UsageError for options that contradict each other
// The bundle, with a checkpoint's layer as its weights when {checkpoint} is given (and
// `spec` completed from what the checkpoint's config fixes, where no option said otherwise).
Bundle load_inputs(const RunOptions& o, std::size_t limit, Spec& spec);
// The options `bundle`'s config record carries, applied under those given on the command
// line (`given.given`), and `spec` recomputed from them with the record of what came from
// where (Spec::bundle_options); `given` as it is when the bundle has no config.
RunOptions with_bundle_config(const RunOptions& given, const Bundle& bundle, Spec& spec);
// Has o.given filled with the options given on `cmd`'s command line once it is parsed.
void note_given_options(CLI::App* cmd, RunOptions& o);
// Someone's own arrays (check's THEIRS, run's {qkv}): an .npz, a JSON object, or a directory
// of NAME.npy files.
Bundle load_named_arrays(const std::string& path, std::size_t limit);
// {checkpoint}'s layer into `bundle` (which must hold no weights), `spec` completed (checkpoint.cpp).
void add_checkpoint_layer(const RunOptions& o, std::size_t limit, Bundle& bundle, Spec& spec);
std::size_t memory_limit(const RunOptions& o);
// An option of one value given twice takes the later value (--heads 2 ... --heads 1, and
// --compare's run B over run A), as in most command lines; call once every option is added.
void later_options_replace(CLI::App* cmd);
// --batch LIST and --head LIST (indices from 0) into o.batches and o.heads_shown, under
// the selections heading; `where` says what they choose ("every output").
void add_selection_options(CLI::App* cmd, RunOptions& o, const std::string& where);

}  // namespace attnscope::cli
