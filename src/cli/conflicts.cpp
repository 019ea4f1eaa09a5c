// Options that contradict each other: the modes of run against every option (a matrix), then
// one row per other contradiction (when it applies, the option the message blames, and the
// message). A contradiction is refused, never resolved in silence.
#include <algorithm>
#include <array>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "attnscope/base/errors.hpp"
#include "attnscope/base/text.hpp"
#include "attnscope/core/view.hpp"
#include "attnscope/report/report.hpp"
#include "help.hpp"
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

// The modes of run against every option (docs/usage.md, "Modes and the options they take").
// A mode changes what a run prints (--compare a table of differences, --sweep a table per
// value, --why one row, --layer all every layer, --model x from a text), so an option of a
// single run may mean nothing there. Each option has a row with a verdict per mode: taken
// (ok), or refused with its sentence ("{option}" stands for the option). An option with no
// row, and under no heading whose options configure the run, is refused in every mode: a
// new output is refused until it is placed here, never dropped in silence.
const char* const ok = "";

const char* const kSingleRun =
    "--compare: prints the differences of two runs; {option} belongs to a single run (run it without --compare)";
const char* const kOneTable =
    "--sweep: prints one table of a run per value; {option} belongs to a single run (run it without --sweep)";
const char* const kOneRow =
    "--why: shows one row's arithmetic; {option} belongs to the whole run (run it without --why)";
const char* const kOneLayer =
    "{option}: draws one layer with --layer N; every layer's heads on one page: attnscope report --model DIR --html "
    "FILE";
const char* const kSaveOneLayer = "{option}: writes one layer's x; give --layer N";
const char* const kModelX = "--model: makes x from the text with the model's weights; {option} cannot be given with it";
// The modes with each other: the same sentence whichever of the two is checked first.
const char* const kSweepCompare =
    "--sweep: prints one table of a run per value; --compare belongs to a single run "
    "(run it without --sweep)";
const char* const kCompareLayers =
    "--compare: prints the differences of two runs; --layer all belongs to a single run "
    "(run it without --compare)";
const char* const kSweepLayers =
    "--sweep: prints one table of a run per value; --layer all belongs to a single run "
    "(run it without --sweep)";
const char* const kWhyCompare =
    "--why: shows one row's arithmetic; --compare belongs to the whole run (run it "
    "without --why)";
const char* const kWhySweep =
    "--why: shows one row's arithmetic; --sweep belongs to the whole run (run it without "
    "--why)";
const char* const kWhyLayers =
    "--why: shows one row's arithmetic; --layer all belongs to the whole run (run it "
    "without --why)";

// An option no row places: refused in every mode (with {option} for the option).
const char* const kUnplaced =
    "{mode}: takes no {option} (no verdict places it with this mode, so it is refused, not ignored); run it without "
    "one of them";

// The modes, in the order they are checked, and the flag each is given by.
enum Mode { kCompare, kSweep, kWhy, kEveryLayer, kModelRun, kModes };
const char* const kModeFlags[kModes] = {"--compare", "--sweep", "--why", "--layer all", "--model"};

bool in_mode(const O& o, Mode m) {
    switch (m) {
        case kCompare:
            return !o.compare.empty();
        case kSweep:
            return !o.sweep.empty();
        case kWhy:
            return !o.why.empty();
        case kEveryLayer:
            return o.every_layer;
        case kModelRun:
            return !o.model_text.model.empty();
        case kModes:
            return false;
    }
    return false;
}

struct Placement {
    const char* option;                       // a long option ("--dump"), "bundle", or a help heading
    std::array<const char*, kModes> verdict;  // per mode: ok, or the refusal
};

