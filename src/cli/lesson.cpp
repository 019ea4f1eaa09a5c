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
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
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
constexpr std::size_t kSubjectKeys = 2;   // the keys lesson zeroes key 1
constexpr std::size_t kMaxAnswer = 1024;  // bytes of an answer line

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
    // Computed once here: a bundle or text the topic cannot use is refused before any step.
    const Run run = compute(with(s.run, {"--head", s.head.c_str(), "--stages", "weights"}));
    if (dim(run, "Tk") < kSubjectKeys)
        throw InputError("lesson " + o.topic + ": " + escape_control(s.name) + " has " +
                         std::to_string(dim(run, "Tk")) + " key; the lesson zeroes key 1, so it needs " +
                         std::to_string(kSubjectKeys) + " or more (a longer text)");
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

// `word` in pieces of at most `room` columns (only a word wider than a line is cut).
std::vector<std::string> cut_word(const std::string& word, std::size_t room) {
    std::vector<std::string> out(1);
    std::size_t cols = 0;
    char32_t cp = 0;
    for (std::size_t k = 0; k < word.size();) {
        const std::size_t n = next_code_point(word, k, cp), w = column_width(cp);
        if (cols + w > room && cols > 0) out.emplace_back(), cols = 0;
        out.back().append(word, k, n), cols += w, k += n;
    }
    return out;
}

// `line` in lines of at most `width` columns (a command's output that is wider): wrapped
// between words (a number is never cut), later lines with the line's indent and two more.
std::vector<std::string> fit(const std::string& line, std::size_t width) {
    if (display_width(line) <= width) return {line};
    const std::size_t lead = std::min(line.find_first_not_of(' '), line.size());
    const std::string indent(std::min<std::size_t>(lead, width / 2) + 2, ' ');
    std::vector<std::string> out = {line.substr(0, lead)};
    std::size_t cols = lead;
    bool empty = true;  // out.back() holds only its indent
    std::istringstream words(line.substr(lead));
    for (std::string word; words >> word;)
        for (const std::string& piece : cut_word(word, width - indent.size())) {
            const std::size_t w = display_width(piece);
            if (!empty && cols + 1 + w > width) out.push_back(indent), cols = indent.size(), empty = true;
            out.back() += (empty ? "" : " ") + piece, cols += (empty ? 0 : 1) + w, empty = false;
        }
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

// An answer's arithmetic: numbers (".25", "2.5e-1"), + - * / ^ (or **), parentheses, the
// constant e and sqrt, exp, log (natural) of a parenthesised argument; spaces anywhere.
// Nothing else is read: no names, no calls but those.
class Arithmetic {
   public:
    explicit Arithmetic(const std::string& text) : s_(text) {}
    std::optional<double> value() {
        const std::optional<double> v = sum();
        skip();
        return v && k_ == s_.size() ? v : std::nullopt;
    }

   private:
    static constexpr int kMaxDepth = 64;
    const std::string& s_;
    std::size_t k_ = 0;
    int depth_ = 0;

    void skip() {
        while (k_ < s_.size() && (s_[k_] == ' ' || s_[k_] == '\t')) ++k_;
    }
    bool eat(const char* word) {
        skip();
        const std::size_t n = std::strlen(word);
        if (s_.compare(k_, n, word) != 0) return false;
        return k_ += n, true;
    }
    std::optional<double> sum() {
        std::optional<double> v = product();
        for (int sign; v && ((sign = eat("+") ? 1 : eat("-") ? -1 : 0) != 0);)
            if (const auto r = product())
                v = *v + sign * *r;
            else
                return std::nullopt;
        return v;
    }
    std::optional<double> product() {
        std::optional<double> v = unary();
        for (char op; v && (op = eat("*") ? '*' : eat("/") ? '/' : 0) != 0;)  // power() took "**"
            if (const auto r = unary())
                v = op == '*' ? *v * *r : *v / *r;
            else
                return std::nullopt;
        return v;
    }
    std::optional<double> unary() {
        if (++depth_ > kMaxDepth) return std::nullopt;
        std::optional<double> v = eat("-") ? neg(unary()) : eat("+") ? unary() : power();
        --depth_;
        return v;
    }
    static std::optional<double> neg(std::optional<double> v) { return v ? std::optional<double>(-*v) : v; }
    std::optional<double> power() {  // right to left: 2^3^2 = 2^9; -2^2 = -(2^2)
        const std::optional<double> base = atom();
        if (!base || !(eat("^") || eat("**"))) return base;
        const std::optional<double> e = unary();
        return e ? std::optional<double>(std::pow(*base, *e)) : e;
    }
    std::optional<double> call(double (*f)(double)) {
        if (!eat("(")) return std::nullopt;
        const std::optional<double> v = sum();
        return v && eat(")") ? std::optional<double>(f(*v)) : std::nullopt;
    }
    std::optional<double> atom() {
        skip();
        if (eat("sqrt")) return call([](double x) { return std::sqrt(x); });
        if (eat("exp")) return call([](double x) { return std::exp(x); });
        if (eat("log")) return call([](double x) { return std::log(x); });
        if (eat("(")) {
            const std::optional<double> v = sum();
            return v && eat(")") ? v : std::nullopt;
        }
        if (eat("e")) return std::exp(1.0);
        return number();
    }
    std::optional<double> number() {
        const std::size_t from = k_;
        const auto digits = [&] {
            const std::size_t at = k_;
            while (k_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[k_]))) ++k_;
            return k_ > at;
        };
        const bool whole = digits(), frac = k_ < s_.size() && s_[k_] == '.' && (++k_, digits());
        if (!whole && !frac) return std::nullopt;
        if (k_ < s_.size() && s_[k_] == 'e') {  // an exponent, when digits follow: "1e-3"
            const std::size_t mark = k_++;
            if (k_ < s_.size() && (s_[k_] == '+' || s_[k_] == '-')) ++k_;
            if (!digits()) k_ = mark;
        }
        return std::strtod(s_.substr(from, k_ - from).c_str(), nullptr);
    }
};

