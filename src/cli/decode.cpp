// `attnscope decode BUNDLE --prefill P [model/mask options of run] [--bug NAME] [--json]
// [--heatmap] [--batch LIST] [--head LIST]`: options → io → model → core (decode) →
// report. Positions 0..P-1 run as one causal prefill; every later position as one query
// against the KV cache; each step is compared with the same row of one full causal run.
//
// `attnscope decode --model DIR (--text S | --text-file F | --tokens IDS) --generate N
// [--layer L|all] [--json] [--heatmap]`: options → tokenize → lm (generate) → report. The
// prompt runs once as the prefill of every layer, then N - 1 tokens (each the argmax of the
// last logits) run alone through every layer against its cache; each step's rows are
// compared with one full forward on the final sequence.
#include "attnscope/core/decode.hpp"

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "attnscope/base/errors.hpp"
#include "attnscope/base/text.hpp"
#include "attnscope/core/attention.hpp"
#include "attnscope/io/read.hpp"
#include "attnscope/io/write.hpp"
#include "attnscope/lm/generate.hpp"
#include "attnscope/model/model.hpp"
#include "attnscope/report/decode_report.hpp"
#include "attnscope/report/report.hpp"
#include "attnscope/tokenize/tokenizer.hpp"
#include "counts.hpp"
#include "help.hpp"
#include "model_text.hpp"
#include "run.hpp"
#include "subcommand.hpp"

