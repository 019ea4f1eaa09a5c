// `attnscope lesson [TOPIC] [--no-pause] [--quiz] [--json] [--data DIR]`: a paced lesson in
// the terminal over data/'s bundles (docs/classroom.md, "attnscope lesson"). Each step shows
// commands with their output (run by this same program); a question is asked before the
// output that answers it, and its answer is computed from the run (run --json), never
// written into the lesson (the topics: lesson_topics.cpp). Waits for Enter only on a
// terminal; never changes the terminal's modes (a line is read as the terminal gives it), so
// Ctrl-C leaves it as it was; the scratch folder of bundles made for a topic is removed at
// the end and on Ctrl-C.
#include "lesson.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "attnscope/base/errors.hpp"
#include "attnscope/base/json_writer.hpp"
#include "attnscope/base/text.hpp"
#include "subcommand.hpp"

namespace attnscope::cli {
namespace {

using namespace lesson;

constexpr const char* kSchema = "attnscope.lesson/1";
constexpr std::size_t kMaxWidth = 80;

struct LessonOptions {
    std::string topic, data, bundle, model, text;
    std::optional<std::size_t> layer, head;
    bool no_pause = false, quiz = false, json = false;
};

// The bundle or `--model DIR --text` run given, checked by running it once; none without them.
std::optional<Subject> subject_of(const LessonOptions& o, const Topic& topic) {
    const bool given = !o.bundle.empty() || !o.model.empty() || !o.text.empty() || o.layer || o.head;
    if (!given) return std::nullopt;
    std::string can;
    for (const Topic& t : topics())
        if (t.takes_subject) can += (can.empty() ? "" : ", ") + std::string(t.name);
    if (!topic.takes_subject)
        throw UsageError("lesson " + o.topic + ": takes no bundle or --model (topics that do: " + can + ")");
    if (o.bundle.empty() == o.model.empty())
        throw UsageError("lesson " + o.topic + ": give a bundle or --model DIR --text \"...\", one of them");
    if (o.model.empty() != o.text.empty() || (o.layer && o.model.empty()))
        throw UsageError("lesson " + o.topic + ": --model, --text and --layer go together");
    const std::string& path = o.bundle.empty() ? o.model : o.bundle;
    if (!std::filesystem::exists(path))
        throw InputError((o.bundle.empty() ? "--model " : "") + escape_control(path) + ": no such file or folder");
    Subject s{{o.bundle}, o.bundle, std::to_string(o.head.value_or(0))};
    if (!o.model.empty()) {
        s.run = {"--model", o.model, "--text", o.text};
        if (o.layer) s.run = with(s.run, {"--layer"}), s.run.push_back(std::to_string(*o.layer));
        s.name = "layer " + std::to_string(o.layer.value_or(0)) + " of " + o.model;
    }
    Args check = {"run"};
    check.insert(check.end(), s.run.begin(), s.run.end());
    const Captured c = capture(with(check, {"--head", s.head.c_str(), "--stages", "weights", "--json"}));
    if (c.code != 0) throw InputError(escape_control(c.out.substr(0, c.out.find('\n'))));
    return s;
}

std::string find_data(const std::string& given) {
    namespace fs = std::filesystem;
    std::vector<fs::path> tries;
    const fs::path exe = fs::path(self_path()).parent_path();
    if (!given.empty())
        tries.emplace_back(given);  // only there
    else
        tries = {"data", exe / ".." / "data", exe / ".." / "share" / "attnscope" / "data"};
    for (const auto& t : tries)
        if (fs::exists(t / "sentence.json") && fs::exists(t / "padded.json") && fs::exists(t / "cross.json"))
            return t.lexically_normal().string();
    throw UsageError(given.empty() ? "lesson: data/ not found (sentence.json, padded.json, cross.json): run from "
                                     "the source tree or give --data DIR"
                                   : "--data " + escape_control(given) +
                                         ": expected a folder holding sentence.json, padded.json and cross.json");
}

// ---- the terminal ---------------------------------------------------------------------

// Words of `text` in lines of at most `width` columns; a word longer than the width is cut.
std::vector<std::string> wrap_words(const std::string& text, std::size_t width, const std::string& indent = "") {
    std::vector<std::string> out;
    std::string line = indent, word;
    const auto flush_word = [&] {
        if (word.empty()) return;
        const std::size_t room = display_width(line) + (line.size() > indent.size() ? 1 : 0) + display_width(word);
        if (room > width && line.size() > indent.size()) out.push_back(line), line = indent;
        line += (line.size() > indent.size() ? " " : "") + word;
        word.clear();
    };
    for (char c : text) c == ' ' ? flush_word() : void(word += c);
    flush_word();
    if (line.size() > indent.size()) out.push_back(line);
    return out;
}

// `line` in pieces of at most `width` columns (a command's output that is wider): words
// wrapped, with the line's indent and two more; a word wider than the room is cut.
std::vector<std::string> fit(const std::string& line, std::size_t width) {
    if (display_width(line) <= width) return {line};
    const std::size_t lead = line.find_first_not_of(' ');
    const std::string indent(std::min<std::size_t>(lead == std::string::npos ? 0 : lead, width / 2) + 2, ' ');
    std::vector<std::string> out, cut;
    std::string piece;
    std::size_t cols = 0;
    char32_t cp = 0;
    for (std::size_t k = 0; k < line.size();) {
        const std::size_t n = next_code_point(line, k, cp), w = column_width(cp);
        if (cols + w > width - indent.size()) cut.push_back(piece), piece.clear(), cols = 0;
        piece.append(line, k, n), cols += w, k += n;
    }
    cut.push_back(piece);
    for (const auto& c : cut)
        for (const auto& l : wrap_words(c, width, out.empty() ? "" : indent)) out.push_back(l);
    return out;
}

std::string lower_trimmed(const std::string& s) {
    std::string t;
    for (char c : s) t += char(std::tolower(static_cast<unsigned char>(c)));
    const auto keep = [](char c) { return c != ' ' && c != '\t' && c != '\'' && c != '"' && c != '.' && c != '?'; };
    const auto a = std::find_if(t.begin(), t.end(), keep);
    const auto b = std::find_if(t.rbegin(), t.rend(), keep).base();
    return a < b ? std::string(a, b) : std::string();
}

// The numbers in `s`, joined by "x": "(4, 6)" and "4 by 6" are "4x6".
std::string shape_of(const std::string& s) {
    std::string out, digits;
    for (char c : s + ' ')
        if (c >= '0' && c <= '9')
            digits += c;
        else if (!digits.empty())
            out += (out.empty() ? "" : "x") + digits, digits.clear();
    return out;
}

bool is_right(const Question& q, const std::string& given) {
    const std::string a = lower_trimmed(given);
    if (a.empty()) return false;
    if (q.numbers) return shape_of(a) == q.accepted.at(0);
    for (const auto& ok : q.accepted)
        if (a == lower_trimmed(ok)) return true;
    if (q.number) {
        char* end = nullptr;
        const double x = std::strtod(a.c_str(), &end);
        if (end && *end == 0 && std::fabs(x - *q.number) <= q.tolerance) return true;
    }
    return false;
}

struct Terminal {
    std::size_t width = kMaxWidth;
    bool pausing = false;  // a terminal on stdin, no --no-pause
    bool ask = false;      // read answers (pausing, or --quiz)
    bool input_ended = false;

