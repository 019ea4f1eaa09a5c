// `attnscope decode BUNDLE --prefill P [model/mask options of run] [--bug NAME] [--json]
// [--heatmap] [--batch LIST] [--head LIST]`: options → io → model → core (decode) →
// report. Positions 0..P-1 run as one causal prefill; every later position as one query
// against the KV cache; each step is compared with the same row of one full causal run.
#include "attnscope/core/decode.hpp"

#include <iostream>
#include <memory>
#include <string>

#include "attnscope/base/errors.hpp"
#include "attnscope/base/text.hpp"
#include "attnscope/core/attention.hpp"
#include "attnscope/io/write.hpp"
#include "attnscope/model/model.hpp"
#include "attnscope/report/decode_report.hpp"
#include "attnscope/report/report.hpp"
#include "counts.hpp"
#include "help.hpp"
#include "run.hpp"
#include "subcommand.hpp"

namespace attnscope::cli {
namespace {

struct DecodeArgs {
    RunOptions run;  // the inputs, model and mask options, --json, --heatmap, --dump (an .npz), --force, -q
    std::size_t prefill = 0;
    std::string bug;
};

template <typename T>
int run_typed(const DecodeArgs& a, const Bundle& bundle, const Spec& spec, DecodeBug bug, std::size_t limit) {
    const Problem<T> problem = make_problem<T>(bundle, spec);
    for (const auto& w : problem.warnings) std::cerr << "attnscope: warning: " << escape_control(w) << '\n';
    check_decodable(problem, a.prefill, bug);
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
    const DecodeRun<T> run = decode(problem, a.prefill, bug, how);
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

int run_decode(DecodeArgs& a) {
    check_conflicts(a.run, Scope::decode);
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
        ->required()
        ->check(count_in(0, kMaxPositions))
        ->group(kDecoding);
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
    a->run.LimitOptions::add(
        *cmd, {"Refuse inputs needing more memory than this (e.g. 8G)", "Compute threads (default: every core)"});
    note_given_options(*cmd, a->run.given);
    later_options_replace(cmd);
    return {cmd, [a] { return run_decode(*a); }};
}

}  // namespace attnscope::cli
