// `attnscope make -o OUT.npz|OUT.json [--tokens "the cat sat" | --length T] [--pattern P] ...`:
// a bundle made without Python, for class (docs/classroom.md, "attnscope make"). The numbers
// come from splitmix64 (documented there, so a class can reproduce them); the patterns set
// W_Q and W_K so that the run shows them. The bundle carries its config record (heads,
// causal), so `attnscope run OUT` needs no other option.
#include <cmath>
#include <cstdint>
#include <iostream>
#include <memory>
#include <numbers>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "attnscope/base/errors.hpp"
#include "attnscope/base/json_writer.hpp"
#include "attnscope/base/text.hpp"
#include "attnscope/io/write.hpp"
#include "counts.hpp"
#include "options.hpp"
#include "splitmix.hpp"
#include "subcommand.hpp"

namespace attnscope::cli {
namespace {

enum class Pattern { random, previous_token, first_token, induction, identity };
const Choices<Pattern> kPatterns = {{"random", Pattern::random},
                                    {"previous-token", Pattern::previous_token},
                                    {"first-token", Pattern::first_token},
                                    {"induction", Pattern::induction},
                                    {"identity", Pattern::identity}};

constexpr double kMargin = 10;                             // a pattern's key beats every other by this much, scaled
constexpr double kSinkMargin = 2;                          // induction: key 0's lead when no earlier copy matches
constexpr std::size_t kMaxNumbers = std::size_t(1) << 27;  // 1 GiB of float64 in all
constexpr std::size_t kMaxTokens = 65536;                  // --length, --pad
constexpr const char* kTokens = "the cat sat on the mat";  // --tokens' default
constexpr const char* kInductionTokens = "the cat sat on a mat";

struct MakeOptions {
    std::string tokens, memory_tokens, out, dtype = "float64", pattern = "random";
    std::optional<std::size_t> length, dm, dk, dv;
    std::size_t heads = 1, pad = 0;
    std::uint64_t seed = 0;
    bool force = false;
};

// The numbers: splitmix64 (splitmix.hpp).

// The sizes and labels of the bundle to make. Padding (<pad>) ends the keys' sequence: x's
// in self-attention, memory's in cross-attention.
struct Plan {
    Pattern pattern = Pattern::random;
    bool cross = false;
    std::vector<std::string> q_tokens, k_tokens;  // (Tq,), (Tk,) with the <pad>s
    std::vector<std::string> vocab;               // distinct real tokens, queries' first
    std::size_t Tq = 0, Tk = 0, pad = 0, dm = 0, H = 1, dk = 0, dv = 0;
    std::size_t fixed = 0;  // x's columns before the content: 0 (random), 4 (+2V for induction)
    double theta = 0;       // positions on a half circle: position i at angle i·theta
    bool causal() const { return !cross && pattern != Pattern::random && pattern != Pattern::identity; }
    std::size_t V() const { return vocab.size(); }
    std::size_t content() const { return dm - fixed; }
    std::size_t vocab_index(const std::string& t) const {
        for (std::size_t v = 0; v < vocab.size(); ++v)
            if (vocab[v] == t) return v;
        return vocab.size();
    }
};

std::vector<std::string> split_words(const std::string& flag, const std::string& text) {
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string w; in >> w;) {
        if (const std::size_t at = invalid_utf8_at(w); at != std::string::npos)
            throw UsageError(flag + ": token '" + escape_control(w) + "' is not UTF-8 at byte " + std::to_string(at));
        out.push_back(w);
    }
    if (out.empty()) throw UsageError(flag + ": expected tokens separated by spaces, found none");
    return out;
}

// The query tokens: --tokens (written twice for induction: the pattern needs repeats), or
// --length T ("t0 t1 ...", repeating with period ceil(T/2) for induction).
std::vector<std::string> query_tokens(const MakeOptions& o, Pattern p) {
    if (o.length && !o.tokens.empty()) throw UsageError("--length: give --tokens or --length, not both");
    if (o.length) {
        const std::size_t period = p == Pattern::induction ? (*o.length + 1) / 2 : *o.length;
        std::vector<std::string> out;
        for (std::size_t i = 0; i < *o.length; ++i) out.push_back("t" + std::to_string(i % period));
        return out;
    }
    // induction's default has no token twice, so that each copy has one key after it
    const char* fallback = p == Pattern::induction ? kInductionTokens : kTokens;
    std::vector<std::string> t = split_words("--tokens", o.tokens.empty() ? fallback : o.tokens);
    const std::vector<std::string> once = t;
    if (p == Pattern::induction) t.insert(t.end(), once.begin(), once.end());
    return t;
}

std::size_t need_dk(const Plan& p) {
    switch (p.pattern) {
        case Pattern::random:
        case Pattern::first_token:
            return 1;
        case Pattern::previous_token:
        case Pattern::identity:
            return 2;
        case Pattern::induction:
            return p.V() + 1;
    }
    return 1;
}

// The sizes: the options given, each default derived from the pattern's needs; checked.
void choose_sizes(const MakeOptions& o, Plan& p) {
    p.fixed = p.pattern == Pattern::random ? 0 : p.pattern == Pattern::induction ? 4 + 2 * p.V() : 4;
    p.dm = o.dm.value_or(std::max<std::size_t>(8, (p.fixed + 4 + 7) / 8 * 8));
    p.H = o.heads;
    const std::size_t need = need_dk(p);
    p.dk = o.dk.value_or(std::max(need, p.dm / p.H));
    p.dv = o.dv.value_or(p.dk);
    const std::string pat = name_of(kPatterns, p.pattern);
    if (p.dm <= p.fixed)
        throw UsageError("--dm " + std::to_string(p.dm) + ": --pattern " + pat + " needs more than " +
                         std::to_string(p.fixed) + " columns (its fixed ones and at least one of content)");
    if (p.dk < need)
        throw UsageError("--dk " + std::to_string(p.dk) + ": --pattern " + pat + " needs at least " +
                         std::to_string(need) +
                         (p.pattern == Pattern::induction ? " (one per distinct token and one for key 0)" : ""));
    const double numbers =
        double(std::max(p.Tq, p.Tk)) * double(p.dm) + 4.0 * double(p.dm) * double(p.H) * double(std::max(p.dk, p.dv));
    if (numbers > double(kMaxNumbers))
        throw UsageError("--dm/--heads/--dk/--dv: the bundle would hold about " + std::to_string(std::size_t(numbers)) +
                         " numbers; make writes at most " + std::to_string(kMaxNumbers));
}

Plan plan_of(const MakeOptions& o) {
    Plan p;
    p.pattern = kPatterns[0].second;
    for (const auto& [name, value] : kPatterns)
        if (name == o.pattern) p.pattern = value;
    p.q_tokens = query_tokens(o, p.pattern);
    p.cross = !o.memory_tokens.empty();
    p.k_tokens = p.cross ? split_words("--memory-tokens", o.memory_tokens) : p.q_tokens;
    for (const auto* side : {&p.q_tokens, &p.k_tokens})
        for (const auto& t : *side)
            if (p.vocab_index(t) == p.V()) p.vocab.push_back(t);
    p.pad = o.pad;
    for (std::size_t k = 0; k < p.pad; ++k) {
        p.k_tokens.push_back("<pad>");
        if (!p.cross) p.q_tokens.push_back("<pad>");
    }
    p.Tq = p.q_tokens.size(), p.Tk = p.k_tokens.size();
    p.theta = std::numbers::pi / double(std::max(p.Tq, p.Tk));
    choose_sizes(o, p);
    return p;
}

// One row-major matrix (rows, cols).
struct Matrix {
    std::size_t rows = 0, cols = 0;
    std::vector<double> v;
    Matrix(std::size_t r, std::size_t c) : rows(r), cols(c), v(r * c, 0.0) {}
    double& at(std::size_t i, std::size_t j) { return v[i * cols + j]; }
};

// Weights: (2u - 1) / sqrt(rows), drawn row by row.
Matrix random_weights(SplitMix64& rng, std::size_t rows, std::size_t cols) {
    Matrix w(rows, cols);
    const double s = std::sqrt(double(rows));
    for (double& x : w.v) x = rng.symmetric() / s;
    return w;
}

// The input rows of one sequence (T, dm). Random pattern: row i = E[token i]. Otherwise
// the columns are [1, i == 0, cos(i·θ), sin(i·θ), (induction) one-hot of token i, one-hot
// of token i-1, then E[token i]]. A <pad> row is 0.
Matrix inputs(const Plan& p, const std::vector<std::string>& tokens, const Matrix& E) {
    Matrix x(tokens.size(), p.dm);
    for (std::size_t i = 0; i < tokens.size(); ++i) {
        const std::size_t v = p.vocab_index(tokens[i]);
        if (v == p.V()) continue;  // <pad>
        if (p.pattern != Pattern::random) {
            x.at(i, 0) = 1, x.at(i, 1) = i == 0 ? 1 : 0;
            x.at(i, 2) = std::cos(double(i) * p.theta), x.at(i, 3) = std::sin(double(i) * p.theta);
        }
        if (p.pattern == Pattern::induction) {
            x.at(i, 4 + v) = 1;
            if (i > 0) x.at(i, 4 + p.V() + p.vocab_index(tokens[i - 1])) = 1;
        }
        for (std::size_t c = 0; c < p.content(); ++c) x.at(i, p.fixed + c) = E.v[v * p.content() + c];
    }
    return x;
}

// W_Q and W_K of a pattern, head h in columns h·dk...: scaled scores (1/sqrt(dk)) are
//   identity:       q_i·k_j = a·cos((i - j)·θ)        a = M / (scale · (1 - cos θ))
//   previous-token: q_i·k_j = a·cos((i - 1 - j)·θ)    (W_Q turns position i back to i - 1)
//   first-token:    q_i·k_j = a·[j = 0]               a = M / scale
//   induction:      q_i·k_j = a·[token j-1 = token i] + b·[j = 0], b = 2 / scale
// so the chosen key leads every other by M = 10 after scaling.
void pattern_weights(const Plan& p, Matrix& WQ, Matrix& WK) {
    std::fill(WQ.v.begin(), WQ.v.end(), 0.0), std::fill(WK.v.begin(), WK.v.end(), 0.0);
    const double scale = 1 / std::sqrt(double(p.dk)), c = std::cos(p.theta), s = std::sin(p.theta);
    const double a_turn = kMargin / (scale * (1 - c)), a = kMargin / scale;
    for (std::size_t h = 0; h < p.H; ++h) {
        const std::size_t f = h * p.dk;
        switch (p.pattern) {
            case Pattern::random:
                return;
            case Pattern::identity:
            case Pattern::previous_token: {
                const bool back = p.pattern == Pattern::previous_token;
                WQ.at(2, f) = a_turn * (back ? c : 1), WQ.at(2, f + 1) = a_turn * (back ? -s : 0);
                WQ.at(3, f) = a_turn * (back ? s : 0), WQ.at(3, f + 1) = a_turn * (back ? c : 1);
                WK.at(2, f) = 1, WK.at(3, f + 1) = 1;
                break;
            }
            case Pattern::first_token:
                WQ.at(0, f) = a, WK.at(1, f) = 1;
                break;
            case Pattern::induction:
                for (std::size_t v = 0; v < p.V(); ++v) WQ.at(4 + v, f + v) = a, WK.at(4 + p.V() + v, f + v) = 1;
                WQ.at(0, f + p.V()) = kSinkMargin / scale, WK.at(1, f + p.V()) = 1;
                break;
        }
    }
}

// Every array of the bundle, drawn in the documented order: E (V, dm - fixed), W_Q (dm,
// H·dk), W_K (dm, H·dk), W_V (dm, H·dv), W_O (H·dv, dm); then x and memory from E.
struct Made {
    std::vector<std::pair<std::string, Matrix>> arrays;  // x, memory, W_Q, W_K, W_V, W_O
};

Made make_arrays(const Plan& p, std::uint64_t seed) {
    SplitMix64 rng{seed};
    Matrix E(p.V(), p.content());
    for (double& e : E.v) e = rng.symmetric();
    Matrix WQ = random_weights(rng, p.dm, p.H * p.dk), WK = random_weights(rng, p.dm, p.H * p.dk);
    Matrix WV = random_weights(rng, p.dm, p.H * p.dv), WO = random_weights(rng, p.H * p.dv, p.dm);
    if (p.pattern != Pattern::random) pattern_weights(p, WQ, WK);
    Made m;
    m.arrays.emplace_back("x", inputs(p, p.q_tokens, E));
    if (p.cross) m.arrays.emplace_back("memory", inputs(p, p.k_tokens, E));
    m.arrays.emplace_back("W_Q", std::move(WQ));
    m.arrays.emplace_back("W_K", std::move(WK));
    m.arrays.emplace_back("W_V", std::move(WV));
    m.arrays.emplace_back("W_O", std::move(WO));
    return m;
}

std::string config_json(const Plan& p) {
    return "{\"heads\": " + std::to_string(p.H) + ", \"causal\": " + (p.causal() ? "true" : "false") + "}";
}

// Text as numpy's '<U' stores it: each string `width` UTF-32LE code points, NUL-padded.
std::vector<char32_t> utf32(const std::vector<std::string>& texts, std::size_t& width) {
    std::vector<std::vector<char32_t>> cps;
    width = 1;
    for (const auto& t : texts) {
        cps.emplace_back();
        char32_t cp = 0;
        for (std::size_t k = 0; k < t.size();) k += next_code_point(t, k, cp), cps.back().push_back(cp);
        width = std::max(width, cps.back().size());
    }
    std::vector<char32_t> out(texts.size() * width, 0);
    for (std::size_t i = 0; i < cps.size(); ++i) std::copy(cps[i].begin(), cps[i].end(), out.begin() + long(i * width));
    return out;
}

void write_npz_bundle(AtomicFile& file, const Plan& p, const Made& m, bool f32) {
    std::vector<OutArray> arrays;
    std::vector<std::vector<char32_t>> texts;
    std::vector<std::vector<float>> floats;
    const auto add_text = [&](const std::string& name, const std::vector<std::string>& t,
                              std::vector<std::size_t> shape) {
        std::size_t width = 0;
        texts.push_back(utf32(t, width));
        arrays.push_back({name, std::move(shape), DType::float64, nullptr, width});
    };
    texts.reserve(3), floats.reserve(m.arrays.size());
    add_text("config", {config_json(p)}, {});
    add_text("query_tokens", p.q_tokens, {p.Tq});
    add_text("key_tokens", p.k_tokens, {p.Tk});
    for (std::size_t k = 0; k < texts.size(); ++k) arrays[k].data = texts[k].data();
    for (const auto& [name, a] : m.arrays) {
        if (f32) floats.emplace_back(a.v.begin(), a.v.end());
        arrays.push_back({name,
                          {a.rows, a.cols},
                          f32 ? DType::float32 : DType::float64,
                          f32 ? static_cast<const void*>(floats.back().data()) : a.v.data()});
    }
    std::vector<unsigned char> mask(p.Tk, 0);
    for (std::size_t j = p.Tk - p.pad; j < p.Tk; ++j) mask[j] = 1;
    if (p.pad) arrays.push_back({"key_padding_mask", {p.Tk}, DType::boolean, mask.data()});
    write_npz(file, arrays);
}

void write_json_bundle(AtomicFile& file, const Plan& p, const Made& m, bool f32) {
    std::ostringstream s;
    JsonWriter w(s);
    w.begin_object().key("config").begin_object().key("heads").value(p.H).key("causal").value(p.causal()).end_object();
    w.newline().key("query_tokens").list(p.q_tokens).newline().key("key_tokens").list(p.k_tokens);
    for (const auto& [name, a] : m.arrays) {
        w.newline().key(name).begin_array();
        for (std::size_t i = 0; i < a.rows; ++i) {
            w.newline().begin_array();
            for (std::size_t j = 0; j < a.cols; ++j)
                f32 ? w.value(float(a.v[i * a.cols + j])) : w.value(a.v[i * a.cols + j]);
            w.end_array();
        }
        w.end_array();
    }
    if (p.pad) {
        w.newline().key("key_padding_mask").begin_array();
        for (std::size_t j = 0; j < p.Tk; ++j) w.value(j >= p.Tk - p.pad ? 1 : 0);
        w.end_array();
    }
    w.newline().end_object();
    s << '\n';
    file.write(s.str());
}

int run_make(const MakeOptions& o) {
    const bool json = o.out.size() > 5 && o.out.substr(o.out.size() - 5) == ".json";
    if (!json && !(o.out.size() > 4 && o.out.substr(o.out.size() - 4) == ".npz"))
        throw UsageError("--out " + escape_control(o.out) + ": expected a name ending in .npz or .json");
    check_output_target(o.out, o.force, "--out " + o.out);
    const Plan p = plan_of(o);
    const Made m = make_arrays(p, o.seed);
    AtomicFile file(o.out, o.force);
    (json ? write_json_bundle : write_npz_bundle)(file, p, m, o.dtype == "float32");
    file.commit();
    // Within 80 columns: the file, what it holds, the command that runs it.
    std::cout << "attnscope make: wrote " << escape_control(o.out) << "\n  pattern " << o.pattern << ", seed " << o.seed
              << "\n  Tq " << p.Tq << ", Tk " << p.Tk << ", Dm " << p.dm << ", H " << p.H << ", Dk " << p.dk << ", Dv "
              << p.dv << "\n  attnscope run " << escape_control(o.out) << '\n';
    return 0;
}

}  // namespace

