// The pieces of `attnscope lesson` (docs/classroom.md, "attnscope lesson"): a topic is a list
// of steps; a step shows commands of this same program and asks questions whose answers are
// computed from runs (in this process, as `run` computes), never written into the lesson.
// The steps' titles and paragraphs are data: a table in lesson_prose.hpp.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "run.hpp"

namespace attnscope::cli::lesson {

// A predict-then-reveal question: the accepted answers (normalised: lower case, no spaces
// or punctuation around), or a number within `tolerance`; `why` holds the run's numbers.
struct Question {
    std::string id, text, answer, why;
    std::vector<std::string> accepted;
    std::optional<double> number;
    double tolerance = 1e-3;
    bool numbers = false;  // the numbers of the answer, in order, against accepted[0] ("4x6")
};

using Args = std::vector<std::string>;  // after "attnscope"

struct Step {
    std::string title;
    std::vector<std::string> words;   // paragraphs
    std::vector<Args> commands;       // shown and run in turn
    std::vector<Question> questions;  // asked before the output, answered after it
};

// The run a topic that takes one is taught over: a bundle, or `--model DIR --text "…"`.
struct Subject {
    Args run;          // a run's arguments but "run", the stages and the head
    std::string name;  // how the questions name it
    std::string head;  // the head shown and asked about ("0")
};

// Where the lesson reads and writes: data/'s bundles, and a scratch folder for bundles made
// by `attnscope make` (removed at the end, and on Ctrl-C).
struct Places {
    std::string data;                // "data" or --data
    std::string scratch;             // an absolute folder ending in '/', or empty until made
    std::optional<Subject> subject;  // the bundle or --model run given, if any
    std::string at(const char* file) const;
    std::string made(const std::string& file);  // scratch + file (the folder made on first use)
};

struct Topic {
    const char* name;
    const char* title;
    std::function<std::vector<Step>(Places&)> steps;
    bool takes_subject = false;  // can be taught over Places::subject
};
const std::vector<Topic>& topics();

// ---- running this program (lesson_run.cpp) --------------------------------------------

struct Captured {
    int code = 0;
    std::string out;  // stdout and stderr together
};
std::string self_path();
Captured capture(const Args& args);  // `attnscope ARGS...` to the end, for its output shown
void run_quietly(const Args& args);  // RuntimeFailure with its words if it fails
std::string make_scratch();          // a fresh folder, removed by remove_scratch
void remove_scratch();               // also run on SIGINT, SIGTERM and SIGHUP

// A run computed in this process from `run`'s arguments (the bundle first; a --head or
// --batch selects as the run's outputs do): its view, the problem and trace kept alive.
// A warning of the run (a non-finite input) refuses it (InputError with the warning's
// words): a lesson's answers are computed from its numbers.
struct Run {
    Held held;
    const TraceView& view() const { return held.view; }
};
Run compute(const Args& args);

// A stage's element of a run: [h][i][j] (2-D x) or [b][h][i][j], batch item b.
double at(const Run& run, const std::string& stage, std::size_t b, std::size_t h, std::size_t i, std::size_t j);
std::size_t dim(const Run& run, const char* name);  // "Tq", "Tk", "Dm", "H", "Dk", "Dv", "Dout"
// The token of position i of batch item b on `side` ("query" or "key"), escaped; "q3"/"k3"
// without tokens.
std::string label(const Run& run, const char* side, std::size_t b, std::size_t i);
std::string num(double x);  // "%.4f"
// Args `a` followed by `more`.
Args with(Args a, std::initializer_list<const char*> more);

}  // namespace attnscope::cli::lesson