    void say(const std::string& text, const std::string& indent = "") const {
        for (const auto& l : wrap_words(text, width, indent)) std::cout << l << '\n';
    }
    // One line of input; nothing once the input has ended.
    std::optional<std::string> read_line() {
        std::cout.flush();
        std::string line;
        if (input_ended || !std::getline(std::cin, line)) return input_ended = true, std::nullopt;
        return line;
    }
    void pause(const char* what) {
        if (!pausing || input_ended) return;
        std::cout << "[Enter: " << what << "] ";
        read_line();
    }
};

Terminal terminal_of(const LessonOptions& o) {
    Terminal t;
    struct winsize ws {};
    if (::isatty(1) && ::ioctl(1, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
        t.width = ws.ws_col;
    else if (const char* c = std::getenv("COLUMNS"); c && std::atoi(c) > 0)
        t.width = std::size_t(std::atoi(c));
    t.width = std::clamp<std::size_t>(t.width, 40, kMaxWidth);
    t.pausing = ::isatty(0) && !o.no_pause && !o.quiz;
    t.ask = t.pausing || o.quiz;
    return t;
}

// `s` with the scratch folder's name taken out: the bundles made there show by file name.
std::string unscratched(std::string s, const Places& p) {
    if (p.scratch.empty()) return s;
    for (std::size_t k; (k = s.find(p.scratch)) != std::string::npos;) s.erase(k, p.scratch.size());
    return s;
}

std::string shown_command(const Args& args, const Places& p) {
    std::string s = "$ attnscope";
    for (const auto& a : args) s += " " + (a.find_first_of(" '") != std::string::npos ? "'" + a + "'" : a);
    return unscratched(s, p);
}

void show_command(Terminal& t, const Args& args, const Places& p) {
    // Wrapped as a shell continues a line, so that it can be copied as shown.
    const std::vector<std::string> lines = wrap_words(shown_command(args, p), t.width - 6);
    for (std::size_t k = 0; k < lines.size(); ++k)
        std::cout << (k ? "    " : "") << lines[k] << (k + 1 < lines.size() ? " \\" : "") << '\n';
    t.pause("run it");
    Args real = args;
    if (args.at(0) == "run")
        real = with(real, {"--color", "never", "--width"}), real.push_back(std::to_string(t.width));
    const std::string out = unscratched(capture(real).out, p);
    std::size_t at = 0;
    while (at < out.size()) {
        std::size_t e = out.find('\n', at);
        if (e == std::string::npos) e = out.size();
        for (const auto& piece : fit(out.substr(at, e - at), t.width)) std::cout << piece << '\n';
        at = e + 1;
    }
}

// Asks `q`; the answer typed, when answers are read.
std::optional<std::string> ask(Terminal& t, const Question& q) {
    t.say("Predict: " + q.text);
    if (!t.ask) return std::nullopt;
    std::cout << "> ";
    return t.read_line();
}

bool reveal(Terminal& t, const Question& q, const std::optional<std::string>& given) {
    const bool right = given && is_right(q, *given);
    if (given)
        t.say(right ? "Right: " + q.answer + "." : "Not quite: the answer is " + q.answer + ".");
    else
        t.say("Answer: " + q.answer + ".");
    t.say(q.why, "  ");
    return right;
}

int write_json(const LessonOptions& o, const std::vector<Step>& steps, const Places& p) {
    JsonWriter w(std::cout);
    w.begin_object().key("schema").value(kSchema).key("topic").value(o.topic).key("questions").begin_array();
    for (std::size_t s = 0; s < steps.size(); ++s)
        for (const Question& q : steps[s].questions) {
            w.newline().begin_object().key("id").value(q.id).key("step").value(s + 1).key("question").value(q.text);
            w.key("answer").value(q.answer).key("accepted").list(q.accepted).key("number");
            q.number ? w.value(*q.number) : w.value(nullptr);
            const std::string shown = shown_command(steps[s].commands.back(), p).substr(2);
            w.key("why").value(q.why).key("command").value(shown).end_object();
        }
    w.end_array().end_object();
    std::cout << '\n';
    return 0;
}

const Topic& topic_of(const std::string& name) {
    std::string names;
    for (const Topic& t : topics()) {
        if (t.name == name) return t;
        names += (names.empty() ? "" : ", ") + std::string(t.name);
    }
    throw UsageError("lesson: unknown topic '" + escape_control(name) + "' (topics: " + names + ")");
}

int list_topics() {
    std::cout << "Topics (attnscope lesson TOPIC [--no-pause] [--quiz] [--json]):\n";
    for (const Topic& t : topics()) {
        std::string name = t.name;
        name.resize(9, ' ');
        std::cout << "  " << name << t.title << '\n';
    }
    return 0;
}

std::size_t teach(const LessonOptions& o, const std::vector<Step>& steps, const Places& p, std::size_t& asked) {
    Terminal t = terminal_of(o);
    std::size_t right = 0;
    for (std::size_t s = 0; s < steps.size(); ++s) {
        const Step& step = steps[s];
        if (!o.quiz) {
            std::cout << '\n';
            t.say("Step " + std::to_string(s + 1) + " of " + std::to_string(steps.size()) + ": " + step.title);
            for (const auto& words : step.words) t.say(words, "  ");
        }
        std::vector<std::optional<std::string>> given;
        for (const Question& q : step.questions) given.push_back(ask(t, q));
        if (!o.quiz)
            for (const Args& c : step.commands) show_command(t, c, p);
        for (std::size_t k = 0; k < step.questions.size(); ++k) {
            right += reveal(t, step.questions[k], given[k]) ? 1 : 0;
            ++asked;
        }
        if (s + 1 < steps.size()) t.pause("next step");
    }
    return right;
}

int run_lesson(const LessonOptions& o) {
    if (o.topic.empty()) return list_topics();
    const Topic& topic = topic_of(o.topic);
    Places p{find_data(o.data), "", subject_of(o, topic)};
    struct Cleanup {
        ~Cleanup() { remove_scratch(); }
    } cleanup;
    const std::vector<Step> steps = topic.steps(p);
    if (o.json) return write_json(o, steps, p);
    std::size_t asked = 0;
    const std::size_t right = teach(o, steps, p, asked);
    if (o.quiz) std::cout << "Score: " << right << " of " << asked << " right\n";
    return 0;
}

}  // namespace

Subcommand setup_lesson_command(CLI::App& parent) {
    auto o = std::make_shared<LessonOptions>();
    auto* cmd = parent.add_subcommand("lesson", "A paced lesson in the terminal, with questions computed from runs");
    cmd->footer("Waits for Enter only when standard input is a terminal. docs/classroom.md has the topics.");
    cmd->add_option("topic", o->topic, "The topic (none: the list of topics)");
    cmd->add_option("bundle", o->bundle, "A bundle the topic is taught over (keys), in place of data/'s");
    cmd->add_option("--model", o->model, "A model folder the topic is taught over, with --text (keys)");
    cmd->add_option("--text", o->text, "The text run through --model");
    cmd->add_option("--layer", o->layer, "The layer of --model (default: its run's)");
    cmd->add_option("--head", o->head, "The head shown and asked about (default: 0)");
    cmd->add_flag("--no-pause", o->no_pause, "Run straight through, answers shown");
    cmd->add_flag("--quiz", o->quiz, "Only the questions, read from standard input, and a score");
    cmd->add_flag("--json", o->json, "The questions and their answers as JSON, for a grader");
    cmd->add_option("--data", o->data, "The folder of the example bundles (default: data/)");
    return {cmd, [o] { return run_lesson(*o); }};
}

}  // namespace attnscope::cli