Subcommand setup_make_command(CLI::App& parent) {
    auto o = std::make_shared<MakeOptions>();
    auto* cmd = parent.add_subcommand("make", "Make a bundle for class: tokens, sizes, a seed and a pattern");
    cmd->footer("The numbers and the patterns are documented in docs/classroom.md, so a class can reproduce them.");
    cmd->add_option("-o,--out", o->out, "The bundle to write (.npz or .json)")->required();
    cmd->add_option(
           "--tokens", o->tokens,
           "The query tokens, separated by spaces (default: the cat sat on the mat; induction: the cat sat on a "
           "mat)")
        ->type_name("=TOKENS");
    cmd->add_option("--length", o->length, "Tokens t0 t1 ... of this many instead of --tokens")
        ->check(count_in(1, kMaxTokens));
    cmd->add_option("--memory-tokens", o->memory_tokens, "Cross-attention: the encoder memory's tokens (the keys)");
    cmd->add_option("--pad", o->pad, "Append N <pad> keys, hidden by a key_padding_mask")
        ->check(count_in(0, kMaxTokens));
    cmd->add_option("--pattern", o->pattern, "What the weights show")->check(CLI::IsMember([] {
        std::vector<std::string> names;
        for (const auto& [name, value] : kPatterns) names.push_back(name);
        return names;
    }()));
    cmd->add_option("--dm", o->dm, "Width of x, Dm (default 8, or what the pattern needs)")
        ->check(count_in(1, kMaxHeads));
    cmd->add_option("--heads", o->heads, "Heads, H (default 1)")->check(count_in(1, kMaxHeads));
    cmd->add_option("--dk", o->dk, "Width of a query and key head, Dk (default Dm / H)")->check(count_in(1, kMaxHeads));
    cmd->add_option("--dv", o->dv, "Width of a value head, Dv (default Dk)")->check(count_in(1, kMaxHeads));
    cmd->add_option("--seed", o->seed, "The splitmix64 seed (default 0)")->check(count_in(0, ~std::uint64_t{0}));
    cmd->add_option("--dtype", o->dtype, "The numbers' type in the file")->check(CLI::IsMember({"float32", "float64"}));
    cmd->add_flag("--force", o->force, "Replace an existing file");
    return {cmd, [o] { return run_make(*o); }};
}

}  // namespace attnscope::cli
