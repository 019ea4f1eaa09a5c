// Helpers shared by the C++ tests: temporary directories, building bundles in memory,
// running the pipeline, comparing tensors with the largest difference reported (llm.c's
// "maxdiff"), the io tests' fixtures, file and error helpers, and the views tests'
// computed runs. Each helper is defined here once; helpers that serve one test file
// only stay in that file.
#pragma once

#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <system_error>
#include <typeinfo>
#include <vector>

#include "attnscope/base/errors.hpp"
#include "attnscope/core/attention.hpp"
#include "attnscope/core/view.hpp"
#include "attnscope/io/read.hpp"
#include "attnscope/io/write.hpp"
#include "attnscope/model/model.hpp"

namespace testutil {

// A fresh directory under the system temp directory, removed with its contents.
struct TempDir {
    std::filesystem::path path;
    TempDir() {
        std::string t = (std::filesystem::temp_directory_path() / "attnscope-test-XXXXXX").string();
        REQUIRE(::mkdtemp(t.data()) != nullptr);
        path = t;
    }
    ~TempDir() {
        std::error_code ec;
        std::filesystem::remove_all(path, ec);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    std::string operator/(const std::string& name) const { return (path / name).string(); }
    std::set<std::string> entries() const { return entries_of(path.string()); }
    // The names in directory `dir` (none when it does not exist).
    static std::set<std::string> entries_of(const std::string& dir) {
        std::set<std::string> names;
        std::error_code ec;
        for (const auto& e : std::filesystem::directory_iterator(dir, ec)) names.insert(e.path().filename().string());
        return names;
    }
};

using attnscope::Array;
using attnscope::Bundle;

inline Array arr(std::vector<std::size_t> shape, std::vector<double> values, std::string name = "test") {
    Array a;
    a.shape = std::move(shape);
    a.values = std::move(values);
    a.dtype = "float64";
    a.origin = "test: " + name;
    REQUIRE(a.values.size() == attnscope::element_count(a.shape));
    return a;
}

inline Array random_array(std::mt19937& rng, std::vector<std::size_t> shape, double scale = 1.0) {
    std::normal_distribution<double> n(0.0, scale);
    std::vector<double> v(attnscope::element_count(shape));
    for (double& x : v) x = n(rng);
    return arr(std::move(shape), std::move(v));
}

inline Bundle bundle(std::initializer_list<std::pair<const std::string, Array>> arrays) {
    Bundle b;
    b.source = "test";
    b.arrays = arrays;
    return b;
}

template <typename T>
attnscope::Trace<T> run(const Bundle& b, const attnscope::Spec& spec) {
    return attnscope::attend(attnscope::make_problem<T>(b, spec));
}

// Largest |a - b| over two equally shaped tensors; equal infinities count as 0, and a
// NaN on one side only counts as infinite.
template <typename A, typename B>
double maxdiff(const A& a, const B& b) {
    REQUIRE(a.size() == b.size());
    double m = 0;
    auto ia = a.begin();
    auto ib = b.begin();
    for (; ia != a.end(); ++ia, ++ib) {
        double x = double(*ia), y = double(*ib);
        if (x == y || (std::isnan(x) && std::isnan(y))) continue;
        double d = std::fabs(x - y);
        m = std::max(m, std::isnan(d) ? std::numeric_limits<double>::infinity() : d);
    }
    return m;
}

// ---- fixtures and exact values (io tests) ----------------------------------------------

inline const std::string kFixtures = std::string(ATTNSCOPE_SOURCE_DIR) + "/tests/fixtures/";
inline std::string good(const std::string& name) { return kFixtures + "good/" + name; }
inline std::string bad(const std::string& name) { return kFixtures + "bad/" + name; }

inline constexpr double kInf = std::numeric_limits<double>::infinity();
inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

template <typename... T>
std::string cat(const T&... parts) {
    std::ostringstream s;
    (s << ... << parts);
    return s.str();
}

inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// A whole file, read without the code under test.
inline std::string slurp(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    REQUIRE_MESSAGE(in.good(), "cannot open fixture " << path << " (run scripts/make_fixtures.py)");
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

inline void spit(const std::string& path, const std::string& bytes) {
    std::ofstream out(path, std::ios::binary);
    out << bytes;
    REQUIRE(out.good());
}

// Exact equality: NaN matches NaN, and -0 does not match +0.
inline bool same(double a, double b) {
    if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
    return a == b && std::signbit(a) == std::signbit(b);
}

// Every value must match exactly; on failure, reports how many differ, the first
// difference and the largest one, with their flat (C-order) indices.
inline void check_values(const std::vector<double>& got, const std::vector<double>& want) {
    REQUIRE(got.size() == want.size());
    std::size_t differ = 0, first = 0, worst = 0;
    double maxdiff = 0;
    for (std::size_t k = 0; k < got.size(); ++k) {
        if (same(got[k], want[k])) continue;
        if (differ++ == 0) first = k;
        double d = std::fabs(got[k] - want[k]);
        if (std::isnan(d) || d == 0) d = kInf;  // NaN on one side, or a sign of zero
        if (d >= maxdiff) {
            maxdiff = d;
            worst = k;
        }
    }
    std::string report =
        differ == 0 ? "all equal"
                    : cat(differ, " of ", got.size(), " values differ; first at flat index ", first, ": got ",
                          got[first], ", expected ", want[first], "; maxdiff = ", maxdiff, " at flat index ", worst);
    CHECK_MESSAGE(differ == 0, report);
}

// The message of the exception of type E that `f` throws; any other outcome fails the
// check and gives "".
template <typename E, typename F>
std::string error_of(F&& f, const char* expected) {
    try {
        f();
    } catch (const E& e) {
        return e.what();
    } catch (const std::exception& e) {
        FAIL_CHECK(cat("expected ", expected, ", got ", typeid(e).name(), ": ", e.what()));
        return "";
    }
    FAIL_CHECK(cat("expected ", expected, ", nothing was thrown"));
    return "";
}

template <typename F>
std::string input_error(F&& f) {
    return error_of<attnscope::InputError>(f, "attnscope::InputError");
}

template <typename F>
std::string memory_limit_error(F&& f) {
    return error_of<attnscope::MemoryLimitError>(f, "attnscope::MemoryLimitError");
}

// Each phrase must occur in the message (an empty message: input_error has already failed).
inline void check_message(const std::string& message, const std::vector<std::string>& phrases) {
    if (message.empty()) return;
    for (const std::string& p : phrases)
        CHECK_MESSAGE(contains(message, p), "message: " << message << "\nlacks: " << p);
}

// A .npy file built from a header dict text and data bytes (format 1.0 unless asked).
inline std::string make_npy(const std::string& dict, const std::string& data, int version = 1) {
    std::size_t pre = version == 1 ? 10 : 12;
    std::string text = dict;
    text.append((64 - (pre + text.size() + 1) % 64) % 64, ' ');
    text += '\n';
    std::string out("\x93NUMPY", 6);
    out += char(version);
    out += '\0';
    for (std::size_t k = 0; k < pre - 8; ++k) out += char(text.size() >> (8 * k) & 0xff);
    return out + text + data;
}

// Runs `f` in a child process and returns its exit status (or 128 + signal).
template <typename F>
int in_child(F&& f) {
    std::cout.flush();
    std::cerr.flush();
    pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) ::_exit(f());
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

inline bool have_numpy() { return std::system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") == 0; }

// Every bit the same (NaN payloads and the sign of zero included).
inline bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

inline bool exists(const std::string& path) { return std::filesystem::exists(path); }

// ---- the known arrays (scripts/make_fixtures.py writes the same) -------------------------

// A2 = np.arange(6).reshape(2, 3) * 0.5 - 1
inline const std::vector<double> kA2 = {-1, -0.5, 0, 0.5, 1, 1.5};

// A3 = np.arange(24).reshape(2, 3, 4) * 0.25 - 3
inline std::vector<double> a3() {
    std::vector<double> v;
    for (int i = 0; i < 24; ++i) v.push_back(i * 0.25 - 3);
    return v;
}

// TOKENS, in UTF-8: "<s>", "the", "héllo", "日本", an emoji (U+1F600), "".
inline const std::vector<std::string> kTokens = {
    "<s>", "the", "h\xc3\xa9llo", "\xe6\x97\xa5\xe6\x9c\xac", "\xf0\x9f\x98\x80", ""};

// ---- computed runs and their printed text (views tests) ---------------------------------

// A computed run and its view; the view borrows from the trace, so they live together
// (behind a pointer, so the trace is never moved).
struct Computed {
    attnscope::Problem<double> problem;
    attnscope::Trace<double> trace;
    attnscope::TraceView view;
};

inline std::unique_ptr<Computed> compute(const Bundle& b, const attnscope::Spec& s,
                                         const attnscope::Compute& how = {}) {
    auto c = std::make_unique<Computed>();
    c->problem = attnscope::make_problem<double>(b, s);
    c->trace = attnscope::attend(c->problem, how);
    c->view = attnscope::view_of("test", c->problem, c->trace);
    return c;
}

// The n x n identity.
inline Array eye(std::size_t n) {
    std::vector<double> v(n * n, 0.0);
    for (std::size_t i = 0; i < n; ++i) v[i * n + i] = 1.0;
    return arr({n, n}, v);
}

// A random problem for the views: 1..3 batch items, self or cross, 1..3 heads,
// random key padding (sometimes a whole item) and causal masks, scale default or random.
// (test_properties.cpp draws its own RandomCase.)
struct ViewCase {
    Bundle bundle;
    attnscope::Spec spec;
};

inline ViewCase random_view_case(unsigned seed) {
    std::mt19937 rng(seed);
    auto pick = [&](std::size_t lo, std::size_t hi) { return std::uniform_int_distribution<std::size_t>(lo, hi)(rng); };
    const std::size_t B = pick(1, 3), Tq = pick(1, 6), H = pick(1, 3), Dk = pick(1, 3), Dv = pick(1, 3);
    const bool cross = pick(0, 1) == 1;
    const std::size_t Tk = cross ? pick(1, 6) : Tq, Dm = pick(1, 5), Dkv = cross ? pick(1, 5) : Dm;
    ViewCase c;
    Bundle& b = c.bundle;
    b.source = "random";
    b.arrays["x"] = random_array(rng, {B, Tq, Dm});
    if (cross) b.arrays["memory"] = random_array(rng, {B, Tk, Dkv});
    b.arrays["W_Q"] = random_array(rng, {Dm, H * Dk});
    b.arrays["W_K"] = random_array(rng, {Dkv, H * Dk});
    b.arrays["W_V"] = random_array(rng, {Dkv, H * Dv});
    if (pick(0, 1)) {
        std::vector<double> pad(B * Tk);
        for (double& v : pad) v = pick(0, 3) == 0 ? 1.0 : 0.0;
        b.arrays["key_padding_mask"] = arr({B, Tk}, pad);
    }
    c.spec.heads = H;
    c.spec.causal = pick(0, 1) == 1;
    c.spec.causal_align = pick(0, 1) ? attnscope::CausalAlign::bottom_right : attnscope::CausalAlign::top_left;
    if (pick(0, 2) == 0) c.spec.scale = std::uniform_real_distribution<double>(0.05, 8.0)(rng);
    return c;
}

inline std::vector<std::string> lines_of(const std::string& text) {
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
}

// The number printed right after the first `marker` at or after `from` in `line`.
inline double number_after(const std::string& line, const std::string& marker, std::size_t from = 0) {
    const std::size_t at = line.find(marker, from);
    INFO("no '" << marker << "' in: " << line);
    REQUIRE(at != std::string::npos);
    const char* start = line.c_str() + at + marker.size();
    char* end = nullptr;
    const double v = std::strtod(start, &end);
    INFO("no number after '" << marker << "' in: " << line);
    REQUIRE(end != start);
    return v;
}

}  // namespace testutil