bool is_right(const Question& q, const std::string& given) {
    const std::string a = lower_trimmed(given);
    if (a.empty()) return false;
    if (q.numbers) return shape_of(a) == q.accepted.at(0);
    for (const auto& ok : q.accepted)
        if (a == lower_trimmed(ok)) return true;
    if (q.number) {  // any arithmetic of the right value: "0.25", ".25", "1/4", "1/sqrt(16)"
        std::string typed = given;
        for (char& c : typed) c = char(std::tolower(static_cast<unsigned char>(c)));
        for (const std::string& text : {typed, a})
            if (const auto x = Arithmetic(text).value(); x && std::fabs(*x - *q.number) <= q.tolerance) return true;
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
    // One line of input, nothing once the input has ended. A line is at most kMaxAnswer
    // bytes of text: a longer one, or a NUL byte (not text), is refused (InputError).
    std::optional<std::string> read_line() {
        std::cout.flush();
        if (input_ended) return std::nullopt;
        std::string line;
        for (int c; (c = std::cin.get()) != std::char_traits<char>::eof() && c != '\n';) {
            if (c == 0) throw InputError("<stdin>: an answer holds a NUL byte; expected a line of text");
            if (line.size() == kMaxAnswer)
                throw InputError("<stdin>: an answer longer than " + std::to_string(kMaxAnswer) +
                                 " bytes; expected one line");
            line += char(c);
        }
        if (!std::cin) input_ended = true;
        if (input_ended && line.empty()) return std::nullopt;
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

// `a` as a POSIX shell reads it back as one word: bare when it holds only characters no
// shell treats specially, else in single quotes (a ' inside as '\'').
std::string shell_quoted(const std::string& a) {
    const auto plain = [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || std::strchr("_@%+=:,./-", c) != nullptr;
    };
    if (!a.empty() && std::all_of(a.begin(), a.end(), plain)) return a;
    std::string q = "'";
    for (char c : a) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
}

// The words of `attnscope ARGS` as a shell reads them back, scratch paths by file name.
std::vector<std::string> shown_words(const Args& args, const Places& p) {
    std::vector<std::string> words = {"attnscope"};
    for (const auto& a : args) words.push_back(shell_quoted(unscratched(a, p)));
    return words;
}

std::string shown_command(const Args& args, const Places& p) {
    std::string s;
    for (const auto& w : shown_words(args, p)) s += (s.empty() ? "" : " ") + w;
    return s;
}

void show_command(Terminal& t, const Args& args, const Places& p) {
    // Wrapped between words as a shell continues a line, so that it can be copied as shown
    // (a word is never cut: inside quotes a backslash-newline would be kept).
    std::vector<std::string> lines = {"$"};
    for (const auto& w : shown_words(args, p)) {
        const std::string word = escape_control(w);
        if (lines.back().size() > 4 && display_width(lines.back()) + 1 + display_width(word) + 2 > t.width)
            lines.push_back("   ");
        lines.back() += " " + word;
    }
    for (std::size_t k = 0; k < lines.size(); ++k) std::cout << lines[k] << (k + 1 < lines.size() ? " \\" : "") << '\n';
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
            const std::string shown = shown_command(steps[s].commands.back(), p);
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
    cmd->add_option("--data", o->data, "The folder of the example bundles (default: data/)")->type_name("=DIR");
    return {cmd, [o] { return run_lesson(*o); }};
}

}  // namespace attnscope::cli