// clang-format off
// Every option of run's outputs, views, selections, limits and experiments by name; the
// headings whose options configure the run (inputs, the model, masks) as a whole.
const Placement kMatrix[] = {
    //                      --compare       --sweep         --why           --layer all     --model
    {"--json",             {ok,             ok,             ok,             ok,             ok}},
    {"--stages",           {ok,             kOneTable,      kOneRow,        ok,             ok}},
    {"--dump",             {kSingleRun,     kOneTable,      kOneRow,        ok,             ok}},
    {"--quiet",            {kSingleRun,     ok,             kOneRow,        ok,             ok}},
    {"--force",            {kSingleRun,     ok,             ok,             ok,             ok}},
    {"--html",             {kSingleRun,     ok,             kOneRow,        kOneLayer,      ok}},
    {"--svg",              {kSingleRun,     kOneTable,      kOneRow,        kOneLayer,      ok}},
    {"--svg-stage",        {kSingleRun,     kOneTable,      kOneRow,        kOneLayer,      ok}},
    {"--batch",            {ok,             ok,             kOneRow,        ok,             ok}},
    {"--head",             {ok,             ok,             kOneRow,        ok,             ok}},
    {"--decimals",         {kSingleRun,     kOneTable,      kOneRow,        ok,             ok}},
    {"--edgeitems",        {kSingleRun,     kOneTable,      kOneRow,        ok,             ok}},
    {"--full",             {ok,             kOneTable,      kOneRow,        ok,             ok}},
    {"--diagnose",         {kSingleRun,     kOneTable,      kOneRow,        ok,             ok}},
    {"--cell",             {kSingleRun,     kOneTable,      kOneRow,        ok,             ok}},
    {"--why",              {kWhyCompare,    kWhySweep,      ok,             kWhyLayers,     ok}},
    {"--heatmap",          {ok,             kOneTable,      kOneRow,        ok,             ok}},
    {"--panels",           {kSingleRun,     kOneTable,      kOneRow,        ok,             ok}},
    {"--explain",          {kSingleRun,     kOneTable,      ok,             ok,             ok}},
    {"--color",            {ok,             kOneTable,      kOneRow,        ok,             ok}},
    {"--range",            {ok,             kOneTable,      kOneRow,        ok,             ok}},
    {"--log-scale",        {ok,             kOneTable,      kOneRow,        ok,             ok}},
    {"--width",            {ok,             kOneTable,      kOneRow,        ok,             ok}},
    {"--temperature",      {ok,             ok,             ok,             ok,             ok}},
    {"--zero-key",         {ok,             ok,             ok,             ok,             ok}},
    {"--ignore-padding",   {ok,             ok,             ok,             ok,             ok}},
    {"--compare",          {ok,             kSweepCompare,  kWhyCompare,    kCompareLayers, ok}},
    {"--sweep",            {kSweepCompare,  ok,             kWhySweep,      kSweepLayers,   ok}},
    {"--threads",          {ok,             ok,             ok,             ok,             ok}},
    {"--max-memory",       {ok,             ok,             ok,             ok,             ok}},
    {"--timings",          {kSingleRun,     kOneTable,      kOneRow,        ok,             ok}},
    {"--summary",          {kSingleRun,     kOneTable,      kOneRow,        ok,             ok}},
    {"--topk",             {kSingleRun,     kOneTable,      kOneRow,        ok,             ok}},
    {"--sink-keys",        {kSingleRun,     kOneTable,      kOneRow,        ok,             ok}},
    {"--local",            {kSingleRun,     kOneTable,      kOneRow,        ok,             ok}},
    {"--jsonl",            {kSingleRun,     kOneTable,      kOneRow,        ok,             ok}},
    {"--model",            {ok,             ok,             ok,             ok,             ok}},
    {"--text",             {ok,             ok,             ok,             ok,             ok}},
    {"--text-file",        {ok,             ok,             ok,             ok,             ok}},
    {"--tokens",           {ok,             ok,             ok,             ok,             ok}},
    {"--no-special-tokens",{ok,             ok,             ok,             ok,             ok}},
    {"--predict",          {kSingleRun,     kOneTable,      ok,             ok,             ok}},
    {"--save-forward",     {kSingleRun,     kOneTable,      ok,             kSaveOneLayer,  ok}},
    {"--checkpoint",       {ok,             ok,             ok,             ok,             kModelX}},
    {"--layer",            {ok,             ok,             ok,             ok,             ok}},
    {"--preset",           {ok,             ok,             ok,             ok,             ok}},
    {"--prefix",           {ok,             ok,             ok,             ok,             kModelX}},
    {"--key_padding_mask", {ok,             ok,             ok,             ok,             ok}},
    {"bundle",             {ok,             ok,             ok,             ok,             kModelX}},
    {kInputs,              {ok,             ok,             ok,             ok,             kModelX}},
    {kOwnQKV,              {ok,             ok,             ok,             ok,             kModelX}},
    {kModel,               {ok,             ok,             ok,             ok,             ok}},
    {kMasks,               {ok,             ok,             ok,             ok,             ok}},
    {kModern,              {ok,             ok,             ok,             ok,             ok}},
};
// clang-format on

// The row of `name` (an option or a heading), or nullptr.
const Placement* placement_of(const std::string& name) {
    for (const Placement& p : kMatrix)
        if (name == p.option) return &p;
    return nullptr;
}

