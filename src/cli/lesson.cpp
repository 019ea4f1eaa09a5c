// `attnscope lesson [TOPIC] [--no-pause] [--quiz] [--json] [--data DIR]`: a paced lesson in
// the terminal over data/'s bundles (docs/classroom.md, "attnscope lesson"). Each step shows
// one command with its output (run by this same program); a question is asked before the
// output that answers it, and its answer is computed from the run (run --json), never
// written into the lesson. Waits for Enter only on a terminal; never changes the terminal's
// modes (a line is read as the terminal gives it), so Ctrl-C leaves it as it was.
#include <spawn.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "attnscope/base/errors.hpp"
#include "attnscope/base/json_writer.hpp"
#include "attnscope/base/text.hpp"
#include "subcommand.hpp"

extern char** environ;

namespace attnscope::cli {
namespace {

constexpr const char* kSchema = "attnscope.lesson/1";
constexpr std::size_t kMaxWidth = 80;

struct LessonOptions {
    std::string topic = "keys", data;
    bool no_pause = false, quiz = false, json = false;
};

// A predict-then-reveal question: the accepted answers (normalised: lower case, no spaces
// or punctuation around), or a number within `tolerance`; `why` holds the run's numbers.
struct Question {
    std::string id, text, answer, why;
    std::vector<std::string> accepted;
    std::optional<double> number;
    double tolerance = 1e-3;
    bool shape = false;  // the numbers of the answer, in order, against accepted[0] ("4x6")
};

struct Step {
    std::string title;
    std::vector<std::string> words;    // paragraphs
    std::vector<std::string> command;  // after "attnscope"
    std::vector<Question> questions;   // asked before the output, answered after it
};

// ---- running this program -------------------------------------------------------------

struct Captured {
    int code = 0;
    std::string out;  // stdout and stderr together
};

std::string self_path() {
    std::error_code ec;
    const auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (ec) throw RuntimeFailure("lesson: cannot find this program (/proc/self/exe): " + ec.message());
    return p.string();
}

// `attnscope ARGS...` run to the end, its output captured.
Captured capture(const std::vector<std::string>& args) {
    static const std::string self = self_path();
    int fds[2];
    if (::pipe(fds) != 0) throw RuntimeFailure("lesson: pipe failed");
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
    posix_spawn_file_actions_addclose(&fa, fds[0]);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", 0, 0);
    std::vector<std::string> argv_s = {self};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = 0;
    const int rc = posix_spawn(&pid, self.c_str(), &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    ::close(fds[1]);
    Captured c;
    if (rc != 0) {
        ::close(fds[0]);
        throw RuntimeFailure("lesson: cannot run " + self);
    }
    char buf[65536];
    for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) c.out.append(buf, std::size_t(n));
    ::close(fds[0]);
    int status = 0;
    ::waitpid(pid, &status, 0);
    c.code = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
    return c;
}

// `run ARGS --json`, parsed; RuntimeFailure with the run's words if it failed.
nlohmann::json run_json(std::vector<std::string> args) {
    args.insert(args.begin(), "run");
    args.push_back("--json");
    const Captured c = capture(args);
    if (c.code != 0) throw RuntimeFailure("lesson: a run failed: " + escape_control(c.out));
    return nlohmann::json::parse(c.out);
}

// weights[h][i][j] (2-D x) or [b][h][i][j] of a run document, batch item b.
double weight(const nlohmann::json& doc, const std::string& stage, std::size_t b, std::size_t h, std::size_t i,
              std::size_t j) {
    const auto& d = doc["stages"][stage]["data"];
    return (doc["config"]["batched"].get<bool>() ? d[b] : d)[h][i][j].get<double>();
}

std::string label(const nlohmann::json& doc, const char* side, std::size_t b, std::size_t i) {
    const auto& t = doc["tokens"][side];
    if (t.is_null()) return (side[0] == 'q' ? "q" : "k") + std::to_string(i);
    return escape_control((doc["config"]["batched"].get<bool>() ? t[b] : t)[i].get<std::string>());
}

std::string num(double x) {
    char s[32];
    std::snprintf(s, sizeof s, "%.4f", x);
    return s;
}

// ---- the topic "keys" -----------------------------------------------------------------

struct Data {
    std::string sentence, padded, cross;  // as the commands show them
};

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

// Which key query `q` of head 0 weights most: the label (keys sharing it tie) or its index.
Question strongest_key(const std::string& bundle, const std::vector<std::string>& args, std::size_t q) {
    const nlohmann::json doc = run_json(args);
    const std::size_t Tk = doc["dims"]["Tk"].get<std::size_t>();
    std::size_t best = 0, second = Tk > 1 ? 1 : 0;
    for (std::size_t j = 0; j < Tk; ++j)
        if (weight(doc, "weights", 0, 0, q, j) > weight(doc, "weights", 0, 0, q, best)) best = j;
    for (std::size_t j = 0; j < Tk; ++j)
        if (label(doc, "key", 0, j) != label(doc, "key", 0, best) &&
            (label(doc, "key", 0, second) == label(doc, "key", 0, best) ||
             weight(doc, "weights", 0, 0, q, j) > weight(doc, "weights", 0, 0, q, second)))
            second = j;
    Question Q;
    Q.id = "strongest-key";
    const std::string who = label(doc, "query", 0, q), won = label(doc, "key", 0, best);
    Q.text = "Which key will query '" + who + "' weight most in head 0 of " + bundle + "?";
    Q.answer = won;
    Q.accepted = {won};
    for (std::size_t j = 0; j < Tk; ++j)
        if (label(doc, "key", 0, j) == won) Q.accepted.push_back(std::to_string(j));
    Q.why = "Row '" + who + "' of head 0's weights: key " + std::to_string(best) + " '" + won + "' gets " +
            num(weight(doc, "weights", 0, 0, q, best)) + " (score " + num(weight(doc, "scores", 0, 0, q, best)) +
            "), the runner-up '" + label(doc, "key", 0, second) + "' " + num(weight(doc, "weights", 0, 0, q, second)) +
            ". The key whose k_j best matches q_i wins.";
    return Q;
}

Question softmax_axis(const std::vector<std::string>& args) {
    const nlohmann::json doc = run_json(args);
    const std::size_t Tk = doc["dims"]["Tk"].get<std::size_t>();
    std::string terms;
    double sum = 0;
    for (std::size_t j = 0; j < Tk; ++j) {
        const double w = weight(doc, "weights", 0, 0, 0, j);
        terms += (j ? " + " : "") + num(w), sum += w;
    }
    Question Q;
    Q.id = "softmax-axis";
    Q.text = "Is the softmax taken over the keys or over the values?";
    Q.answer = "keys";
    Q.accepted = {"keys", "key", "over the keys", "over keys"};
    Q.why = "Each row (one query) is a softmax over the " + std::to_string(Tk) + " keys: row 0 of head 0 is " + terms +
            " = " + num(sum) + ". Values are not in the softmax; they are mixed by its weights.";
    return Q;
}

Question scale_factor(const std::vector<std::string>& args) {
    const nlohmann::json doc = run_json(args);
    const std::size_t Dk = doc["dims"]["Dk"].get<std::size_t>();
    const double s = doc["config"]["scale"].get<double>();
    Question Q;
    Q.id = "scale";
    Q.text = "Queries and keys share Dk = " + std::to_string(Dk) +
             " features. By what number are the scores multiplied before the softmax?";
    Q.answer = num(s);
    Q.number = s;
    Q.accepted = {"1/sqrt(" + std::to_string(Dk) + ")", "1/sqrt(dk)", "1/√" + std::to_string(Dk)};
    Q.why = "scale = " + doc["config"]["scale_source"].get<std::string>() + " = " + num(s) +
            ": dot products of Dk features grow like sqrt(Dk); dividing keeps the softmax from saturating.";
    return Q;
}

std::vector<Question> cross_questions(const std::vector<std::string>& args) {
    const nlohmann::json doc = run_json(args);
    const std::size_t Tq = doc["dims"]["Tq"].get<std::size_t>(), Tk = doc["dims"]["Tk"].get<std::size_t>();
    Question shape;
    shape.id = "scores-shape";
    shape.text = "Here Tq = " + std::to_string(Tq) + " French queries and Tk = " + std::to_string(Tk) +
                 " English keys. What shape are one head's scores (rows x columns)?";
    shape.answer = std::to_string(Tq) + " x " + std::to_string(Tk);
    shape.accepted = {std::to_string(Tq) + "x" + std::to_string(Tk)};
    shape.shape = true;
    shape.why = "One row per query, one column per key: (Tq, Tk) = (" + std::to_string(Tq) + ", " + std::to_string(Tk) +
                "); with the batch and the heads, (B, H, Tq, Tk).";
    Question from;
    from.id = "cross-keys";
    from.text = "In cross-attention, where do the keys come from: x (the decoder) or memory (the encoder)?";
    from.answer = "memory";
    from.accepted = {"memory", "the memory", "encoder", "the encoder", "memory (the encoder)"};
    from.why = "K = memory · W_K: the keys (and values) come from the encoder's " + std::to_string(Tk) +
               " source tokens, the queries from the decoder's " + std::to_string(Tq) + ".";
    return {shape, from};
}

Question pad_weight(const std::vector<std::string>& args) {
    const nlohmann::json doc = run_json(args);
    const std::size_t Tk = doc["dims"]["Tk"].get<std::size_t>();
    std::string row;
    double pads = 0;
    for (std::size_t j = 0; j < Tk; ++j) {
        row += (j ? ", " : "") + num(weight(doc, "weights", 1, 0, 0, j));
        if (label(doc, "key", 1, j) == "<pad>") pads += weight(doc, "weights", 1, 0, 0, j);
    }
    Question Q;
    Q.id = "pad-weight";
    Q.text = "Batch item 1, '" + label(doc, "query", 1, 0) + " " + label(doc, "query", 1, 1) + " " +
             label(doc, "query", 1, 2) + "', ends in <pad> keys that key_padding_mask hides. What weight does query '" +
             label(doc, "query", 1, 0) + "' give a <pad> key?";
    Q.answer = "0";
    Q.number = 0;
    Q.tolerance = 0;
    Q.why = "Their scores become -inf and exp(-inf) = 0: row '" + label(doc, "query", 1, 0) + "' of head 0 is [" + row +
            "], " + num(pads) + " on the <pad> keys.";
    return Q;
}

Question zeroed_key(const std::vector<std::string>& args, std::size_t J) {
    const nlohmann::json doc = run_json(args);
    const std::size_t Tq = doc["dims"]["Tq"].get<std::size_t>();
    double lo = 1, hi = 0;
    for (std::size_t i = 0; i < Tq; ++i)
        lo = std::min(lo, weight(doc, "weights", 0, 0, i, J)), hi = std::max(hi, weight(doc, "weights", 0, 0, i, J));
    const std::string key = "'" + label(doc, "key", 0, J) + "'";
    Question Q;
    Q.id = "zeroed-key";
    Q.text = "--zero-key " + std::to_string(J) + " sets key " + key +
             " to the zero vector, so its scores are 0. Do its weights become 0 (yes or no)?";
    Q.answer = "no";
    Q.accepted = {"no", "n"};
    Q.why = "Score 0 is not -inf: its weights are exp(0 - max)/sum, from " + num(lo) + " to " + num(hi) +
            " in head 0. Only a mask (key_padding_mask) makes them exactly 0.";
    return Q;
}

Question keys_or_values() {
    Question Q;
    Q.id = "keys-vs-values";
    Q.text = "The output row of a query is a weighted sum of which vectors: the keys or the values?";
    Q.answer = "values";
    Q.accepted = {"values", "value", "the values", "v"};
    Q.why =
        "context = weights · V. A key only decides how much weight its position gets; the value, from its own "
        "W_V (learned apart from W_K), is what is added.";
    return Q;
}

std::vector<Step> keys_lesson(const Data& d) {
    const std::vector<std::string> S = {"run", d.sentence, "--heads", "2"};
    const auto with = [](std::vector<std::string> a, std::initializer_list<const char*> more) {
        a.insert(a.end(), more.begin(), more.end());
        return a;
    };
    const auto drop_run = [](std::vector<std::string> a) { return std::vector<std::string>(a.begin() + 1, a.end()); };
    std::vector<Step> L;
    L.push_back({"Keys and the score matrix",
                 {"Each position has a query q_i = x_i · W_Q (what it looks for) and a key k_j = x_j · W_K (an "
                  "address to match). scores = Q · Kᵀ: one row per query, one column per key. In self-attention "
                  "queries and keys come from the same sentence."},
                 with(S, {"--stages", "scores,weights", "--head", "0"}),
                 {strongest_key(d.sentence, drop_run(with(S, {"--stages", "scores,weights"})), 2)}});
    L.push_back({"Scaling and Dk",
                 {"Q and K share one width, Dk, so q_i · k_j is defined. The scores are scaled before the softmax."},
                 with(S, {"--stages", "scores", "--head", "0", "--explain"}),
                 {scale_factor(drop_run(with(S, {"--stages", "scores"})))}});
    L.push_back({"Softmax over the keys",
                 {"The weights of one query come from a softmax along its row of scores."},
                 with(S, {"--stages", "weights", "--head", "0"}),
                 {softmax_axis(drop_run(with(S, {"--stages", "weights"})))}});
    const std::vector<std::string> P = {"run", d.padded, "--heads", "2"};
    L.push_back({"Padding masks",
                 {"Sentences of different lengths are padded to one length; key_padding_mask (1 = PAD) hides the "
                  "padding keys from every query."},
                 with(P, {"--stages", "weights", "--batch", "1", "--head", "0"}),
                 {pad_weight(drop_run(with(P, {"--stages", "weights"})))}});
    const std::vector<std::string> C = {"run", d.cross, "--heads", "2"};
    L.push_back({"Cross-attention",
                 {"A translator's decoder attends the encoder's output, the memory: French target tokens ask, "
                  "English source tokens answer."},
                 with(C, {"--stages", "scores", "--head", "0"}),
                 cross_questions(drop_run(with(C, {"--stages", "scores"})))});
    L.push_back({"A zeroed key is not a masked key",
                 {"An experiment: set one key vector to 0 and look at its column."},
                 with(S, {"--zero-key", "1", "--stages", "weights", "--head", "0"}),
                 {zeroed_key(drop_run(with(S, {"--zero-key", "1", "--stages", "weights"})), 1)}});
    L.push_back({"Keys versus values",
                 {"Keys and values are computed from the same tokens by different matrices, W_K and W_V."},
                 with(S, {"--stages", "V,context", "--head", "0"}),
                 {keys_or_values()}});
    return L;
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

// `line` cut into pieces of at most `width` columns (a command's output that is wider).
std::vector<std::string> fit(const std::string& line, std::size_t width) {
    std::vector<std::string> out;
    std::string piece;
    std::size_t cols = 0;
    char32_t cp = 0;
    for (std::size_t k = 0; k < line.size();) {
        const std::size_t n = next_code_point(line, k, cp), w = column_width(cp);
        if (cols + w > width) out.push_back(piece), piece.clear(), cols = 0;
        piece.append(line, k, n), cols += w, k += n;
    }
    out.push_back(piece);
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
    if (q.shape) return shape_of(a) == q.accepted.at(0);
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

std::string shown_command(const std::vector<std::string>& args) {
    std::string s = "$ attnscope";
    for (const auto& a : args) s += " " + (a.find_first_of(" '") != std::string::npos ? "'" + a + "'" : a);
    return s;
}

void show_command(Terminal& t, const std::vector<std::string>& args) {
    for (const auto& l : wrap_words(shown_command(args), t.width)) std::cout << l << '\n';
    t.pause("run it");
    std::vector<std::string> real = args;
    for (const char* extra : {"--width", "", "--color", "never"}) real.emplace_back(extra);
    real[real.size() - 3] = std::to_string(t.width);
    const Captured c = capture(real);
    std::size_t at = 0;
    while (at < c.out.size()) {
        std::size_t e = c.out.find('\n', at);
        if (e == std::string::npos) e = c.out.size();
        for (const auto& piece : fit(c.out.substr(at, e - at), t.width)) std::cout << piece << '\n';
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

int write_json(const LessonOptions& o, const std::vector<Step>& steps) {
    JsonWriter w(std::cout);
    w.begin_object().key("schema").value(kSchema).key("topic").value(o.topic).key("questions").begin_array();
    for (std::size_t s = 0; s < steps.size(); ++s)
        for (const Question& q : steps[s].questions) {
            w.newline().begin_object().key("id").value(q.id).key("step").value(s + 1).key("question").value(q.text);
            w.key("answer").value(q.answer).key("accepted").list(q.accepted).key("number");
            q.number ? w.value(*q.number) : w.value(nullptr);
            w.key("why").value(q.why).key("command").value(shown_command(steps[s].command).substr(2)).end_object();
        }
    w.end_array().end_object();
    std::cout << '\n';
    return 0;
}

int run_lesson(const LessonOptions& o) {
    if (o.topic != "keys") throw UsageError("lesson: unknown topic '" + escape_control(o.topic) + "' (topics: keys)");
    const std::string data = find_data(o.data);
    const auto path = [&data](const char* f) { return (std::filesystem::path(data) / f).string(); };
    const std::vector<Step> steps = keys_lesson({path("sentence.json"), path("padded.json"), path("cross.json")});
    if (o.json) return write_json(o, steps);
    Terminal t = terminal_of(o);
    std::size_t right = 0, asked = 0;
    for (std::size_t s = 0; s < steps.size(); ++s) {
        const Step& step = steps[s];
        if (!o.quiz) {
            std::cout << '\n';
            t.say("Step " + std::to_string(s + 1) + " of " + std::to_string(steps.size()) + ": " + step.title);
            for (const auto& p : step.words) t.say(p, "  ");
        }
        std::vector<std::optional<std::string>> given;
        for (const Question& q : step.questions) given.push_back(ask(t, q));
        if (!o.quiz) show_command(t, step.command);
        for (std::size_t k = 0; k < step.questions.size(); ++k) {
            right += reveal(t, step.questions[k], given[k]) ? 1 : 0;
            ++asked;
        }
        if (s + 1 < steps.size()) t.pause("next step");
    }
    if (o.quiz) std::cout << "Score: " << right << " of " << asked << " right\n";
    return 0;
}

}  // namespace

Subcommand setup_lesson_command(CLI::App& parent) {
    auto o = std::make_shared<LessonOptions>();
    auto* cmd = parent.add_subcommand("lesson", "A paced lesson in the terminal, with questions computed from runs");
    cmd->footer("Waits for Enter only when standard input is a terminal. docs/classroom.md has the topics.");
    cmd->add_option("topic", o->topic, "The topic (keys)");
    cmd->add_flag("--no-pause", o->no_pause, "Run straight through, answers shown");
    cmd->add_flag("--quiz", o->quiz, "Only the questions, read from standard input, and a score");
    cmd->add_flag("--json", o->json, "The questions and their answers as JSON, for a grader");
    cmd->add_option("--data", o->data, "The folder of the example bundles (default: data/)");
    return {cmd, [o] { return run_lesson(*o); }};
}

}  // namespace attnscope::cli
