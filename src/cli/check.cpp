// `attnscope check THEIRS --against BUNDLE [model/mask options of run] [--json] [--rtol R]
// [--atol A] [--axes NAME=ORDER ...]`: options → io → model → core → analysis → report.
// Exit 0 when every stage given matches, 1 when one differs, 2 for bad input.
#include "attnscope/analysis/check.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "attnscope/base/errors.hpp"
#include "attnscope/base/text.hpp"
#include "attnscope/core/attention.hpp"
#include "attnscope/core/view.hpp"
#include "attnscope/io/read.hpp"
#include "attnscope/model/model.hpp"
#include "attnscope/report/check_report.hpp"
#include "counts.hpp"
#include "help.hpp"
#include "run.hpp"
#include "subcommand.hpp"

namespace attnscope::cli {
namespace {

struct CheckArgs {
    RunOptions run;  // the bundle (--against), arrays from files, model and mask options
    std::string theirs;
    bool json = false;
    std::optional<double> rtol, atol;
    std::vector<std::string> axes;  // NAME=ORDER
};

CheckOptions check_options(const CheckArgs& a) {
    CheckOptions o;
    o.rtol = a.rtol, o.atol = a.atol;
    o.computed = name_of(kPrecisions, a.run.dtype);  // the reference is float64 whatever --dtype says
    o.axes = parse_axes_option(a.axes, "q=bthd or attn=bhqk");
    return o;
}

int run_check(const CheckArgs& a) {
    Spec spec = spec_of(a.run);
    const CheckOptions options = check_options(a);
    if (a.theirs == "-" && a.run.bundle == "-")
        throw UsageError("check: standard input can hold THEIRS or the --against bundle, not both");
    const std::size_t limit = memory_limit(a.run);
    const Bundle bundle = load_inputs(a.run, limit, spec);
    const Bundle theirs = load_named_arrays(a.theirs, limit);

    Problem<double> problem = make_problem<double>(bundle, spec);
    print_warnings(problem.warnings);
    const auto run = attend_checked(bundle, std::move(problem), all_stages(), a.run.threads, limit);
    const TraceView& view = run->view;

    const CheckResult result = check_tensors(view, run->problem, bundle, theirs, options);
    if (a.json)
        write_check_json(std::cout, result, view, theirs.source);
    else
        write_check_text(std::cout, result, view, theirs.source);
    std::cout.flush();
    if (!std::cout) throw RuntimeFailure("<stdout>: cannot write the report");
    return result.matches() ? 0 : 1;
}

}  // namespace

Subcommand setup_check_command(CLI::App& parent) {
    auto a = std::make_shared<CheckArgs>();
    CLI::App* cmd = parent.add_subcommand(
        "check",
        "Compare your own attention tensors with the reference, find the first stage that differs, name the bug");
    cmd->add_option("theirs", a->theirs,
                    "Your stages: an .npz, a JSON object or a directory of NAME.npy (Q, K, V, scores, masked_scores, "
                    "weights, context, output, or aliases such as q, logits, attn, z, out)")
        ->required();
    cmd->add_option("--against", a->run.bundle, "The inputs: the bundle (.npz, .json or -) you computed them from")
        ->required()
        ->group(kInputs);
    a->run.add_array_files(*cmd);  // the bundle is --against here
    a->run.CheckpointOptions::add(*cmd);
    a->run.ModelOptions::add(*cmd);
    a->run.MaskOptions::add(*cmd);
    a->run.ModernOptions::add(*cmd);
    cmd->get_option("--dtype")->description(
        "The precision YOUR stages were computed in (their tolerance; the reference is always float64)");
    cmd->add_flag("--json", a->json, "Print one JSON document (verdict, stages, first_divergent_stage, diagnosis)")
        ->group(kOutputs);
    cmd->add_option("--rtol", a->rtol,
                    "Relative tolerance, and absolute unless --atol (default: 1e-9 for float64, 2e-5 for float32, "
                    "1e-2 for float16 arrays, or as --dtype says)")
        ->check(CLI::NonNegativeNumber)
        ->group(kComparison);
    cmd->add_option("--atol", a->atol, "Absolute tolerance (default: as --rtol)")
        ->check(CLI::NonNegativeNumber)
        ->group(kComparison);
    cmd->add_option("--axes", a->axes,
                    "NAME=ORDER: the axis order of one of your arrays in the letters b, h, t, d (q, k for scores), "
                    "(..) around merged axes, e.g. q=bthd, z=bt(hd), attn=bhqk; repeat for more")
        ->allow_extra_args(false)
        ->group(kComparison);
    a->run.LimitOptions::add(*cmd, {"Refuse inputs needing more memory than this (e.g. 8G)",
                                    "Compute threads for the reference (default: every core)"});
    note_given_options(*cmd, a->run.given);
    later_options_replace(cmd);
    return {cmd, [a] { return run_check(*a); }};
}

}  // namespace attnscope::cli
