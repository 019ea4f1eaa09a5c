// The options of run, check, decode and report: one struct per help heading, each with
// add(CLI::App&) (declares its options under that heading) and, where its values need more
// than CLI11's checks, validate(). A command declares only the groups it uses; RunOptions
// holds them all, as `run` does, so that the steps every command shares (spec_of,
// load_inputs) read one type. Choices are typed (enums) through CLI11's transformers;
// options that contradict each other are rows of one table (conflicts.cpp).
#pragma once

#include <CLI/CLI.hpp>
#include <cstddef>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "attnscope/model/mask.hpp"
#include "attnscope/model/model.hpp"
#include "model_text.hpp"

namespace attnscope::cli {

enum class Precision { float32, float64 };          // --dtype
enum class WeightLayout { math, torch, tl };        // --layout (tl: converted to math on loading)
enum class ColorWhen { automatic, always, never };  // --color

// A choice's names and values, in the order --help lists them.
template <typename E>
using Choices = std::vector<std::pair<std::string, E>>;
extern const Choices<Precision> kPrecisions;
extern const Choices<WeightLayout> kLayouts;
extern const Choices<CausalAlign> kCausalAligns;
extern const Choices<RopeStyle> kRopeStyles;
extern const Choices<MaskMeans> kMaskMeans;  // allow, block (unset: not given)
extern const Choices<ColorWhen> kColorWhens;

// The name of `value` among `choices` ("float32").
template <typename E>
std::string name_of(const Choices<E>& choices, E value) {
    for (const auto& [name, v] : choices)
        if (v == value) return name;
    return {};
}

// Inputs: the bundle and arrays from their own files (--x, --W_Q, ...).
struct InputOptions {
    std::string bundle;
    std::map<std::string, std::string> array_files;  // array name -> .npy/.json file
    void add(CLI::App& cmd);                         // the BUNDLE positional too
    void add_array_files(CLI::App& cmd);             // --x, --W_Q, ... alone
};

// Checkpoint: a checkpoint's layer as the weights (README "Real checkpoints").
struct CheckpointOptions {
    std::string checkpoint;
    std::optional<std::size_t> layer;
    bool every_layer = false;  // --layer all: every layer of a --model (docs/models.md)
    std::string preset = "auto";
    std::string prefix;
    void add(CLI::App& cmd);
};

// Your own Q, K, V: the run starts at the scores (model/qkv.hpp).
struct OwnQKVOptions {
    std::string qkv;
    std::vector<std::string> axes;  // NAME=ORDER
    void add(CLI::App& cmd);
};

// Model: heads, scale, precision, weight layout.
struct ModelOptions {
    std::size_t heads = 1;
    std::string scale_text;  // a number, or "none" (= 1)
    Precision dtype = Precision::float64;
    WeightLayout layout = WeightLayout::math;
    void add(CLI::App& cmd);
    void validate() const { scale(); }
    // --scale as a number (none: 1), nothing when not given; UsageError for another word.
    std::optional<double> scale() const;
};

// Masks: the causal mask and where the queries sit.
struct MaskOptions {
    bool causal = false;
    CausalAlign causal_align = CausalAlign::top_left;
    void add(CLI::App& cmd);
};

// Modern attention: grouped K/V heads, RoPE, ALiBi, window, soft-capping, masks' conventions.
struct ModernOptions {
    std::optional<std::size_t> kv_heads;
    bool rope = false;
    std::optional<double> rope_base;
    std::optional<std::size_t> rope_dim;
    std::optional<RopeStyle> rope_style;  // not given: half
    bool alibi = false;
    std::optional<std::size_t> window;
    std::optional<double> softcap;
    MaskMeans attn_mask_means = MaskMeans::unset;  // a float mask, or refused
    bool add_zero_attn = false;
    void add(CLI::App& cmd);
};

// Outputs: what run prints and writes.
struct OutputOptions {
    std::string stages;
    std::string dump;
    bool json = false;
    bool quiet = false;
    bool force = false;  // replace existing outputs
    std::string html;    // HTML report file
    std::string svg;     // SVG heatmap file
    std::string svg_stage = "weights";
    void add(CLI::App& cmd);
};

// Selections: --batch LIST and --head LIST (indices from 0); `where` says what they choose.
struct SelectionOptions {
    std::vector<std::size_t> batches, heads_shown;
    void add(CLI::App& cmd, const std::string& where);
};

// Views: how the printed report and the figures show the numbers.
struct ViewOptions {
    int decimals = 4;
    std::size_t edgeitems = 3;
    bool full = false;
    bool diagnose = false;
    std::vector<std::size_t> cell;  // batch,head,query,key (batch omitted for a 2-D x)
    std::vector<std::size_t> why;   // batch,head,query (batch omitted for a 2-D x): why.cpp
    bool heatmap = false, panels = false, explain = false;
    ColorWhen color = ColorWhen::automatic;
    std::string range = "auto";  // auto|fixed|row|LO,HI
    bool log_scale = false;
    std::size_t width = 0;  // 0: the terminal's, or $COLUMNS, or 80
    void add(CLI::App& cmd);
    void validate() const;  // --range
};

// Experiments: what-ifs on one run, and --compare with a second.
struct ExperimentOptions {
    double temperature = 1;
    std::optional<std::size_t> zero_key;
    bool ignore_padding = false;
    std::string compare;  // options of a second run to compare with (compare.cpp)
    std::string sweep;    // NAME=V1,V2,...: one run per value, a table (sweep.cpp)
    void add(CLI::App& cmd);
};

// Limits: memory and threads. Each command words them for what it computes.
struct LimitOptions {
    std::size_t threads = 0;  // 0: every core
    bool timings = false;
    std::string max_memory;  // "8G", "512M", bytes; empty: 3/4 of physical memory
    struct Words {
        const char* memory;    // --max-memory's description
        const char* threads;   // --threads' (nullptr: no --threads)
        bool timings = false;  // run's --timings; run lists --threads first
    };
    void add(CLI::App& cmd, const Words& words);
    void validate() const { memory_limit(); }
    std::size_t memory_limit() const;  // bytes; UsageError for a size it cannot read
};

// Long contexts: per-row summaries and line-delimited JSON (long_run.hpp).
struct LongContextOptions {
    bool summary = false;
    std::size_t topk = 8, sink_keys = 4, local = 64;
    std::string jsonl;  // a path, or - for standard output
    void add(CLI::App& cmd);
};

// Every group, as `run` has them; check, decode and report declare the groups they use.
struct RunOptions : InputOptions,
                    CheckpointOptions,
                    OwnQKVOptions,
                    ModelOptions,
                    MaskOptions,
                    ModernOptions,
                    OutputOptions,
                    SelectionOptions,
                    ViewOptions,
                    ExperimentOptions,
                    LimitOptions,
                    LongContextOptions {
    std::set<std::string> given;                  // the options given on the command line ("--heads", "--causal", …)
    std::map<std::string, std::string> headings;  // each given option's help heading ("--heads": "Model")
    ModelTextOptions model_text;                  // a model folder and text (model_text.cpp): --model DIR --text S
    // Each group's values that CLI11 cannot check alone (--scale, --range, --max-memory).
    void validate() const {
        ModelOptions::validate();
        ViewOptions::validate();
        LimitOptions::validate();
    }
};

inline std::size_t memory_limit(const LimitOptions& o) { return o.memory_limit(); }

// Options that contradict each other (conflicts.cpp): the table's rows of one scope, in
// order; UsageError "FLAG: MESSAGE" for the first that applies. `every`: the inputs and the
// model (checked by spec_of, so after a bundle's config too); `run` and `decode`: theirs.
enum class Scope { every, run, decode };
// With Scope::run, first the modes of run against every option given (conflicts.cpp's
// matrix): see mode_refusal.
void check_conflicts(const RunOptions& o, Scope scope);
// The matrix's verdict on `option` (a long option, or "bundle"; `heading`: its help heading)
// in `mode` (--compare, --sweep, --why, --layer all, --model): nothing when the mode takes
// it, else the refusal "FLAG: MESSAGE". An option the matrix does not place, by name or by
// a heading that configures the run, is refused in every mode.
std::optional<std::string> mode_refusal(const std::string& mode, const std::string& option, const std::string& heading);

// The option tree (flags.cpp). Fills `given` with the options given on `cmd`'s command line
// once it is parsed: the long name of each ("--heads"); `headings`, when given, with the help
// heading of each.
void note_given_options(CLI::App& cmd, std::set<std::string>& given,
                        std::map<std::string, std::string>* headings = nullptr);
// An option of one value given twice takes the later value (--heads 2 ... --heads 1, and
// --compare's run B over run A), as in most command lines; call once every option is added.
void later_options_replace(CLI::App* cmd);
// `o` with `words` (a command line after "run") parsed over it as run's options, into
// `parsed` (`o.given` with the options the words give added); the parse error in the
// user's terms, or nothing. `single_dash`: a long option with one dash (-heads) is one.
std::optional<std::string> parse_over(const RunOptions& o, const std::vector<std::string>& words, RunOptions& parsed,
                                      bool single_dash);

}  // namespace attnscope::cli
