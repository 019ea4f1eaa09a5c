// The option groups (options.hpp): each declares its options under its help heading, with
// the words --help shows and the checks CLI11 applies while parsing.
#include "options.hpp"

#include <unistd.h>

#include <cmath>

#include "attnscope/base/errors.hpp"
#include "attnscope/core/stages.hpp"
#include "attnscope/io/read.hpp"
#include "attnscope/model/checkpoint_layer.hpp"
#include "attnscope/report/report.hpp"
#include "counts.hpp"
#include "help.hpp"
#include "long_run.hpp"

namespace attnscope::cli {

const Choices<Precision> kPrecisions = {{"float32", Precision::float32}, {"float64", Precision::float64}};
const Choices<WeightLayout> kLayouts = {
    {"math", WeightLayout::math}, {"torch", WeightLayout::torch}, {"tl", WeightLayout::tl}};
const Choices<CausalAlign> kCausalAligns = {{"top-left", CausalAlign::top_left},
                                            {"bottom-right", CausalAlign::bottom_right}};
const Choices<RopeStyle> kRopeStyles = {{"half", RopeStyle::half}, {"interleaved", RopeStyle::interleaved}};
const Choices<MaskMeans> kMaskMeans = {{"allow", MaskMeans::allow}, {"block", MaskMeans::block}};
const Choices<ColorWhen> kColorWhens = {
    {"auto", ColorWhen::automatic}, {"always", ColorWhen::always}, {"never", ColorWhen::never}};

namespace {

// Arrays that may come from their own file, overriding the bundle's entry of that name.
const char* const kArrayOptions[] = {"x",   "memory",          "W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V",
                                     "b_O", "key_padding_mask"};

// A choice, typed: IsMember checks the name (its words for a wrong one, "--dtype: float16
// not in {float32,float64}", and the choices --help lists), then CheckedTransformer turns
// the name into the enum's value, which CLI11 stores in the field. (One validator: CLI11
// runs transforms before checks, and would check the value instead of the name.)
template <typename E>
CLI::Validator choice_of(const Choices<E>& choices) {
    std::vector<std::string> names;
    std::map<std::string, E> values;
    for (const auto& [name, value] : choices) names.push_back(name), values[name] = value;
    const CLI::Validator is_member = CLI::IsMember(names), to_value = CLI::CheckedTransformer(values);
    return CLI::Validator(
        [is_member, to_value](std::string& s) {
            const std::string error = is_member(s);
            return error.empty() ? to_value(s) : error;
        },
        is_member.get_description());
}

template <typename E>
CLI::Option* add_choice(CLI::App& cmd, const std::string& flag, E& field, const Choices<E>& choices,
                        const std::string& help) {
    return cmd.add_option(flag, field, help)->transform(choice_of(choices));
}

// The stages drawn as (query, key) heatmaps: --svg-stage takes one of them.
std::vector<std::string> matrix_stage_names() {
    std::vector<std::string> names;
    for (const StageInfo& s : stage_table())
        if (s.over_keys()) names.emplace_back(s.name);
    return names;
}

// A directory given as "l0/" (as docs/models.md prints it) is the directory l0.
CLI::Validator without_trailing_slash() {
    return CLI::Validator(
        [](std::string& path) {
            while (path.size() > 1 && path.back() == '/') path.pop_back();
            return std::string();
        },
        "");
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

void InputOptions::add(CLI::App& cmd) {
    cmd.add_option("bundle", bundle,
                   "Named arrays: a .npz archive, a .json object, or - for JSON on stdin "
                   "(x, memory, W_Q, W_K, W_V, W_O, b_Q, b_K, b_V, b_O, key_padding_mask, query_tokens, key_tokens)");
    add_array_files(cmd);
}

void InputOptions::add_array_files(CLI::App& cmd) {
    for (const char* name : kArrayOptions)
        cmd.add_option_function<std::string>(
               std::string("--") + name, [this, name](const std::string& f) { array_files[name] = f; },
               std::string(name) + " from this .npy or .json file, not the bundle")
            ->group(kInputs);
}

void CheckpointOptions::add(CLI::App& cmd) {
    cmd.add_option("--checkpoint", checkpoint,
                   "Weights from a model checkpoint: .safetensors, model.safetensors.index.json, a torch.save "
                   "file (.pt, .pth, .bin) or a directory holding one (x comes from the bundle or --x)")
        ->group(kCheckpoint);
    // N, or all (every layer of a --model, for --summary, --json, --jsonl and --dump).
    const CLI::Validator index = index_check();
    cmd.add_option_function<std::string>(
           "--layer",
           [this](const std::string& n) {
               every_layer = n == "all";
               layer = every_layer ? std::nullopt : std::optional<std::size_t>(std::stoull(n));
           },
           "The checkpoint's layer N (default: its only layer); with --model, all: every layer (with --summary, "
           "--json, --jsonl or --dump)")
        ->check(CLI::Validator([index](std::string& s) { return s == "all" ? std::string() : index(s); }, "INDEX"))
        ->group(kCheckpoint);
    cmd.add_option("--preset", preset,
                   "How the checkpoint names its layers: auto (config.json's model_type), " + preset_names())
        ->capture_default_str()
        ->group(kCheckpoint);
    cmd.add_option("--prefix", prefix,
                   "The layer's tensors begin with this (e.g. encoder.layers.2.self_attn.), instead of --layer")
        ->group(kCheckpoint);
}

void OwnQKVOptions::add(CLI::App& cmd) {
    cmd.add_option("--qkv", qkv,
                   "Start at the scores from your q, k and v, as fused kernels take them (an .npz, JSON object or "
                   "directory of NAME.npy; names q/query, k/key, v/value); the bundle, if given, adds masks, "
                   "positions and tokens")
        ->group(kOwnQKV);
    cmd.add_option("--axes", axes,
                   "NAME=ORDER: the axis order of one --qkv array in the letters b, h, t, d with (..) around merged "
                   "axes, e.g. q=bthd or k=bt(hd); repeat for more")
        ->allow_extra_args(false)
        ->group(kOwnQKV);
}

void ModelOptions::add(CLI::App& cmd) {
    cmd.add_option("--heads", heads, "Number of heads H (splits the projected widths)")
        ->capture_default_str()
        ->check(count_in(1, kMaxHeads))
        ->group(kModel);
    cmd.add_option("--scale", scale_text, "Score scale: a number, or none (= 1); default 1/sqrt(Dk)")->group(kModel);
    add_choice(cmd, "--dtype", dtype, kPrecisions, "Arithmetic precision")
        ->default_str(name_of(kPrecisions, dtype))
        ->group(kModel);
    add_choice(cmd, "--layout", layout, kLayouts,
               "Weight layout: math (in, out), Q = x · W_Q; torch (out, in) as nn.Linear and "
               "nn.MultiheadAttention store them; tl: TransformerLens's W_Q (H, Dm, Dk), W_O (H, Dv, Dm)")
        ->default_str(name_of(kLayouts, layout))
        ->group(kModel);
}

std::optional<double> ModelOptions::scale() const {
    if (scale_text.empty()) return std::nullopt;
    if (scale_text == "none") return 1.0;
    // strtod, not stod: a subnormal such as 1e-320 is a number too (stod throws on ERANGE).
    const char* begin = scale_text.c_str();
    char* end = nullptr;
    const double v = std::strtod(begin, &end);
    if (end == begin || *end != '\0' || std::isspace(static_cast<unsigned char>(*begin)))
        throw UsageError("--scale: expected a number or none, found '" + scale_text + "'");
    return v;
}

void MaskOptions::add(CLI::App& cmd) {
    cmd.add_flag("--causal,!--no-causal", causal, "Causal mask: query i sees only keys j <= i")->group(kMasks);
    add_choice(cmd, "--causal-align", causal_align, kCausalAligns,
               "top-left (like torch.tril) or bottom-right (query i sits at i + Tk - Tq, the KV-cache view)")
        ->default_str(name_of(kCausalAligns, causal_align))
        ->group(kMasks);
}

void ModernOptions::add(CLI::App& cmd) {
    cmd.add_option_function<std::size_t>(
           "--kv-heads", [this](std::size_t g) { kv_heads = g; },
           "K/V heads G (grouped-query attention; 1: multi-query): query head h reads K/V head h / (H/G)")
        ->check(count_in(1, kMaxHeads))
        ->group(kModern);
    cmd.add_flag("--rope", rope, "Rotary position embeddings on Q and K (stages Q_rot, K_rot)")->group(kModern);
    cmd.add_option_function<double>(
           "--rope-base", [this](double v) { rope_base = v; }, "RoPE's base θ: inv_freq_j = θ^(-2j/R) (default 10000)")
        ->group(kModern);
    cmd.add_option_function<std::size_t>(
           "--rope-dim", [this](std::size_t v) { rope_dim = v; },
           "Features of each head that rotate, R (even; default Dk, the rest pass through)")
        ->check(count_in(1, kMaxHeads))
        ->group(kModern);
    cmd.add_option_function<RopeStyle>(
           "--rope-style", [this](RopeStyle s) { rope_style = s; },
           "half: feature j pairs with j + R/2 (Llama, GPT-NeoX; default); interleaved: 2j with 2j+1 "
           "(RoFormer, GPT-J)")
        ->transform(choice_of(kRopeStyles))
        ->group(kModern);
    cmd.add_flag("--alibi", alibi,
                 "ALiBi bias m_h · (k_pos - q_pos), slopes 2^(-8(h+1)/H) (or the bundle's alibi_slopes)")
        ->group(kModern);
    cmd.add_option_function<std::size_t>(
           "--window", [this](std::size_t w) { window = w; },
           "Sliding window W: with --causal the W latest keys (q_pos - W < k_pos <= q_pos), else |q_pos - k_pos| < W")
        ->check(count_in(1, kMaxPositions))
        ->group(kModern);
    cmd.add_option_function<double>(
           "--softcap", [this](double c) { softcap = c; },
           "Logit soft-capping C · tanh(scores / C) before bias and mask (Gemma 2)")
        ->group(kModern);
    add_choice(cmd, "--attn-mask-means", attn_mask_means, kMaskMeans,
               "A bool/int attn_mask's convention: allow (true = may attend, scaled_dot_product_attention) or "
               "block (true = blocked, nn.MultiheadAttention)")
        ->group(kModern);
    cmd.add_flag("--add-zero-attn", add_zero_attn,
                 "nn.MultiheadAttention's add_zero_attn: one zero key/value position appended (always visible)")
        ->group(kModern);
}

void OutputOptions::add(CLI::App& cmd) {
    cmd.add_option("--stages", stages,
                   "Stages to show and dump, comma-separated, e.g. scores,weights (default all; none: no stage): Q, "
                   "K, V, scores, mask, masked_scores, weights, context, output; with the variants Q_rot, K_rot, "
                   "bias, sink_weight; head_output when asked for")
        ->group(kOutputs);
    cmd.add_option("--dump", dump, "Write each stage as NAME.npy into this directory, or into one .npz archive")
        ->transform(without_trailing_slash())
        ->group(kOutputs);
    cmd.add_flag("--json", json, "Print one JSON document instead of the report")->group(kOutputs);
    cmd.add_flag("-q,--quiet", quiet, "Print no report (useful with --dump)")->group(kOutputs);
    cmd.add_flag("--force", force, "Replace existing outputs (--dump, --html, --svg)")->group(kOutputs);
    cmd.add_option("--html", html, "Write a self-contained HTML report of the chosen stages (opens offline)")
        ->group(kOutputs);
    cmd.add_option("--svg", svg, "Write one stage of one head as an SVG heatmap (the first --batch and --head)")
        ->group(kOutputs);
    cmd.add_option("--svg-stage", svg_stage, "Stage drawn by --svg")
        ->capture_default_str()
        ->check(CLI::IsMember(matrix_stage_names()))
        ->group(kOutputs);
}

void SelectionOptions::add(CLI::App& cmd, const std::string& where) {
    cmd.add_option("--batch", batches, "Batch items shown in " + where + " (default all)")
        ->delimiter(',')
        ->check(index_check())
        ->group(kSelections);
    cmd.add_option("--head", heads_shown, "Heads shown in " + where + " (default all)")
        ->delimiter(',')
        ->check(index_check())
        ->group(kSelections);
}

void ViewOptions::add(CLI::App& cmd) {
    cmd.add_option("--decimals", decimals, "Decimals in the printed report")
        ->capture_default_str()
        ->check(CLI::Range(0, 17))
        ->group(kViews);
    cmd.add_option("--edgeitems", edgeitems, "Rows/columns shown at each end of a long axis")
        ->capture_default_str()
        ->check(count_in(1, 1000))
        ->group(kViews);
    cmd.add_flag("--full", full,
                 "Never summarise: every number, every key of a heatmap, every cell of --html and --svg. "
                 "Without it a long axis shows its first and last cells around a gap (…): printed numbers beyond "
                 "2*edgeitems+2 or the width, heatmap keys beyond the width, HTML beyond 2048 cells (and about 8 "
                 "million cells a page), SVG beyond 256")
        ->group(kViews);
    cmd.add_flag("--diagnose", diagnose,
                 "Per head and query: entropy, effective keys, max weight, uniform/one-hot flags, ||w·v||")
        ->group(kViews);
    cmd.add_option("--cell", cell, "One weight's arithmetic: B,H,I,J (H,I,J for a 2-D x)")
        ->delimiter(',')
        ->expected(3, 4)
        ->check(index_check())
        ->group(kViews);
    cmd.add_option("--why", why,
                   "Why query I's top key wins: against the runner-up, q_d*k_d per feature d, sorted by its share "
                   "of the score gap: B,H,I (H,I for a 2-D x)")
        ->delimiter(',')
        ->expected(2, 3)
        ->check(index_check())
        ->group(kViews);
    cmd.add_flag("--heatmap", heatmap, "Draw scores, mask, masked_scores and weights as heatmaps")->group(kViews);
    cmd.add_flag("--panels", panels, "Per head: scores | masked_scores | weights side by side, as heatmaps")
        ->group(kViews);
    cmd.add_flag("--explain", explain, "Narrate each stage: formula, shapes with numbers, what the masks hide")
        ->group(kViews);
    add_choice(cmd, "--color", color, kColorWhens,
               "Colour in heatmaps: auto (a terminal, unless NO_COLOR is set), always (even with NO_COLOR: "
               "the option wins), never")
        ->default_str(name_of(kColorWhens, color))
        ->group(kViews);
    cmd.add_option("--range", range,
                   "Heatmap colour scale (terminal, --panels, --html, --svg): auto (one per stage, shared by every "
                   "head and panel drawn; scores with masked_scores; weights 0..1), fixed (the same over every batch "
                   "item and head of the run), row (each query row on its own), or LO,HI")
        ->capture_default_str()
        ->group(kViews);
    cmd.add_flag("--log-scale", log_scale,
                 "Colour weights and sink_weight by log10 (long rows, where 0..1 leaves every cell dark)")
        ->group(kViews);
    cmd.add_option("--width", width, "Terminal width for heads side by side (default: the terminal's)")
        ->check(count_in(20, 10000))
        ->group(kViews);
}

void ViewOptions::validate() const { parse_range(range, log_scale); }

void ExperimentOptions::add(CLI::App& cmd) {
    cmd.add_option("--temperature", temperature, "Scale 1/(sqrt(Dk) * T): T > 1 flattens, T < 1 sharpens")
        ->group(kExperiments);
    cmd.add_option_function<std::size_t>(
           "--zero-key", [this](std::size_t j) { zero_key = j; },
           "Set key vector J to 0 in every head (its score column collapses)")
        ->check(index_check())
        ->group(kExperiments);
    cmd.add_flag("--ignore-padding", ignore_padding, "Drop the key padding mask")->group(kExperiments);
    cmd.add_option("--compare", compare,
                   "Compare with run B: these options added to this run's (one given again replaces its value), "
                   "e.g. --compare '--scale none'")
        ->group(kExperiments);
    cmd.add_option("--sweep", sweep,
                   "One run per value, a table of score spread, entropy, nearly uniform and one-hot rows: "
                   "dk=4,16,64 (random W_Q, W_K of that width, with and without 1/sqrt(dk)), scale=... or "
                   "temperature=...")
        ->group(kExperiments);
}

void LimitOptions::add(CLI::App& cmd, const Words& words) {
    const auto add_threads = [&] {
        if (words.threads)
            cmd.add_option("--threads", threads, words.threads)->check(count_in(1, kMaxThreads))->group(kLimits);
    };
    if (words.timings) {  // run lists what it computes with first
        add_threads();
        cmd.add_flag("--timings", timings, "Print the seconds spent loading, computing and writing to stderr")
            ->group(kLimits);
    }
    cmd.add_option("--max-memory", max_memory, words.memory)->group(kLimits);
    if (!words.timings) add_threads();
}

std::size_t LimitOptions::memory_limit() const {
    if (!max_memory.empty()) return parse_size(max_memory);
    long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
    if (pages <= 0 || page <= 0) return kNoLimit;
    return std::size_t(pages) / 4 * 3 * std::size_t(page);
}

void LongContextOptions::add(CLI::App& cmd) {
    const std::string heading = "Long contexts (README: per-row summaries)";
    cmd.add_flag("--summary", summary,
                 "Per row, tile by tile, never holding a (Tq, Tk) stage: entropy, effective keys, max weight and "
                 "key, top-k keys, sink and local mass, mean distance; per head a distance profile and class")
        ->group(heading);
    // Each of these implies --summary.
    const auto implies_summary = [this](const std::string&) { summary = true; };
    cmd.add_option("--topk", topk, "Keys (and weights) kept per row by --summary, largest first (implies --summary)")
        ->check(count_in(0, 4096))
        ->each(implies_summary)
        ->capture_default_str()
        ->group(heading);
    cmd.add_option("--sink-keys", sink_keys,
                   "--summary's sink mass: the weight on keys at positions 0..s-1 (default: Tk/16 keys, from 1 to 4)")
        ->check(count_in(0, kMaxPositions))
        ->each(implies_summary)
        ->group(heading);
    cmd.add_option("--local", local, "--summary's local mass: the weight on keys at positions i-w < j <= i")
        ->check(count_in(0, kMaxPositions))
        ->each(implies_summary)
        ->capture_default_str()
        ->group(heading);
    cmd.add_option("--jsonl", jsonl,
                   "Line-delimited JSON into this file (- : standard output): a line per summary row and head, "
                   "a line per dense stage, batch item and head")
        ->group(heading);
}

}  // namespace attnscope::cli
