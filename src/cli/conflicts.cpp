// Options that contradict each other, one row each: when it applies, the option the
// message blames, and the message. A contradiction is refused, never resolved in silence.
#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "attnscope/base/errors.hpp"
#include "attnscope/base/text.hpp"
#include "attnscope/core/view.hpp"
#include "attnscope/report/report.hpp"
#include "options.hpp"

namespace attnscope::cli {
namespace {

struct Conflict {
    Scope scope;
    bool (*when)(const RunOptions&);
    const char* flag;  // "FLAG: MESSAGE"
    std::string message;
    std::string (*value)(const RunOptions&) = nullptr;  // replaces "{}" in the message
};

using O = RunOptions;

// --compare prints a table (or with --json a document) of differences; the outputs and
// views of a single run have no meaning there.
std::string single_run(const char* flag) {
    return std::string("prints the differences of two runs; ") + flag +
           " belongs to a single run (run it without --compare)";
}

// --sweep prints one table of a run per value; a single run's outputs and views have no
// meaning there.
std::string one_table(const char* flag) {
    return std::string("prints one table of a run per value; ") + flag +
           " belongs to a single run (run it without --sweep)";
}

std::string sweep_over(const O& o) { return o.sweep.substr(0, o.sweep.find('=')); }

// --sweep NAME=... sets what NAME sets: the scale (dk: 1/sqrt(d_k) and 1) or the temperature.
bool sweep_sets_scale(const O& o) {
    const std::string over = sweep_over(o);
    return !o.sweep.empty() && (over == "dk" || over == "scale" || over == "temperature");
}

// --why shows one row's arithmetic; the whole run's outputs and views are another command.
std::string one_row(const char* flag) {
    return std::string("shows one row's arithmetic; ") + flag + " belongs to the whole run (run it without --why)";
}

// --json replaces the printed report: its views are refused, never dropped in silence.
const char* const kTextView =
    "a view of the printed report, which --json replaces; run it without --json (the JSON holds every number it "
    "shows)";

// --layer all shows each layer through outputs that hold several; a page or a figure holds one.
const char* const kOneLayer =
    "draws one layer with --layer N; every layer's heads on one page: attnscope report --model DIR --html FILE";

const char* const kNoRope = "has no effect without --rope";

const char* const kDecodeSelection =
    "decode's selections choose the rows of the text view; --json and --dump hold every batch item and head";

// decode --model generates: the options it takes (any other belongs to a bundle's decode).
const char* const kGenerationOptions[] = {"--model",    "--text",  "--text-file", "--tokens",  "--no-special-tokens",
                                          "--generate", "--layer", "--json",      "--heatmap", "--max-memory",
                                          "--threads"};

std::string bundle_option(const O& o) {
    for (const std::string& g : o.given)
        if (std::find(std::begin(kGenerationOptions), std::end(kGenerationOptions), g) == std::end(kGenerationOptions))
            return g;
    return {};
}

// --panels draws the chosen among scores, masked_scores and weights: one at least.
bool panels_draw_nothing(const O& o) {
    if (!o.panels || o.stages.empty() || o.stages == "all") return false;
    const auto chosen = parse_stage_list(o.stages);
    return std::none_of(chosen.begin(), chosen.end(),
                        [](const std::string& s) { return s == "scores" || s == "masked_scores" || s == "weights"; });
}

// --model makes x from a text: the inputs of another run that it refuses ("" when none).
// Key masks (--key_padding_mask) apply to the chosen layer's attention, as on a bundle.
std::string model_other_input(const O& o) {
    if (o.model_text.model.empty()) return {};
    if (!o.bundle.empty()) return "a bundle";
    for (const auto& [name, file] : o.array_files)
        if (name != "key_padding_mask") return "--" + name;
    return !o.checkpoint.empty() ? "--checkpoint" : !o.prefix.empty() ? "--prefix" : !o.qkv.empty() ? "--qkv" : "";
}

// A bundle given with --model: a file, or a sentence meant as the text (suggest --text).
std::string model_bundle(const O& o) {
    std::error_code ec;
    if (std::filesystem::exists(o.bundle, ec))
        return "makes x from the text with the model's weights; a bundle cannot be given with it";
    std::string quoted = "'";
    for (char c : o.bundle) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return "makes x from a text: " + escape_control(clip_fragment(quoted + "'", 60)) +
           " is no file; to run the model on it, give it as --text " + escape_control(clip_fragment(quoted + "'", 60));
}

int model_sources(const O& o) {
    const auto& m = o.model_text;
    return int(!m.text.empty()) + int(!m.text_file.empty()) + int(!m.tokens.empty());
}

// The rows of every scope (Scope::every).
std::vector<Conflict> every_rows() {
    return {
        {Scope::every, [](const O& o) { return !o.scale_text.empty() && o.temperature != 1; }, "--temperature",
         "contradicts --scale; give one of them"},
        {Scope::every, [](const O& o) { return o.rope_base && !o.rope; }, "--rope-base", kNoRope},
        {Scope::every, [](const O& o) { return o.rope_dim && !o.rope; }, "--rope-dim", kNoRope},
        {Scope::every, [](const O& o) { return o.rope_style && !o.rope; }, "--rope-style", kNoRope},
        // The alignment places the queries: it matters to the causal mask, and to anything
        // else that reads positions (RoPE, ALiBi, a window).
        {Scope::every,
         [](const O& o) {
             return o.causal_align != CausalAlign::top_left && !o.causal && !o.rope && !o.alibi && !o.window;
         },
         "--causal-align", "has no effect without --causal (or --rope, --alibi, --window)"},
        {Scope::every, [](const O& o) { return !o.qkv.empty() && !o.checkpoint.empty(); }, "--qkv",
         "starts the run at Q, K and V; --checkpoint's weights would not be used"},
        {Scope::every, [](const O& o) { return !o.axes.empty() && o.qkv.empty(); }, "--axes",
         "says how --qkv's arrays are laid out; give --qkv FILE"},
        {Scope::every,
         [](const O& o) {
             return o.bundle.empty() && o.array_files.empty() && o.qkv.empty() && o.model_text.model.empty();
         },
         "run", "expected a bundle (.npz, .json or -) or arrays given with --x, --W_Q, ..."},

        {Scope::every, [](const O& o) { return !o.model_text.model.empty() && !o.bundle.empty(); }, "--model", "{}",
         model_bundle},
        {Scope::every, [](const O& o) { return !model_other_input(o).empty(); }, "--model",
         "makes x from the text with the model's weights; {} cannot be given with it", model_other_input},
        {Scope::every, [](const O& o) { return !o.model_text.model.empty() && model_sources(o) != 1; }, "--model",
         "give one of --text, --text-file or --tokens"},
        {Scope::every, [](const O& o) { return o.every_layer && o.model_text.model.empty(); }, "--layer all",
         "every layer of a --model DIR's forward pass; a checkpoint's run takes one layer (--layer N)"},
    };
}

// The rows of run alone (Scope::run).
std::vector<Conflict> run_rows() {
    return {
        {Scope::run, [](const O& o) { return o.json && o.explain; }, "--explain", kTextView},
        {Scope::run,
         [](const O& o) { return o.every_layer && !o.summary && !o.json && o.jsonl.empty() && o.dump.empty(); },
         "--layer all",
         "shows every layer through --summary, --json, --jsonl or --dump; give one of them (or --layer N)"},
        {Scope::run, [](const O& o) { return o.every_layer && !o.html.empty(); }, "--html", kOneLayer},
        {Scope::run, [](const O& o) { return o.every_layer && !o.svg.empty(); }, "--svg", kOneLayer},
        {Scope::run, [](const O& o) { return o.every_layer && !o.model_text.save_forward.empty(); }, "--save-forward",
         "writes one layer's x; give --layer N"},
        {Scope::run, [](const O& o) { return o.every_layer && dump_is_npz(o.dump); }, "--dump",
         "{}: with --layer all, a folder per layer (DIR/layer_00/NAME.npy, ...); give a directory",
         [](const O& o) { return o.dump; }},
        {Scope::run, [](const O& o) { return !o.compare.empty() && o.every_layer; }, "--compare",
         single_run("--layer all")},
        {Scope::run, [](const O& o) { return o.json && !o.cell.empty(); }, "--cell", kTextView},
        {Scope::run, [](const O& o) { return o.json && o.heatmap; }, "--heatmap", kTextView},
        {Scope::run, [](const O& o) { return o.json && o.panels; }, "--panels", kTextView},
        {Scope::run, panels_draw_nothing, "--panels",
         "draws scores, masked_scores and weights; --stages {} names none of them",
         [](const O& o) { return o.stages; }},
        {Scope::run, [](const O& o) { return !o.compare.empty() && !o.dump.empty(); }, "--compare",
         single_run("--dump")},
        {Scope::run, [](const O& o) { return !o.compare.empty() && !o.html.empty(); }, "--compare",
         single_run("--html")},
        {Scope::run, [](const O& o) { return !o.compare.empty() && !o.svg.empty(); }, "--compare", single_run("--svg")},
        {Scope::run, [](const O& o) { return !o.compare.empty() && o.panels; }, "--compare", single_run("--panels")},
        {Scope::run, [](const O& o) { return !o.compare.empty() && o.explain; }, "--compare", single_run("--explain")},
        {Scope::run, [](const O& o) { return !o.compare.empty() && o.diagnose; }, "--compare",
         single_run("--diagnose")},
        {Scope::run, [](const O& o) { return !o.compare.empty() && !o.cell.empty(); }, "--compare",
         single_run("--cell")},
        {Scope::run, [](const O& o) { return !o.compare.empty() && !o.stages.empty(); }, "--compare",
         single_run("--stages")},
    };
}

// The rows of the classroom experiments, --sweep and --why (Scope::run).
std::vector<Conflict> experiment_rows() {
    return {
        {Scope::run, [](const O& o) { return !o.sweep.empty() && !o.compare.empty(); }, "--sweep",
         one_table("--compare")},
        {Scope::run, [](const O& o) { return !o.sweep.empty() && o.every_layer; }, "--sweep", one_table("--layer all")},
        {Scope::run, [](const O& o) { return !o.sweep.empty() && !o.dump.empty(); }, "--sweep", one_table("--dump")},
        {Scope::run, [](const O& o) { return !o.sweep.empty() && !o.svg.empty(); }, "--sweep", one_table("--svg")},
        {Scope::run, [](const O& o) { return !o.sweep.empty() && o.heatmap; }, "--sweep", one_table("--heatmap")},
        {Scope::run, [](const O& o) { return !o.sweep.empty() && o.panels; }, "--sweep", one_table("--panels")},
        {Scope::run, [](const O& o) { return !o.sweep.empty() && o.explain; }, "--sweep", one_table("--explain")},
        {Scope::run, [](const O& o) { return !o.sweep.empty() && o.diagnose; }, "--sweep", one_table("--diagnose")},
        {Scope::run, [](const O& o) { return !o.sweep.empty() && !o.cell.empty(); }, "--sweep", one_table("--cell")},
        {Scope::run, [](const O& o) { return !o.sweep.empty() && !o.stages.empty(); }, "--sweep",
         one_table("--stages")},
        {Scope::run, [](const O& o) { return !o.sweep.empty() && o.summary; }, "--sweep", one_table("--summary")},
        {Scope::run, [](const O& o) { return !o.sweep.empty() && !o.jsonl.empty(); }, "--sweep", one_table("--jsonl")},
        {Scope::run, [](const O& o) { return !o.sweep.empty() && !o.model_text.save_forward.empty(); }, "--sweep",
         one_table("--save-forward")},
        {Scope::run, [](const O& o) { return sweep_sets_scale(o) && !o.scale_text.empty(); }, "--sweep",
         "{}= sets the scale of each run; --scale contradicts it (give one of them)", sweep_over},
        {Scope::run, [](const O& o) { return sweep_sets_scale(o) && o.temperature != 1; }, "--sweep",
         "{}= sets the scale of each run; --temperature contradicts it (give one of them)", sweep_over},
        {Scope::run, [](const O& o) { return sweep_over(o) == "dk" && !o.sweep.empty() && !o.qkv.empty(); }, "--sweep",
         "dk= draws W_Q and W_K for x; --qkv gives Q and K themselves (sweep scale= or temperature=)"},

        {Scope::run, [](const O& o) { return !o.why.empty() && !o.sweep.empty(); }, "--why", one_row("--sweep")},
        {Scope::run, [](const O& o) { return !o.why.empty() && !o.compare.empty(); }, "--why", one_row("--compare")},
        {Scope::run, [](const O& o) { return !o.why.empty() && o.every_layer; }, "--why", one_row("--layer all")},
        {Scope::run, [](const O& o) { return !o.why.empty() && !o.dump.empty(); }, "--why", one_row("--dump")},
        {Scope::run, [](const O& o) { return !o.why.empty() && !o.html.empty(); }, "--why", one_row("--html")},
        {Scope::run, [](const O& o) { return !o.why.empty() && !o.svg.empty(); }, "--why", one_row("--svg")},
        {Scope::run, [](const O& o) { return !o.why.empty() && o.heatmap; }, "--why", one_row("--heatmap")},
        {Scope::run, [](const O& o) { return !o.why.empty() && o.panels; }, "--why", one_row("--panels")},
        {Scope::run, [](const O& o) { return !o.why.empty() && o.diagnose; }, "--why", one_row("--diagnose")},
        {Scope::run, [](const O& o) { return !o.why.empty() && !o.cell.empty(); }, "--why", one_row("--cell")},
        {Scope::run, [](const O& o) { return !o.why.empty() && !o.stages.empty(); }, "--why", one_row("--stages")},
        {Scope::run, [](const O& o) { return !o.why.empty() && o.summary; }, "--why", one_row("--summary")},
        {Scope::run, [](const O& o) { return !o.why.empty() && !o.jsonl.empty(); }, "--why", one_row("--jsonl")},
    };
}

// The rows of decode alone (Scope::decode).
std::vector<Conflict> decode_rows() {
    return {
        {Scope::decode, [](const O& o) { return o.given.count("--causal") && !o.causal; }, "--no-causal",
         "decode is causal by construction (a step sees only the cache: its own position and those before)"},
        {Scope::decode, [](const O& o) { return o.given.count("--generate") && o.model_text.model.empty(); },
         "--generate", "generates from a model folder: give --model DIR and --text, --text-file or --tokens"},
        {Scope::decode,
         [](const O& o) {
             const auto& m = o.model_text;
             return m.model.empty() && (!m.text.empty() || !m.text_file.empty() || !m.tokens.empty());
         },
         "--model", "--text, --text-file and --tokens are the prompt of a model folder's generation: give --model DIR"},
        {Scope::decode, [](const O& o) { return !o.model_text.model.empty() && !o.given.count("--generate"); },
         "--generate", "decode --model generates: give --generate N (a bundle's decode takes BUNDLE --prefill P)"},
        {Scope::decode, [](const O& o) { return !o.model_text.model.empty() && !o.bundle.empty(); }, "--model",
         "generates with the model folder's own layers; a bundle cannot be given with it"},
        {Scope::decode, [](const O& o) { return !o.model_text.model.empty() && !bundle_option(o).empty(); }, "--model",
         "{} belongs to a bundle's decode; generation takes --text, --text-file or --tokens, --generate, "
         "--layer, --json, --heatmap, --max-memory and --threads",
         bundle_option},
        {Scope::decode, [](const O& o) { return o.json && o.heatmap; }, "--heatmap",
         "a text view; --json gives every weight row as numbers"},
        {Scope::decode, [](const O& o) { return !o.batches.empty() && (o.json || !o.dump.empty()); }, "--batch",
         kDecodeSelection},
        {Scope::decode, [](const O& o) { return !o.heads_shown.empty() && (o.json || !o.dump.empty()); }, "--head",
         kDecodeSelection},
    };
}

// The rows, in the order they are checked.
const std::vector<Conflict>& conflicts() {
    static const std::vector<Conflict> kRows = [] {
        std::vector<Conflict> rows = every_rows();
        for (auto part : {run_rows(), experiment_rows(), decode_rows()})
            rows.insert(rows.end(), part.begin(), part.end());
        return rows;
    }();
    return kRows;
}

}  // namespace

void check_conflicts(const RunOptions& o, Scope scope) {
    for (const Conflict& c : conflicts()) {
        if (c.scope != scope || !c.when(o)) continue;
        std::string message = c.message;
        if (c.value) message.replace(message.find("{}"), 2, c.value(o));
        throw UsageError(std::string(c.flag) + ": " + message);
    }
}

}  // namespace attnscope::cli