// `sentence` with {mode} and {option} spelled.
std::string spelled(std::string sentence, const std::string& mode, const std::string& option) {
    for (const auto& [name, value] :
         {std::pair<std::string, std::string>{"{mode}", mode}, {"{option}", option == "bundle" ? "a bundle" : option}})
        if (const std::size_t at = sentence.find(name); at != std::string::npos)
            sentence.replace(at, name.size(), value);
    return sentence;
}

std::string sweep_over(const O& o) { return o.sweep.substr(0, o.sweep.find('=')); }

// --sweep NAME=... sets what NAME sets: the scale (dk: 1/sqrt(d_k) and 1) or the temperature.
bool sweep_sets_scale(const O& o) {
    const std::string over = sweep_over(o);
    return !o.sweep.empty() && (over == "dk" || over == "scale" || over == "temperature");
}

// --json replaces the printed report: its views are refused, never dropped in silence.
const char* const kTextView =
    "a view of the printed report, which --json replaces; run it without --json (the JSON holds every number it "
    "shows)";

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

// The rows of run alone (Scope::run): options against each other within a mode.
std::vector<Conflict> run_rows() {
    return {
        {Scope::run, [](const O& o) { return o.json && o.explain; }, "--explain", kTextView},
        {Scope::run,
         [](const O& o) { return o.every_layer && !o.summary && !o.json && o.jsonl.empty() && o.dump.empty(); },
         "--layer all",
         "shows every layer through --summary, --json, --jsonl or --dump; give one of them (or --layer N)"},
        {Scope::run, [](const O& o) { return o.every_layer && dump_is_npz(o.dump); }, "--dump",
         "{}: with --layer all, a folder per layer (DIR/layer_00/NAME.npy, ...); give a directory",
         [](const O& o) { return o.dump; }},
        {Scope::run, [](const O& o) { return o.json && !o.cell.empty(); }, "--cell", kTextView},
        {Scope::run, [](const O& o) { return o.json && o.heatmap; }, "--heatmap", kTextView},
        {Scope::run, [](const O& o) { return o.json && o.panels; }, "--panels", kTextView},
        {Scope::run, panels_draw_nothing, "--panels",
         "draws scores, masked_scores and weights; --stages {} names none of them",
         [](const O& o) { return o.stages; }},
        {Scope::run, [](const O& o) { return sweep_sets_scale(o) && !o.scale_text.empty(); }, "--sweep",
         "{}= sets the scale of each run; --scale contradicts it (give one of them)", sweep_over},
        {Scope::run, [](const O& o) { return sweep_sets_scale(o) && o.temperature != 1; }, "--sweep",
         "{}= sets the scale of each run; --temperature contradicts it (give one of them)", sweep_over},
        {Scope::run, [](const O& o) { return sweep_over(o) == "dk" && !o.sweep.empty() && !o.qkv.empty(); }, "--sweep",
         "dk= draws W_Q and W_K for x; --qkv gives Q and K themselves (sweep scale= or temperature=)"},
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
        for (auto part : {run_rows(), decode_rows()}) rows.insert(rows.end(), part.begin(), part.end());
        return rows;
    }();
    return kRows;
}

}  // namespace

std::optional<std::string> mode_refusal(const std::string& mode, const std::string& option,
                                        const std::string& heading) {
    const auto m = std::find(std::begin(kModeFlags), std::end(kModeFlags), mode);
    if (m == std::end(kModeFlags)) return std::nullopt;
    const Placement* p = placement_of(option);
    if (!p) p = placement_of(heading);
    if (!p) return spelled(kUnplaced, mode, option);  // refused by default
    const char* verdict = p->verdict[std::size_t(m - std::begin(kModeFlags))];
    if (*verdict == '\0') return std::nullopt;
    return spelled(verdict, mode, option);
}

void check_conflicts(const RunOptions& o, Scope scope) {
    if (scope == Scope::run)  // the modes against every option given, then the rows
        for (int m = 0; m < kModes; ++m) {
            if (!in_mode(o, Mode(m))) continue;
            for (const std::string& option : o.given) {
                const auto heading = o.headings.find(option);
                auto refusal =
                    mode_refusal(kModeFlags[m], option, heading == o.headings.end() ? std::string() : heading->second);
                if (refusal) throw UsageError(std::move(*refusal));
            }
        }
    for (const Conflict& c : conflicts()) {
        if (c.scope != scope || !c.when(o)) continue;
        std::string message = c.message;
        if (c.value) message.replace(message.find("{}"), 2, c.value(o));
        throw UsageError(std::string(c.flag) + ": " + message);
    }
}

}  // namespace attnscope::cli