namespace attnscope::cli {
namespace {

struct DecodeArgs {
    RunOptions run;  // the inputs, model and mask options, --json, --heatmap, --dump (an .npz), --force, -q
    std::optional<std::size_t> prefill;
    std::string bug;
    std::size_t generate = 0;  // --generate N, with --model
    std::string layer;         // --layer N (a checkpoint's, or the generation's rows) or all
};

template <typename T>
int run_typed(const DecodeArgs& a, const Bundle& bundle, const Spec& spec, DecodeBug bug, std::size_t limit) {
    const Problem<T> problem = make_problem<T>(bundle, spec);
    print_warnings(problem.warnings);
    check_decodable(problem, *a.prefill, bug);
    TextOptions chosen;  // --batch, --head: checked before any work
    chosen.batches = a.run.batches, chosen.heads = a.run.heads_shown;
    check_selection(chosen, problem.dims);
    Compute how;
    how.keep = StageSet().set(kWeights).set(kSinkWeight).set(kContext).set(kOutput);
    how.threads = a.run.threads;
    // The full run's stages; the steps' rows hold about as much again as its weights.
    Compute plan = how;
    plan.keep.set(kScores);
    check_memory_limit(bundle, problem, plan, limit);
    const DecodeRun<T> run = decode(problem, *a.prefill, bug, how);
    if (!a.run.dump.empty()) write_decode_npz(a.run.dump, problem, run, a.run.force);
    if (a.run.quiet) {
        return 0;
    } else if (a.run.json) {
        write_decode_json(std::cout, problem, run, bundle.source);
    } else {
        DecodeTextOptions o;
        o.source = bundle.source;
        o.heatmap = a.run.heatmap;
        o.batches = a.run.batches, o.heads = a.run.heads_shown;
        write_decode_text(std::cout, problem, run, o);
    }
    std::cout.flush();
    if (!std::cout) throw RuntimeFailure("<stdout>: cannot write the report");
    return 0;
}

// The prompt's ids (--text through the model's tokenizer, or --tokens) and the tokenizer,
// when the folder has one (--tokens needs none).
// --layer: a layer of the model (checked against its layers), all, or not given.
std::optional<std::size_t> chosen_layer(const DecodeArgs& a, std::size_t layers, bool& all) {
    all = a.layer == "all";
    if (a.layer.empty() || all) return std::nullopt;
    const std::size_t l = std::stoull(a.layer);  // CLI11 checked the digits
    if (l >= layers)
        throw UsageError("--layer " + a.layer + ": the model has " + std::to_string(layers) + " layers (0–" +
                         std::to_string(layers - 1) + ", or all)");
    return l;
}

int run_generate(DecodeArgs& a) {
    const ModelTextOptions& m = a.run.model_text;
    check_conflicts(a.run, Scope::every);  // one of --text, --text-file or --tokens
    const std::size_t limit = memory_limit(a.run);
    const LanguageModel model = LanguageModel::open(m.model, limit);
    GenerationTextOptions o;
    o.layer = chosen_layer(a, model.config().layers, o.all_layers);
    const Tokens prompt = tokens_of(m, limit);
    Generation g = generate(model, prompt.ids, a.generate, a.run.threads);
    check_generation(model, g, a.run.threads);
    o.source = m.model;
    o.model_type = model.config().model_type;
    o.heatmap = a.run.heatmap;
    for (std::uint32_t id : g.ids) {
        o.labels.push_back(prompt.label(id));
        o.pieces.push_back(prompt.tok ? prompt.tok->piece(id) : std::nullopt);
    }
    const std::vector<std::uint32_t> generated(g.ids.begin() + std::ptrdiff_t(g.prompt), g.ids.end());
    const auto known = [&](std::uint32_t id) { return prompt.tok->piece(id).has_value(); };
    if (prompt.tok && std::all_of(generated.begin(), generated.end(), known)) o.text = prompt.tok->decode(generated);
    if (a.run.json)
        write_generation_json(std::cout, g, o);
    else
        write_generation_text(std::cout, g, o);
    std::cout.flush();
    if (!std::cout) throw RuntimeFailure("<stdout>: cannot write the report");
    return 0;
}

int run_decode(DecodeArgs& a) {
    check_conflicts(a.run, Scope::decode);
    if (!a.run.model_text.model.empty()) return run_generate(a);
    if (!a.prefill) throw UsageError("--prefill: decode BUNDLE needs --prefill P (or --model DIR --generate N)");
    if (a.layer == "all")
        throw UsageError(
            "--layer all: every layer of a model's generation (--model); a checkpoint's layer is one number");
    if (!a.layer.empty()) a.run.layer = std::stoull(a.layer);
    const std::string& dump = a.run.dump;
    if (!dump.empty()) {
        if (dump.size() < 4 || dump.compare(dump.size() - 4, 4, ".npz") != 0)
            throw UsageError("--dump " + dump + ": decode writes one .npz archive (a name ending in .npz)");
        check_output_target(dump, a.run.force, "--dump " + dump);
    }
    a.run.causal = true;             // implied
    a.run.given.insert("--causal");  // as if given: a bundle's config does not turn it off
    Spec spec = spec_of(a.run);
    DecodeBug bug = DecodeBug::none;
    if (!a.bug.empty()) bug = *find_bug(a.bug);  // CLI11 checked the name
    const std::size_t limit = memory_limit(a.run);
    const Bundle bundle = load_inputs(a.run, limit, spec);
    if (a.run.dtype == Precision::float32) return run_typed<float>(a, bundle, spec, bug, limit);
    return run_typed<double>(a, bundle, spec, bug, limit);
}

// --model, --text, --text-file, --tokens, --no-special-tokens and --generate.
void add_generation_options(CLI::App& cmd, DecodeArgs& a) {
    ModelTextOptions& m = a.run.model_text;
    cmd.add_option("--model", m.model,
                   "Generate from a Hugging Face model folder (gpt2, llama, mistral, qwen2): the prompt is the prefill "
                   "of every layer's cache")
        ->group(kDecoding);
    cmd.add_option("--text", m.text, "With --model: the prompt, tokenized by the model's own tokenizer")
        ->group(kDecoding);
    cmd.add_option("--text-file", m.text_file, "With --model: the prompt, from this file")->group(kDecoding);
    cmd.add_option("--tokens", m.tokens, "With --model: the prompt as token ids (e.g. 464,3797), no tokenizer needed")
        ->group(kDecoding);
    cmd.add_flag("--no-special-tokens", m.no_special, "With --text: leave out the tokenizer's special tokens")
        ->group(kDecoding);
    cmd.add_option("--generate", a.generate,
                   "With --model: N tokens, each the argmax of the last position's logits (ties: the lowest id)")
        ->check(count_in(1, kMaxPositions))
        ->group(kDecoding);
}

// --layer as N or all: CheckpointOptions' --layer (a number) replaced by one that takes both.
void replace_layer_option(CLI::App& cmd, DecodeArgs& a) {
    cmd.remove_option(cmd.get_option("--layer"));
    const CLI::Validator index = index_check();
    cmd.add_option("--layer", a.layer,
                   "The checkpoint's layer N; with --model, the layer whose rows are shown, or all (default: a line "
                   "per layer)")
        ->check(CLI::Validator([index](std::string& s) { return s == "all" ? std::string() : index(s); }, "N|all"))
        ->group(kCheckpoint);
}

}  // namespace

Subcommand setup_decode_command(CLI::App& parent) {
    auto a = std::make_shared<DecodeArgs>();
    CLI::App* cmd = parent.add_subcommand(
        "decode",
        "KV-cache decoding: a causal prefill of P positions, then one query per position against the growing cache "
        "of K and V, each step checked against the full causal run");
    a->run.InputOptions::add(*cmd);
    a->run.ModelOptions::add(*cmd);
    a->run.MaskOptions::add(*cmd);
    a->run.ModernOptions::add(*cmd);
    cmd->add_option("--prefill", a->prefill,
                    "P: positions 0..P-1 run as one causal prefill that fills the cache (0..T; the rest are steps)")
        ->check(count_in(0, kMaxPositions))
        ->group(kDecoding);
    add_generation_options(*cmd, *a);
    std::vector<std::string> bugs;
    for (std::string_view b : bug_names()) bugs.emplace_back(b);
    cmd->add_option("--bug", a->bug,
                    "A teaching experiment, a classic KV-cache bug: rope-position-zero (RoPE at position 0 in every "
                    "step), attend-before-append (the query misses its own key), off-by-one (the query sits at t-1)")
        ->check(CLI::IsMember(bugs))
        ->group(kDecoding);
    cmd->add_flag("--json", a->run.json, "Print one JSON document: config, prefill and every step")->group(kOutputs);
    a->run.SelectionOptions::add(*cmd, "the text view");
    cmd->add_flag("--heatmap", a->run.heatmap, "Each weight row as one line of a character ramp instead of numbers")
        ->group(kViews);
    cmd->add_option("--dump", a->run.dump,
                    "FILE.npz: every step's rows (step{t}_weights, _mask, _context, _output, _sink_weight) and the "
                    "prefill's")
        ->group(kOutputs);
    cmd->add_flag("--force", a->run.force, "Replace an existing --dump file")->group(kOutputs);
    cmd->add_flag("-q,--quiet", a->run.quiet, "Print nothing (with --dump)")->group(kOutputs);
    // After --prefill: of two options as near to a misspelling, the first is named (--prefil).
    a->run.CheckpointOptions::add(*cmd);
    replace_layer_option(*cmd, *a);
    a->run.LimitOptions::add(
        *cmd, {"Refuse inputs needing more memory than this (e.g. 8G)", "Compute threads (default: every core)"});
    note_given_options(*cmd, a->run.given);
    later_options_replace(cmd);
    return {cmd, [a] { return run_decode(*a); }};
}

}  // namespace attnscope::cli
