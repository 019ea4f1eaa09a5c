// `attnscope run`: options → io → model → core → report.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <vector>

#include "attnscope/core/stages.hpp"
#include "attnscope/core/view.hpp"
#include "attnscope/io/array.hpp"
#include "attnscope/model/model.hpp"
#include "options.hpp"

namespace attnscope::cli {

CLI::App* setup_run(CLI::App& app, RunOptions& opts);
int run_run(const RunOptions& opts);

// The steps of `run` that other subcommands share (inputs.cpp): the Spec the options give,
// the bundle as loaded, the problem.
Spec spec_of(const RunOptions& o);  // UsageError for options that contradict each other
// The bundle, with a checkpoint's layer as its weights when {checkpoint} is given (and
// `spec` completed from what the checkpoint's config fixes, where no option said otherwise);
// with --model --predict, the predictions into `predicted` when given.
Bundle load_inputs(const RunOptions& o, std::size_t limit, Spec& spec, Predictions* predicted = nullptr);
// The run's problem: from the bundle's x and weights, or from {qkv}'s own Q, K and V.
template <typename T>
Problem<T> problem_of(const RunOptions& o, const Bundle& bundle, const Spec& spec, std::size_t limit);
// A problem's warnings (a non-finite input, ...) on stderr, "attnscope: warning: " and the
// line escaped: the one way run, report, decode and check say them.
void print_warnings(const std::vector<std::string>& warnings);
// A computed run: the problem, its trace, and the view that points into both (so it is
// held by a pointer, never copied).
template <typename T>
struct Attended {
    Problem<T> problem;
    Trace<T> trace;
    TraceView view;
};
// `problem` attended on `threads` threads with the stages `keep` kept, once its memory plan
// is within `limit` (a LimitError before any work otherwise). The one way check, compare,
// report, --sweep and --why compute; `run` itself streams, dumps and times its stages.
template <typename T>
std::shared_ptr<const Attended<T>> attend_checked(const Bundle& bundle, Problem<T> problem, StageSet keep,
                                                  std::size_t threads, std::size_t limit);
// A computed run's view, its problem and trace kept alive behind a type-erased handle.
struct Held {
    TraceView view;
    std::shared_ptr<const void> keep;
};
template <typename T>
Held held(std::shared_ptr<const Attended<T>> a) {
    return {a->view, a};
}
// The options `bundle`'s config record carries, applied under those given on the command
// line (`given.given`), and `spec` recomputed from them with the record of what came from
// where (Spec::bundle_options); `given` as it is when the bundle has no config.
RunOptions with_bundle_config(const RunOptions& given, const Bundle& bundle, Spec& spec);
// Someone's own arrays (check's THEIRS, run's {qkv}): an .npz, a JSON object, or a directory
// of NAME.npy files.
Bundle load_named_arrays(const std::string& path, std::size_t limit);
// {checkpoint}'s layer into `bundle` (which must hold no weights), `spec` completed (inputs.cpp).
void add_checkpoint_layer(const RunOptions& o, std::size_t limit, Bundle& bundle, Spec& spec);

// `run --compare OPTIONS` (compare.cpp): prints, stage by stage, how run B differs from run A.
int run_compare(const RunOptions& a);

// `run --sweep NAME=V1,V2,...` (sweep.cpp): one run per value, one table; a value list it
// cannot read is refused (UsageError) before any work.
int run_sweep(const RunOptions& o);

// `run --why B,H,I` (why.cpp): the winning key of one row against the runner-up, per feature.
int run_why(const RunOptions& o);

}  // namespace attnscope::cli
