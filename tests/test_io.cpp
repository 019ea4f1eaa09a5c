// io layer: .npy / .npz / JSON readers, the .npy / .npz writers and AtomicFile.
//
// Expected values are written here or come from numpy: the fixtures under
// tests/fixtures/ are written by scripts/make_fixtures.py, and good/expected.json holds
// numpy's own reading of every good .npy and .npz file. Files attnscope writes are read
// back by numpy through /usr/bin/python3. Nothing is compared with the code under test.
#include "attnscope/base/errors.hpp"
#include "attnscope/io/read.hpp"
#include "attnscope/io/write.hpp"
#include "attnscope/model/model.hpp"
#include "test_util.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <new>
#include <set>
#include <sstream>
#include <string>
#include <typeinfo>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define ATTNSCOPE_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ATTNSCOPE_TEST_ASAN 1
#endif
#endif

using namespace attnscope;
using testutil::TempDir;
namespace fs = std::filesystem;

namespace {

const std::string kFixtures = std::string(ATTNSCOPE_SOURCE_DIR) + "/tests/fixtures/";
std::string good(const std::string& name) { return kFixtures + "good/" + name; }
std::string bad(const std::string& name) { return kFixtures + "bad/" + name; }

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// ---- helpers --------------------------------------------------------------------------

template <typename... T>
std::string cat(const T&... parts) {
    std::ostringstream s;
    (s << ... << parts);
    return s.str();
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// A whole file, read without the code under test.
std::string slurp(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    REQUIRE_MESSAGE(in.good(), "cannot open fixture " << path << " (run scripts/make_fixtures.py)");
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

void spit(const std::string& path, const std::string& bytes) {
    std::ofstream out(path, std::ios::binary);
    out << bytes;
    REQUIRE(out.good());
}

// Exact equality: NaN matches NaN, and -0 does not match +0.
bool same(double a, double b) {
    if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
    return a == b && std::signbit(a) == std::signbit(b);
}

// Every value must match exactly; on failure, reports how many differ, the first
// difference and the largest one, with their flat (C-order) indices.
void check_values(const std::vector<double>& got, const std::vector<double>& want) {
    REQUIRE(got.size() == want.size());
    std::size_t differ = 0, first = 0, worst = 0;
    double maxdiff = 0;
    for (std::size_t k = 0; k < got.size(); ++k) {
        if (same(got[k], want[k])) continue;
        if (differ++ == 0) first = k;
        double d = std::fabs(got[k] - want[k]);
        if (std::isnan(d) || d == 0) d = kInf;  // NaN on one side, or a sign of zero
        if (d >= maxdiff) { maxdiff = d; worst = k; }
    }
    std::string report = differ == 0 ? "all equal"
        : cat(differ, " of ", got.size(), " values differ; first at flat index ", first, ": got ", got[first],
              ", expected ", want[first], "; maxdiff = ", maxdiff, " at flat index ", worst);
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
std::string input_error(F&& f) { return error_of<InputError>(f, "attnscope::InputError"); }

template <typename F>
std::string memory_limit_error(F&& f) { return error_of<MemoryLimitError>(f, "attnscope::MemoryLimitError"); }

// Each phrase must occur in the message (an empty message: input_error has already failed).
void check_message(const std::string& message, const std::vector<std::string>& phrases) {
    if (message.empty()) return;
    for (const std::string& p : phrases) CHECK_MESSAGE(contains(message, p), "message: " << message << "\nlacks: " << p);
}

// A .npy file built from a header dict text and data bytes (format 1.0 unless asked).
std::string make_npy(const std::string& dict, const std::string& data, int version = 1) {
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

// numpy's repr of a shape tuple, written independently of shape_str.
std::string tuple_repr(const std::vector<std::size_t>& shape) {
    if (shape.empty()) return "()";
    std::string s = "(";
    for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + (shape.size() == 1 ? ",)" : ")");
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

// Runs `write` (writing more than 4 KiB to `target`, then committing) in a child process
// whose files may not grow past 4 KiB, and says how it ended: 0 RuntimeFailure naming
// "TARGET: cannot write", 10 no limit, 11 no error, 12 wrong message, 13 other.
template <typename F>
int write_past_size_limit(const std::string& target, F&& write) {
    return in_child([&]() -> int {
        ::signal(SIGXFSZ, SIG_IGN);  // writes past the limit fail with EFBIG instead
        rlimit r{4096, 4096};
        if (::setrlimit(RLIMIT_FSIZE, &r) != 0) return 10;
        try {
            write();
            return 11;
        } catch (const RuntimeFailure& e) {
            return contains(e.what(), target + ": cannot write") ? 0 : 12;
        } catch (...) {
            return 13;
        }
    });
}
constexpr const char* kSizeLimitOutcomes = "0 RuntimeFailure, 10 no limit, 11 no error, 12 wrong message, 13 other";

bool have_numpy() { return std::system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") == 0; }

// ---- the known arrays (scripts/make_fixtures.py writes the same) -------------------------

// A2 = np.arange(6).reshape(2, 3) * 0.5 - 1
const std::vector<double> kA2 = {-1, -0.5, 0, 0.5, 1, 1.5};

// A3 = np.arange(24).reshape(2, 3, 4) * 0.25 - 3
std::vector<double> a3() {
    std::vector<double> v;
    for (int i = 0; i < 24; ++i) v.push_back(i * 0.25 - 3);
    return v;
}

// TOKENS, in UTF-8: "<s>", "the", "héllo", "日本", an emoji (U+1F600), "".
const std::vector<std::string> kTokens = {"<s>", "the", "h\xc3\xa9llo", "\xe6\x97\xa5\xe6\x9c\xac",
                                          "\xf0\x9f\x98\x80", ""};

struct Expected {
    std::string file, dtype;
    std::vector<std::size_t> shape;
    std::vector<double> values;
};

// Reads each fixture and checks its dtype, shape, origin and values.
void check_fixtures(const std::vector<Expected>& cases) {
    for (const Expected& e : cases) {
        CAPTURE(e.file);
        Array a = parse_npy(slurp(good(e.file)), e.file);
        CHECK(a.dtype == e.dtype);
        CHECK(a.shape == e.shape);
        CHECK(a.origin == e.file);
        CHECK(a.strings.empty());
        check_values(a.doubles(), e.values);
    }
}

}  // namespace

// ---- .npy: dtypes, layouts, header versions --------------------------------------------

TEST_CASE("io: every dtype loads with its shape and exact values") {
    const std::vector<Expected> cases = {
        {"float16.npy", "float16", {2, 3}, kA2},
        {"float32.npy", "float32", {2, 3}, kA2},
        {"float64.npy", "float64", {2, 3}, kA2},
        {"float32_3d.npy", "float32", {2, 3, 4}, a3()},
        {"int8.npy", "int8", {2, 3}, {-128, -1, 0, 1, 2, 127}},
        {"int16.npy", "int16", {2, 3}, {-32768, -1, 0, 1, 256, 32767}},
        {"int32.npy", "int32", {2, 3}, {-2147483648.0, -1, 0, 1, 65536, 2147483647}},
        {"int64.npy", "int64", {2, 3}, {-0x1p63, -1, 0, 1, 0x1p32, 0x1p53}},
        {"uint8.npy", "uint8", {2, 3}, {0, 1, 2, 3, 128, 255}},
        {"uint16.npy", "uint16", {2, 3}, {0, 1, 2, 3, 256, 65535}},
        {"uint32.npy", "uint32", {2, 3}, {0, 1, 2, 3, 65536, 4294967295.0}},
        {"uint64.npy", "uint64", {2, 3}, {0, 1, 2, 3, 0x1p32, 0x1p63}},
        {"bool.npy", "bool", {2, 3}, {1, 0, 1, 0, 0, 1}},
    };
    check_fixtures(cases);
}

TEST_CASE("io: float16 subnormals, the largest finite value, infinities, NaN and -0") {
    Array a = parse_npy(slurp(good("float16_special.npy")), "float16_special.npy");
    CHECK(a.shape == std::vector<std::size_t>{7});
    check_values(a.doubles(), {0x1p-24, 0x1p-14, 65504, -kInf, kInf, kNaN, -0.0});
}

TEST_CASE("io: big-endian files give the same values as little-endian ones") {
    const std::vector<Expected> cases = {
        {"be_f8.npy", "float64", {2, 3}, kA2},
        {"be_f2.npy", "float16", {2, 3}, kA2},
        {"be_i4.npy", "int32", {2, 3}, {-2147483648.0, -1, 0, 1, 65536, 2147483647}},
        {"be_u2.npy", "uint16", {2, 3}, {0, 1, 2, 3, 256, 65535}},
    };
    check_fixtures(cases);
    Array t = parse_npy(slurp(good("tokens_be_U5.npy")), "tokens_be_U5.npy");
    CHECK(t.strings == kTokens);
}

TEST_CASE("io: Fortran-order files give C-order values") {
    std::vector<double> i2;  // (np.arange(24) - 12).reshape(2, 3, 4)
    for (int i = 0; i < 24; ++i) i2.push_back(i - 12);
    const std::vector<Expected> cases = {
        {"fortran_f8_2d.npy", "float64", {2, 3}, kA2},
        {"fortran_f4_3d.npy", "float32", {2, 3, 4}, a3()},
        {"fortran_i2_3d.npy", "int16", {2, 3, 4}, i2},
        {"fortran_empty_2x0_f8.npy", "float64", {2, 0}, {}},  // fortran_order True, written by hand
    };
    check_fixtures(cases);
    Array t = parse_npy(slurp(good("fortran_tokens_2d.npy")), "fortran_tokens_2d.npy");
    CHECK(t.shape == std::vector<std::size_t>{2, 3});
    CHECK(t.strings == kTokens);
}

TEST_CASE("io: 0-d and empty arrays") {
    Array s = parse_npy(slurp(good("scalar_f8.npy")), "s");
    CHECK(s.shape.empty());
    CHECK(s.ndim() == 0);
    check_values(s.doubles(), {3.5});

    Array i = parse_npy(slurp(good("scalar_i4.npy")), "i");
    CHECK(i.shape.empty());
    CHECK(i.dtype == "int32");
    check_values(i.doubles(), {-7});

    Array e = parse_npy(slurp(good("empty_0x3_f4.npy")), "e");
    CHECK(e.shape == std::vector<std::size_t>{0, 3});
    CHECK(e.dtype == "float32");
    CHECK(e.count() == 0);

    Array f = parse_npy(slurp(good("empty_2x0_f8.npy")), "f");  // float64, C order
    CHECK(f.shape == std::vector<std::size_t>{2, 0});
    CHECK(f.dtype == "float64");
    CHECK(f.count() == 0);
}

TEST_CASE("io: '<U5' text arrays give their strings in UTF-8") {
    Array a = parse_npy(slurp(good("tokens_U5.npy")), "tokens");
    CHECK(a.is_text());
    CHECK(a.dtype == "text");
    CHECK(a.shape == std::vector<std::size_t>{6});
    CHECK(a.strings == kTokens);
    CHECK(a.count() == 0);

    Array b = parse_npy(slurp(good("tokens_U5_2d.npy")), "tokens2");
    CHECK(b.shape == std::vector<std::size_t>{2, 3});
    CHECK(b.strings == kTokens);

    // A code point past U+10FFFF is refused, not encoded.
    std::string bytes = make_npy("{'descr': '<U1', 'fortran_order': False, 'shape': (1,), }",
                                 std::string("\x00\x00\x11\x00", 4));
    check_message(input_error([&] { parse_npy(bytes, "bad_text"); }),
                  {"bad_text: ", "text element 0 is not valid Unicode"});
}

TEST_CASE("io: format versions 2.0 and 3.0") {
    for (const char* file : {"v2_f8.npy", "v3_f8.npy"}) {
        CAPTURE(file);
        std::string bytes = slurp(good(file));
        REQUIRE(bytes.size() > 8);
        CHECK(int(bytes[6]) == (std::string(file) == "v2_f8.npy" ? 2 : 3));  // the fixture is what it claims
        Array a = parse_npy(bytes, file);
        CHECK(a.shape == std::vector<std::size_t>{2, 3});
        check_values(a.doubles(), kA2);
    }
}

TEST_CASE("io: header lengths whose low byte is >= 0x80 are valid") {
    for (const char* file : {"header_len_0xb6.npy", "header_len_0x1f6.npy"}) {
        CAPTURE(file);
        std::string bytes = slurp(good(file));
        CHECK(static_cast<unsigned char>(bytes[8]) >= 0x80);  // the fixture is what it claims
        Array a = parse_npy(bytes, file);
        CHECK(a.dtype == "float32");
        CHECK(a.shape == std::vector<std::size_t>{2, 3});
        check_values(a.doubles(), kA2);
    }
}

TEST_CASE("io: header details: quotes, Python 2 longs, key order, the 32-dimension limit") {
    const std::string data = std::string(6 * 8, '\0');
    // Double quotes, keys in another order, 'L' suffixes: all valid Python literals.
    Array a = parse_npy(make_npy("{\"shape\": (2L, 3L), \"fortran_order\": False, \"descr\": \"<f8\"}", data), "q");
    CHECK(a.shape == std::vector<std::size_t>{2, 3});
    check_values(a.doubles(), std::vector<double>(6, 0.0));

    std::string ones32 = "(", ones33;
    for (int i = 0; i < 32; ++i) ones32 += "1, ";
    ones33 = ones32 + "1)";
    ones32 += ")";
    Array d32 = parse_npy(make_npy("{'descr': '<f8', 'fortran_order': False, 'shape': " + ones32 + ", }",
                                   std::string(8, '\0')), "d32");
    CHECK(d32.ndim() == 32);

    struct Bad { std::string dict, phrase; };
    const std::vector<Bad> cases = {
        {"{'descr': '<f8', 'fortran_order': False, 'shape': " + ones33 + ", }", "more than 32 dimensions"},
        {"{'descr': '<f8', 'fortran_order': False, 'shape': (6,), 'extra': 1, }", "unexpected header key 'extra'"},
        {"{'descr': '<f8', 'fortran_order': False, }", "header lacks one of 'descr', 'fortran_order', 'shape'"},
        {"{'descr': '<f8', 'fortran_order': 0, 'shape': (6,), }", "'fortran_order' must be True or False"},
        {"{'descr': '<f3', 'fortran_order': False, 'shape': (6,), }", "unsupported dtype '<f3'"},
        {"{'descr': '<f8', 'fortran_order': False, 'shape': (6.0,), }", "shape must be a tuple of non-negative integers"},
        {"{'descr': '<f8', 'fortran_order': False, 'shape': (99999999999999999999999,), }", "a shape entry is too large"},
        {"['descr', '<f8']", "expected '{'"},
    };
    for (const Bad& b : cases) {
        CAPTURE(b.dict);
        check_message(input_error([&] { parse_npy(make_npy(b.dict, data), "hdr.npy"); }),
                      {"hdr.npy: ", b.phrase});
    }
    // Format 2.0 needs a 4-byte header length.
    check_message(input_error([&] { parse_npy(std::string("\x93NUMPY\x02\x00\x10\x00", 10), "v2.npy"); }),
                  {"v2.npy: truncated .npy header"});
}

TEST_CASE("io: after the header dict only blanks, comments and line continuations, as numpy allows") {
    // numpy reads the header with ast.literal_eval: after the dict, Python's blanks (space,
    // tab, form feed, \r, \n), '#' comments and a backslash ending a line are ignored;
    // anything else is "Cannot parse header". Each case is also handed to numpy below.
    const std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
    const std::string data("\x00\x00\x80\x3f\x00\x00\x00\x40", 8);  // 1.0f, 2.0f
    struct Case { std::string name, header; bool ok; std::string found; };
    const std::vector<Case> cases = {
        {"spaces", dict + "     ", true, ""},
        {"no_trailing_comma", "{'descr': '<f4', 'fortran_order': False, 'shape': (2,)}", true, ""},
        {"tab_formfeed_crlf", dict + "\t\f\r\n  ", true, ""},
        {"comment", dict + "  # written by hand", true, ""},
        {"continuation", dict + " \\\n  ", true, ""},
        {"junk", dict + " junk", false, "found \"junk\""},
        {"junk_after_comment_line", dict + " # note\n junk", false, "found \"junk\""},
        {"semicolon", dict + ";", false, "found \";\""},
        {"second_dict", dict + " {}", false, "found \"{}\""},
        {"comma", dict + ",", false, "found \",\""},
        {"vertical_tab", dict + "\v", false, "found \"\\x0b\""},
        {"nul", dict + std::string(3, '\0'), false, "found \"\\x00\\x00\\x00\""},
        {"nul_in_comment", dict + " # a" + std::string(1, '\0'), false, "found \"\\x00\""},
        {"backslash_not_ending_a_line", dict + " \\ ", false, "found \"\\\\\""},
        {"long_junk", dict + " 0123456789abcdefghijklmnop", false, "found \"0123456789abcdefghij\"..."},
    };
    TempDir dir;
    for (const Case& c : cases) {
        CAPTURE(c.name);
        const std::string bytes = make_npy(c.header, data);
        spit(dir / (c.name + ".npy"), bytes);
        if (c.ok) {
            Array a = parse_npy(bytes, "t.npy: x");
            check_values(a.doubles(), {1, 2});
        } else {
            const std::string message = input_error([&] { parse_npy(bytes, "t.npy: x"); });
            check_message(message, {"t.npy: x: not a valid .npy header: expected only spaces and a newline after the "
                                    "closing '}', ",
                                    c.found});
            CHECK(message.find('\n') == std::string::npos);  // one line
        }
    }
    if (!have_numpy()) {
        MESSAGE("skipped the numpy check: /usr/bin/python3 cannot import numpy");
        return;
    }
    // numpy's verdict on every file: "name ok" or "name refused".
    spit(dir / "check.py", R"PY(
import sys, numpy as np
for name in sys.argv[2:]:
    try:
        ok = np.load("%s/%s.npy" % (sys.argv[1], name)).tolist() == [1.0, 2.0]
    except ValueError:
        ok = False
    print(name, "ok" if ok else "refused")
)PY");
    std::string command = "/usr/bin/python3 '" + (dir / "check.py") + "' '" + dir.path.string() + "'";
    std::string want;
    for (const Case& c : cases) {
        command += " " + c.name;
        want += c.name + (c.ok ? " ok\n" : " refused\n");
    }
    const int rc = std::system((command + " > '" + (dir / "numpy.log") + "' 2>&1").c_str());
    CHECK(rc == 0);
    CHECK(slurp(dir / "numpy.log") == want);
}

// ---- numpy as the oracle for every good file -------------------------------------------

namespace {

double expected_number(const nlohmann::json& v) {
    if (v.is_string()) return v == "nan" ? kNaN : v == "inf" ? kInf : -kInf;
    return v.get<double>();
}

// One array against numpy's description of it: {"shape", "dtype", "values" | "strings"}.
void check_against_numpy(const Array& a, const nlohmann::json& e) {
    CHECK(a.shape == e.at("shape").get<std::vector<std::size_t>>());
    CHECK(a.dtype == e.at("dtype").get<std::string>());
    if (e.contains("strings")) {
        CHECK(a.strings == e.at("strings").get<std::vector<std::string>>());
        CHECK(a.count() == 0);
    } else if (e.contains("sum")) {  // a large array of integral values: its exact sum
        double sum = 0;
        for (double v : a.doubles()) sum += v;
        CHECK(a.count() == element_count(a.shape));
        CHECK(sum == e.at("sum").get<double>());
    } else {
        std::vector<double> want;
        for (const auto& v : e.at("values")) want.push_back(expected_number(v));
        check_values(a.doubles(), want);
        CHECK(a.strings.empty());
    }
}

}  // namespace

TEST_CASE("io: every good .npy and .npz file reads as numpy reads it") {
    auto expected = nlohmann::json::parse(slurp(good("expected.json")));
    REQUIRE(expected.size() >= 40);
    for (auto it = expected.begin(); it != expected.end(); ++it) {
        const std::string& file = it.key();
        CAPTURE(file);
        if (file.size() > 4 && file.compare(file.size() - 4, 4, ".npz") == 0) {
            Bundle b = parse_npz(slurp(good(file)), file);
            std::set<std::string> names, want;
            for (const auto& [name, arr] : b.arrays) names.insert(name);
            for (auto m = it.value().begin(); m != it.value().end(); ++m) want.insert(m.key());
            CHECK(names == want);
            for (auto m = it.value().begin(); m != it.value().end(); ++m) {
                CAPTURE(m.key());
                REQUIRE(b.arrays.count(m.key()));
                check_against_numpy(b.arrays.at(m.key()), m.value());
            }
        } else {
            check_against_numpy(parse_npy(slurp(good(file)), file), it.value());
        }
    }
}

// ---- .npz ------------------------------------------------------------------------------

TEST_CASE("io: np.savez and np.savez_compressed archives give their names and values") {
    for (const char* file : {"savez.npz", "savez_compressed.npz", "savez_comment.npz"}) {
        CAPTURE(file);
        const std::string path = good(file);
        Bundle b = parse_npz(slurp(path), path);
        CHECK(b.source == path);
        std::set<std::string> names;
        for (const auto& [name, arr] : b.arrays) names.insert(name);
        CHECK(names == std::set<std::string>{"x", "expected/Q", "mask", "query_tokens", "ids", "random"});
        REQUIRE(names.count("expected/Q"));

        const Array& q = b.arrays.at("expected/Q");
        CHECK(q.origin == path + ": expected/Q");
        CHECK(q.dtype == "float32");
        CHECK(q.shape == std::vector<std::size_t>{2, 3, 4});
        check_values(q.doubles(), a3());

        check_values(b.arrays.at("x").doubles(), kA2);
        check_values(b.arrays.at("mask").doubles(), {1, 0, 1, 0, 0, 1});
        CHECK(b.arrays.at("query_tokens").strings == kTokens);
        CHECK(b.arrays.at("ids").dtype == "int64");
        check_values(b.arrays.at("ids").doubles(), {-0x1p63, -1, 0, 1, 0x1p32, 0x1p53});
        CHECK(b.arrays.at("random").shape == std::vector<std::size_t>{3, 5});
    }
}

TEST_CASE("io: a zip64 archive with zip64 fields in its central directory") {
    // x.npy has size, compressed size and offset in its zip64 extra field; expected/y.npy
    // only its offset (the other two are in the 32-bit fields).
    const std::string path = good("zip64.npz");
    Bundle b = parse_npz(slurp(path), path);
    REQUIRE(b.arrays.size() == 2);
    REQUIRE(b.arrays.count("x"));
    REQUIRE(b.arrays.count("expected/y"));
    check_values(b.arrays.at("x").doubles(), kA2);
    CHECK(b.arrays.at("expected/y").dtype == "int16");
    check_values(b.arrays.at("expected/y").doubles(), {0, 1, 2, 3});
}

// ---- writers: round trips through the readers and through numpy --------------------------

namespace {

// Test data for the writers: C-order values k * 0.5 - 3, the first six replaced by
// NaN, -inf, +inf, -0, the smallest subnormal and the largest finite value.
template <typename T>
std::vector<T> writer_values(std::size_t n) {
    std::vector<T> v(n);
    for (std::size_t k = 0; k < n; ++k) v[k] = T(double(k) * 0.5 - 3);
    const T special[] = {std::numeric_limits<T>::quiet_NaN(), -std::numeric_limits<T>::infinity(),
                         std::numeric_limits<T>::infinity(), T(-0.0), std::numeric_limits<T>::denorm_min(),
                         std::numeric_limits<T>::max()};
    for (std::size_t k = 0; k < n && k < 6; ++k) v[k] = special[k];
    return v;
}

std::vector<unsigned char> writer_bools(std::size_t n) {
    std::vector<unsigned char> v(n);
    for (std::size_t k = 0; k < n; ++k) v[k] = k % 3 == 0;
    return v;
}

// Owns the data an OutArray points to.
struct TestArray {
    std::vector<float> f32;
    std::vector<double> f64;
    std::vector<unsigned char> b;
    OutArray out;

    TestArray(std::string name, DType dtype, std::vector<std::size_t> shape) {
        std::size_t n = element_count(shape);
        const void* data = nullptr;
        if (dtype == DType::float32) { f32 = writer_values<float>(n); data = f32.data(); }
        if (dtype == DType::float64) { f64 = writer_values<double>(n); data = f64.data(); }
        if (dtype == DType::boolean) { b = writer_bools(n); data = b.data(); }
        out = OutArray{std::move(name), std::move(shape), dtype, data};
    }
    TestArray(const TestArray&) = delete;
    std::string raw() const { return std::string(static_cast<const char*>(out.data), element_count(out.shape) * dtype_size(out.dtype)); }
    std::vector<double> as_doubles() const {
        if (out.dtype == DType::float32) return std::vector<double>(f32.begin(), f32.end());
        if (out.dtype == DType::float64) return f64;
        return std::vector<double>(b.begin(), b.end());
    }
    std::string dtype_name() const {
        return out.dtype == DType::float32 ? "float32" : out.dtype == DType::float64 ? "float64" : "bool";
    }
};

const std::vector<std::vector<std::size_t>> kWriterShapes = {
    {}, {0}, {1}, {6}, {2, 3}, {0, 3}, {3, 0}, {2, 0, 3}, {2, 3, 4, 5}, {1, 1, 1, 1}, {2, 3, 0, 5}};

}  // namespace

TEST_CASE("io: write_npy then parse_npy gives identical bytes and values") {
    TempDir dir;
    for (DType dtype : {DType::float32, DType::float64, DType::boolean}) {
        for (const auto& shape : kWriterShapes) {
            TestArray t("a", dtype, shape);
            CAPTURE(t.dtype_name());
            CAPTURE(tuple_repr(shape));
            const std::string path = dir / "a.npy";
            {
                AtomicFile f(path);
                write_npy(f, t.out);
                f.commit();
            }
            std::string bytes = slurp(path);
            CHECK(bytes == npy_header(t.out) + t.raw());
            Array a = parse_npy(bytes, path);
            CHECK(a.shape == shape);
            CHECK(a.dtype == t.dtype_name());
            check_values(a.doubles(), t.as_doubles());
        }
    }
}

TEST_CASE("io: write_npz then parse_npz gives every member back") {
    TempDir dir;
    std::vector<std::unique_ptr<TestArray>> arrays;
    arrays.push_back(std::make_unique<TestArray>("x", DType::float32, std::vector<std::size_t>{2, 3, 4, 5}));
    arrays.push_back(std::make_unique<TestArray>("expected/Q", DType::float64, std::vector<std::size_t>{2, 3}));
    arrays.push_back(std::make_unique<TestArray>("expected/mask", DType::boolean, std::vector<std::size_t>{2, 3, 3}));
    arrays.push_back(std::make_unique<TestArray>("empty", DType::float64, std::vector<std::size_t>{0, 3}));
    arrays.push_back(std::make_unique<TestArray>("scalar", DType::float32, std::vector<std::size_t>{}));
    std::vector<OutArray> out;
    for (const auto& a : arrays) out.push_back(a->out);

    const std::string path = dir / "all.npz";
    {
        AtomicFile f(path);
        write_npz(f, out);
        f.commit();
    }
    Bundle b = parse_npz(slurp(path), path);
    CHECK(b.arrays.size() == arrays.size());
    for (const auto& t : arrays) {
        CAPTURE(t->out.name);
        REQUIRE(b.arrays.count(t->out.name));
        const Array& a = b.arrays.at(t->out.name);
        CHECK(a.origin == path + ": " + t->out.name);
        CHECK(a.shape == t->out.shape);
        CHECK(a.dtype == t->dtype_name());
        check_values(a.doubles(), t->as_doubles());
    }

    // An empty archive is still an archive.
    const std::string empty = dir / "empty.npz";
    {
        AtomicFile f(empty);
        write_npz(f, {});
        f.commit();
    }
    CHECK(parse_npz(slurp(empty), empty).arrays.empty());
}

TEST_CASE("io: numpy reads what write_npy and write_npz wrote") {
    if (!have_numpy()) {
        MESSAGE("skipped: /usr/bin/python3 cannot import numpy");
        return;
    }
    TempDir dir;
    TestArray f32("x", DType::float32, {2, 3, 4, 5});
    TestArray f64("expected/Q", DType::float64, {2, 3});
    TestArray empty("empty", DType::float64, {0, 3});
    TestArray flag("flag", DType::boolean, {});
    TestArray mask("mask", DType::boolean, {5});
    for (const TestArray* t : {&f32, &f64, &empty, &flag, &mask}) {
        std::string file = t->out.name == "expected/Q" ? "Q" : t->out.name;
        AtomicFile f(dir / (file + ".npy"));
        write_npy(f, t->out);
        f.commit();
    }
    {
        AtomicFile f(dir / "all.npz");
        write_npz(f, {f32.out, f64.out, empty.out, flag.out, mask.out});
        f.commit();
    }
    // The oracle recomputes every array with numpy, independently of the C++ above.
    spit(dir / "check.py", R"PY(
import sys, zipfile
import numpy as np

d = sys.argv[1]

def values(n, dtype):
    v = (np.arange(n) * 0.5 - 3).astype(dtype)
    info = np.finfo(dtype)
    special = np.array([np.nan, -np.inf, np.inf, -0.0, info.smallest_subnormal, info.max], dtype=dtype)
    v[:min(n, 6)] = special[:min(n, 6)]
    return v

def bools(n):
    return np.arange(n) % 3 == 0

want = {
    "x": values(120, np.float32).reshape(2, 3, 4, 5),
    "expected/Q": values(6, np.float64).reshape(2, 3),
    "empty": values(0, np.float64).reshape(0, 3),
    "flag": bools(1).reshape(()),
    "mask": bools(5),
}

def same(name, got):
    w = want[name]
    assert got.dtype == w.dtype, (name, got.dtype, w.dtype)
    assert got.shape == w.shape, (name, got.shape, w.shape)
    assert np.array_equal(got, w, equal_nan=w.dtype.kind == "f"), (name, got, w)
    assert np.array_equal(np.signbit(got), np.signbit(w)) if w.dtype.kind == "f" else True, name

for name in want:
    path = "%s/%s.npy" % (d, "Q" if name == "expected/Q" else name)
    with open(path, "rb") as f:
        assert np.lib.format.read_magic(f) == (1, 0), path
    same(name, np.load(path))

with zipfile.ZipFile(d + "/all.npz") as z:
    assert z.testzip() is None  # every CRC-32 checks
    assert [i.filename for i in z.infolist()] == [n + ".npy" for n in want], z.namelist()
with np.load(d + "/all.npz") as z:
    assert sorted(z.files) == sorted(want), z.files
    for name in want:
        same(name, z[name])
print("numpy agrees")
)PY");
    std::string log = dir / "check.log";
    int rc = std::system(("/usr/bin/python3 '" + (dir / "check.py") + "' '" + dir.path.string() + "' > '" + log +
                          "' 2>&1").c_str());
    const std::string output = slurp(log);  // read now: INFO is evaluated lazily, inside the reporter
    INFO("python output:\n" << output);
    CHECK(rc == 0);
}

TEST_CASE("io: npy_header is 64-byte aligned and spells numpy's header dict") {
    const std::vector<std::pair<DType, std::string>> dtypes = {
        {DType::float32, "<f4"}, {DType::float64, "<f8"}, {DType::boolean, "|b1"}};
    std::vector<std::vector<std::size_t>> shapes = kWriterShapes;
    shapes.push_back({4294967296, 0});
    shapes.push_back(std::vector<std::size_t>(32, 1));
    for (const auto& [dtype, descr] : dtypes) {
        for (const auto& shape : shapes) {
            CAPTURE(descr);
            CAPTURE(tuple_repr(shape));
            std::string h = npy_header(OutArray{"a", shape, dtype, nullptr});
            REQUIRE(h.size() > 10);
            CHECK(h.size() % 64 == 0);
            CHECK(h.substr(0, 8) == std::string("\x93NUMPY\x01\x00", 8));
            std::size_t header_len = std::size_t(static_cast<unsigned char>(h[8])) |
                                     std::size_t(static_cast<unsigned char>(h[9])) << 8;
            CHECK(header_len == h.size() - 10);
            const std::string dict = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + tuple_repr(shape) + ", }";
            CHECK(h.substr(10, dict.size()) == dict);
            CHECK(h.find_first_not_of(' ', 10 + dict.size()) == h.size() - 1);  // spaces, then the newline
            CHECK(h.back() == '\n');
        }
    }
}

TEST_CASE("io: npy_header's dict text matches np.save's for the same array") {
    struct Ref { const char* file; DType dtype; std::vector<std::size_t> shape; };
    const std::vector<Ref> refs = {
        {"ref_f4_2x3.npy", DType::float32, {2, 3}},
        {"ref_f8_5.npy", DType::float64, {5}},
        {"ref_b1_scalar.npy", DType::boolean, {}},
        {"ref_f8_2x0x3x1.npy", DType::float64, {2, 0, 3, 1}},
        {"ref_f4_2x3x4x5.npy", DType::float32, {2, 3, 4, 5}},
    };
    for (const Ref& r : refs) {
        CAPTURE(r.file);
        std::string numpy = slurp(good(r.file));
        std::string ours = npy_header(OutArray{"a", r.shape, r.dtype, nullptr});
        // The dict text, from the '{' after the 10-byte preamble to the closing '}'.
        // (np.save adds spare spaces after it so the shape can grow in place; the
        // padding is not part of the format, so only the text is compared.)
        std::size_t numpy_end = numpy.find('}'), ours_end = ours.find('}');
        REQUIRE(numpy_end != std::string::npos);
        REQUIRE(ours_end != std::string::npos);
        CHECK(ours.substr(0, 8) == numpy.substr(0, 8));  // magic and version 1.0
        CHECK(ours.substr(10, ours_end - 9) == numpy.substr(10, numpy_end - 9));
        CHECK(numpy.size() - std::size_t(numpy.find('\n') + 1) == element_count(r.shape) * dtype_size(r.dtype));
    }
}

// ---- JSON ------------------------------------------------------------------------------

TEST_CASE("io: a JSON bundle: nested lists, booleans, non-finite strings, tokens, empty lists") {
    const std::string path = good("bundle.json");
    Bundle b = parse_json_bundle(slurp(path), path);
    CHECK(b.source == path);
    CHECK(b.arrays.size() == 10);
    auto get = [&](const std::string& name) -> const Array& {
        CAPTURE(name);
        REQUIRE(b.arrays.count(name));
        return b.arrays.at(name);
    };
    using S = std::vector<std::size_t>;
    CHECK(get("x").shape == S{2, 3});
    CHECK(get("x").dtype == "json");
    CHECK(get("x").origin == path + ": x");
    check_values(get("x").doubles(), {1, 2.5, -3, 0.004, 0, 1e10});
    CHECK(get("W_Q").shape == S{3, 2, 2});
    check_values(get("W_Q").doubles(), {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
    CHECK(get("mask").shape == S{2, 2});
    check_values(get("mask").doubles(), {1, 0, 0, 1});
    CHECK(get("scores").shape == S{2, 2});
    check_values(get("scores").doubles(), {-kInf, 1.5, kNaN, kInf});
    CHECK(get("query_tokens").is_text());
    CHECK(get("query_tokens").shape == S{3});
    CHECK(get("query_tokens").strings == std::vector<std::string>{"<s>", "h\xc3\xa9llo", "\xf0\x9f\x98\x80"});
    CHECK(get("batch_tokens").shape == S{2, 2});
    CHECK(get("batch_tokens").strings == std::vector<std::string>{"a", "b", "c", "d"});
    CHECK(get("empty").shape == S{0});
    CHECK(get("empty").count() == 0);
    CHECK(get("empty_rows").shape == S{2, 0});
    CHECK(get("empty_rows").count() == 0);
    CHECK(get("empty_tokens").is_text());
    CHECK(get("empty_tokens").shape == S{0});
    CHECK(get("scalar").shape.empty());
    check_values(get("scalar").doubles(), {-2.25});
}

TEST_CASE("io: JSON spellings of non-finite numbers") {
    Bundle b = parse_json_bundle(R"({"v": ["inf", "+inf", "Infinity", "+Infinity", "-inf", "-Infinity", "nan", "NaN", -0.0]})",
                                 "nf.json");
    check_values(b.arrays.at("v").doubles(), {kInf, kInf, kInf, kInf, -kInf, -kInf, kNaN, kNaN, -0.0});
}

TEST_CASE("io: JSON errors name the source, the element path, what was expected and found") {
    struct Bad { std::string text; std::vector<std::string> phrases; };
    const std::vector<Bad> cases = {
        {R"({"x": [[1, 2, 3]], "W_Q": [[1, 2, 3], [4, 5]]})", {"W_Q[1]", "ragged array", "expected 3 elements", "found 2"}},
        {R"({"x": [[1, 2], [3, [4, 5]]]})", {"x[1][1]", "expected a number at this depth, found a list"}},
        {R"({"x": [[[1]], [2]]})", {"x[1][0]", "expected a list of 1 elements, found number 2"}},
        {R"({"x": [[1, 2, "a"]]})", {"x[0][2]", "expected a number, found string \"a\""}},
        {R"({"x": [[1, 2, {}]]})", {"x[0][2]", "expected a number, found an object"}},
        {R"({"x": [1.0, null]})", {"x[1]", "expected a number, found null", "\"nan\", \"inf\" or \"-inf\""}},
        {R"({"x": [1, 2,)", {"invalid JSON"}},
        {R"({"x": [1, NaN]})", {"invalid JSON"}},
        {R"([1, 2, 3])", {"expected a JSON object of named arrays", "found a list"}},
        {R"("x")", {"expected a JSON object of named arrays", "found string \"x\""}},
        {R"({"x": [1, 1e400]})", {"invalid JSON", "1e400"}},
        {R"({"query_tokens": ["a", 3]})", {"query_tokens[1]", "expected a string (token label), found number 3"}},
        {R"({"query_tokens": [["a"], "b"]})", {"query_tokens[1]", "ragged array"}},
    };
    for (const Bad& c : cases) {
        CAPTURE(c.text);
        std::string message = input_error([&] { parse_json_bundle(c.text, "in.json"); });
        CHECK_MESSAGE(message.rfind("in.json: ", 0) == 0, "message: " << message);
        check_message(message, c.phrases);
        CHECK(message.find('\n') == std::string::npos);  // one line
    }
}

TEST_CASE("io: JSON numbers beyond a double's range: too large is an error, too small is 0") {
    // numpy (float(text)) gives 0.0 for anything below the smallest subnormal.
    Bundle b = parse_json_bundle(R"({"x": [1e-400, -1e-400, 5e-324, 2.5e-310]})", "small.json");
    check_values(b.arrays.at("x").doubles(), {0.0, -0.0, 0x1p-1074, 2.5e-310});
    check_message(input_error([] { parse_json_bundle(R"({"x": [1.7976931348623159e308]})", "big.json"); }),
                  {"big.json: ", "out of range"});
}

TEST_CASE("io: JSON range checks go by the number's value, not by the sign of its exponent") {
    // 1 followed by 400 zeros, times 1e-10, is 1e390: too large for a double, like 1e400.
    const std::string huge = "1" + std::string(400, '0') + "e-10";
    std::string message = input_error([&] {
        Bundle b = parse_json_bundle("{\"x\": [" + huge + "]}", "huge.json");
        MESSAGE("1e390 written as 1" << std::string(3, '0') << "...e-10 was read as " << b.arrays.at("x").value(0));
    });
    check_message(message, {"huge.json: ", "out of range"});
    // 0.(400 zeros)1 times 1e5 is 1e-396: below the smallest subnormal, so 0 like 1e-400.
    const std::string tiny = "0." + std::string(400, '0') + "1e+5";
    try {
        Bundle t = parse_json_bundle("{\"x\": [" + tiny + "]}", "tiny.json");
        check_values(t.arrays.at("x").doubles(), {0.0});
    } catch (const InputError& e) {
        FAIL_CHECK(cat("1e-396 written as 0.000...1e+5 was refused: ", std::string(e.what()).substr(0, 80), "..."));
    }
}

TEST_CASE("io: JSON nesting is limited to 32 levels") {
    auto nested = [](int depth) { return std::string(std::size_t(depth), '[') + "1" + std::string(std::size_t(depth), ']'); };
    Bundle ok = parse_json_bundle("{\"x\": " + nested(32) + "}", "deep.json");
    CHECK(ok.arrays.at("x").ndim() == 32);
    check_message(input_error([&] { parse_json_bundle("{\"x\": " + nested(33) + "}", "deep.json"); }),
                  {"deep.json: x: ", "nested deeper than 32 levels"});
}

TEST_CASE("io: parse_json_array takes a nested list or an object with one entry") {
    Array a = parse_json_array(slurp(good("single_list.json")), "w.json: W");
    CHECK(a.shape == std::vector<std::size_t>{3, 2});
    check_values(a.doubles(), {1, 2, 3, 4, 5, 6});
    Array o = parse_json_array(slurp(good("single_object.json")), "o.json: W_O");
    CHECK(o.shape == std::vector<std::size_t>{2, 2});
    check_values(o.doubles(), {1, 0, 0, 1});
    Array s = parse_json_array("2.5", "s.json: s");
    CHECK(s.shape.empty());
    check_values(s.doubles(), {2.5});
    check_message(input_error([] { parse_json_array(R"({"a": [1], "b": [2]})", "two.json: W"); }),
                  {"two.json: W: ", "an object with 2 entries"});
    check_message(input_error([] { parse_json_array("[[1, 2], [3]]", "r.json: W"); }),
                  {"r.json: W[1]: ragged array"});
}

TEST_CASE("io: JSON element errors name the array once, then the element's indices") {
    struct Case { std::string text, origin, message; };
    const std::vector<Case> bundles = {
        {R"({"x": [1.0, null]})", "data.json",
         "data.json: x[1]: expected a number, found null (write non-finite values as \"nan\", \"inf\" or \"-inf\")"},
        {R"({"x": [[1], [2, 3]]})", "data.json",
         "data.json: x[1]: ragged array: expected 1 elements (as in the first list at this depth), found 2"},
        {R"({"x": "a"})", "data.json", "data.json: x: expected a number, found string \"a\""},
        {R"({"query_tokens": ["a", 3]})", "data.json",
         "data.json: query_tokens[1]: expected a string (token label), found number 3"},
    };
    for (const Case& c : bundles) {
        CAPTURE(c.text);
        CHECK(input_error([&] { parse_json_bundle(c.text, c.origin); }) == c.message);
    }
    // A file of one array: named as the option that read it; the entry's key as well
    // when it differs from that name.
    const std::vector<Case> arrays = {
        {"[1, [2]]", "w.json: W_Q", "w.json: W_Q[1]: ragged array: expected a number at this depth, found a list"},
        {"true false", "w.json: W_Q", "w.json: W_Q: invalid JSON at byte 5: unexpected data after the value"},
        {"\"a\"", "w.json: W_Q", "w.json: W_Q: expected a number, found string \"a\""},
        {R"({"W_Q": [1, "a"]})", "w.json: W_Q", "w.json: W_Q[1]: expected a number, found string \"a\""},
        {R"({"q": [1, "a"]})", "w.json: W_Q", "w.json: W_Q: q[1]: expected a number, found string \"a\""},
    };
    for (const Case& c : arrays) {
        CAPTURE(c.text);
        CHECK(input_error([&] { parse_json_array(c.text, c.origin); }) == c.message);
    }
}

TEST_CASE("io: a UTF-8 byte-order mark before the JSON is skipped") {
    const std::string bom = "\xEF\xBB\xBF";
    Bundle b = parse_json_bundle(bom + R"({"x": [[1, 2]]})", "bom.json");
    CHECK(b.arrays.at("x").shape == std::vector<std::size_t>{1, 2});
    check_values(b.arrays.at("x").doubles(), {1, 2});
    check_values(parse_json_array(bom + "[3, 4]", "bom.json: W").doubles(), {3, 4});
    check_values(parse_json_array(bom + " {\"W\": [5]}", "bom.json: W").doubles(), {5});
    check_values(parse_json_array(bom + "6", "bom.json: W").doubles(), {6});

    // Through the files and standard input, as the command line reads them.
    TempDir dir;
    spit(dir / "bundle.json", bom + "{\"x\": [[1, 2]], \"W_Q\": [[1], [0]]}\n");
    CHECK(load_bundle(dir / "bundle.json").arrays.size() == 2);
    spit(dir / "w.json", bom + "[[7], [8]]");
    check_values(load_array(dir / "w.json", "W_K").doubles(), {7, 8});
    std::istringstream in(bom + R"({"x": [[1, 2]]})");
    std::streambuf* saved = std::cin.rdbuf(in.rdbuf());
    std::string error;
    Bundle piped;
    try {
        piped = load_bundle("-");
    } catch (const InputError& e) {
        error = e.what();
    }
    std::cin.rdbuf(saved);
    CHECK(error == "");
    CHECK(piped.arrays.count("x") == 1);

    // Byte offsets still count the mark; only one mark, only at the start, is skipped.
    check_message(input_error([&] { parse_json_bundle(bom + R"({"x": [1,]})", "bom.json"); }),
                  {"bom.json: invalid JSON at byte 12: invalid number"});
    check_message(input_error([&] { parse_json_bundle(bom + bom + "{}", "two.json"); }),
                  {"two.json: invalid JSON at byte 3"});
    check_message(input_error([&] { parse_json_bundle(" " + bom + "{}", "late.json"); }),
                  {"late.json: invalid JSON at byte 1"});
    check_message(input_error([&] { parse_json_array(bom, "only.json: W"); }), {"only.json: W: invalid JSON", "empty input"});
}

// ---- bad files -------------------------------------------------------------------------

TEST_CASE("io: every bad fixture throws an InputError naming the file and the problem") {
    enum class Via { array, bundle };
    struct Bad { std::string file; Via via; std::vector<std::string> phrases; };
    const std::vector<Bad> cases = {
        {"complex_c16.npy", Via::array, {"unsupported dtype '<c16'"}},
        {"object.npy", Via::array, {"unsupported dtype '|O'", "object arrays hold Python objects, not numbers"}},
        {"structured.npy", Via::array, {"structured (record) dtypes are not supported"}},
        {"datetime.npy", Via::array, {"unsupported dtype '<M8[D]'"}},
        {"truncated.npy", Via::array, {"shape (2, 3) of float64 needs 48 data bytes, file has 43 (truncated)"}},
        {"trailing.npy", Via::array, {"needs 48 data bytes, file has 56 (trailing bytes)"}},
        {"header_past_end.npy", Via::array, {"truncated .npy file: header claims", "file has 50 after the preamble"}},
        {"short.npy", Via::array, {"not a .npy file"}},
        {"huge_claim.npy", Via::array, {"shape (1000000000,) of float64 needs 8000000000 data bytes, file has 16 (truncated)"}},
        {"overflow_shape.npy", Via::array, {"shape (1099511627776, 1099511627776) has more elements than can be addressed"}},
        {"bad_shape_text.npy", Via::array, {"not a valid .npy header: shape must be a tuple of non-negative integers"}},
        {"negative_shape.npy", Via::array, {"not a valid .npy header: shape must be a tuple of non-negative integers"}},
        {"bad_magic.npy", Via::array, {"not a .npy file (no \\x93NUMPY magic at the start)"}},
        {"version9.npy", Via::array, {"unsupported .npy format version 9 (expected 1, 2 or 3)"}},
        {"not_npy.npy", Via::array, {"not a .npy file"}},
        {"npz_bad_crc.npz", Via::bundle, {"not a valid .npz (zip) archive: member 'y.npy' is corrupt (CRC-32 mismatch)"}},
        {"npz_bad_deflate.npz", Via::bundle, {"not a valid .npz (zip) archive: member 'x.npy' has corrupt deflate data"}},
        {"npz_bomb_claim.npz", Via::bundle, {"member 'x.npy' claims 2.0 GiB from", "more than deflate can expand"}},
        {"npz_size_understated.npz", Via::bundle,
         {"member 'x.npy' has corrupt deflate data or a size that does not match its directory entry"}},
        {"npz_stored_sizes.npz", Via::bundle, {"stored member 'x.npy' has inconsistent sizes"}},
        {"npz_not_npy_member.npz", Via::bundle, {"member 'notes.txt' is not a .npy array"}},
        {"npz_duplicate.npz", Via::bundle, {"array 'x' appears twice in the archive"}},
        {"npz_member_not_npy.npz", Via::bundle, {": x: not a .npy file"}},
        {"npz_truncated.npz", Via::bundle, {"not a valid .npz (zip) archive: no end-of-directory record"}},
        {"npz_member_truncated.npz", Via::bundle, {": x: shape (2, 3) of float64 needs 48 data bytes, file has 43 (truncated)"}},
        {"json_ragged.json", Via::bundle, {"W_Q[1]", "ragged array", "expected 3 elements", "found 2"}},
        {"json_ragged_deeper.json", Via::bundle, {"x[1][1]", "expected a number at this depth, found a list"}},
        {"json_ragged_shallower.json", Via::bundle, {"x[1][0]", "expected a list of 1 elements, found number 2"}},
        {"json_nonnumeric.json", Via::bundle, {"y[0][2]", "expected a number, found string \"a\""}},
        {"json_null.json", Via::bundle, {"x[1]", "found null"}},
        {"json_invalid.json", Via::bundle, {"invalid JSON"}},
        {"json_not_object.json", Via::bundle, {"expected a JSON object of named arrays", "found a list"}},
        {"json_huge_number.json", Via::bundle, {"invalid JSON", "1e400"}},
        {"json_token_number.json", Via::bundle, {"query_tokens[1]", "expected a string (token label), found number 3"}},
        {"json_bad_string.json", Via::bundle, {"x[0]", "expected a number, found string \"infinity\""}},
    };
    // Every file in bad/ is listed above, and every listed file exists.
    std::set<std::string> listed, present;
    for (const Bad& c : cases) listed.insert(c.file);
    for (const auto& e : fs::directory_iterator(kFixtures + "bad")) present.insert(e.path().filename().string());
    CHECK(listed == present);

    for (const Bad& c : cases) {
        CAPTURE(c.file);
        const std::string path = bad(c.file);
        std::string message = c.via == Via::array ? input_error([&] { load_array(path, "W_Q"); })
                                                  : input_error([&] { load_bundle(path); });
        std::string origin = c.via == Via::array ? path + ": W_Q: " : path + ": ";
        CHECK_MESSAGE(message.rfind(origin, 0) == 0, "message: " << message << "\ndoes not start with: " << origin);
        check_message(message, c.phrases);
        CHECK(message.find('\n') == std::string::npos);  // one line
    }
}

TEST_CASE("io: a header claiming 1e9 elements is refused before anything is allocated") {
#ifdef ATTNSCOPE_TEST_ASAN
    MESSAGE("skipped under AddressSanitizer (it needs more address space than the limit allows)");
#else
    // In a child process whose address space may grow by 1 GiB at most, parsing must
    // still end in the size check's InputError: the 8 GB the header claims (64 GB as
    // doubles) are never asked for. A control allocation shows the limit bites.
    const std::string bytes = slurp(bad("huge_claim.npy"));
    enum Outcome { refused = 0, no_limit = 10, bad_alloc = 11, other_error = 12, accepted = 13, wrong_message = 14 };
    int rc = in_child([&]() -> int {
        std::ifstream statm("/proc/self/statm");
        unsigned long pages = 0;
        statm >> pages;
        rlim_t limit = rlim_t(pages) * rlim_t(::sysconf(_SC_PAGESIZE)) + (rlim_t(1) << 30);
        rlimit r{limit, limit};
        if (::setrlimit(RLIMIT_AS, &r) != 0) return no_limit;
        try {
            static char* volatile control;  // volatile: the allocation cannot be elided
            control = new char[std::size_t(8) << 30];
            delete[] control;
            return no_limit;
        } catch (const std::bad_alloc&) {
        }
        try {
            parse_npy(bytes, "huge_claim.npy");
            return accepted;
        } catch (const InputError& e) {
            return contains(e.what(), "needs 8000000000 data bytes, file has 16") ? refused : wrong_message;
        } catch (const std::bad_alloc&) {
            return bad_alloc;
        } catch (...) {
            return other_error;
        }
    });
    INFO("child outcome " << rc << " (0 refused, 10 no limit, 11 bad_alloc, 12 other error, 13 accepted, "
                             "14 wrong message, >128 signal)");
    CHECK(rc == refused);
#endif
}

// ---- memory limits ---------------------------------------------------------------------

TEST_CASE("io: format_bytes spells sizes for messages") {
    CHECK(format_bytes(0) == "0 bytes");
    CHECK(format_bytes(1023) == "1023 bytes");
    CHECK(format_bytes(1024) == "1.0 KiB");
    CHECK(format_bytes(1536) == "1.5 KiB");
    CHECK(format_bytes(std::size_t(3) << 30) == "3.0 GiB");
    CHECK(format_bytes(kNoLimit) == "16.0 EiB");
}

TEST_CASE("io: memory limits refuse files, arrays and archives before allocating") {
    // read_file: the file's size against the limit.
    const std::string f8 = good("float64.npy");
    const std::size_t size = std::size_t(fs::file_size(f8));
    CHECK(read_file(f8, size).size() == size);
    check_message(memory_limit_error([&] { read_file(f8, size - 1); }),
                  {f8 + ": the file holds " + std::to_string(size) + " bytes, over the memory limit of " +
                   std::to_string(size - 1) + " bytes (max_memory)"});

    // parse_npy: the values widened to double, (2, 3) -> 48 bytes.
    const std::string bytes = slurp(f8);
    check_values(parse_npy(bytes, "x", 48).doubles(), kA2);
    check_message(memory_limit_error([&] { parse_npy(bytes, "x", 47); }),
                  {"x: shape (2, 3) needs 48 bytes in memory, over the memory limit of 47 bytes (max_memory)"});
    check_message(memory_limit_error([&] { parse_npy(slurp(good("tokens_U5.npy")), "t", 0); }), {"t: shape (6,) needs "});
    CHECK(parse_npy(slurp(good("empty_0x3_f4.npy")), "e", 0).count() == 0);

    // load_array passes the limit on: 1000 int8 values read (about 1 KiB) but widen to 8000 bytes.
    const std::string i8 = good("int8_1000.npy");
    CHECK(load_array(i8, "x", 8000).count() == 1000);
    check_message(memory_limit_error([&] { load_array(i8, "x", 4000); }),
                  {i8 + ": x: shape (1000,) needs 7.8 KiB in memory, over the memory limit of 3.9 KiB"});

    // parse_npz / load_bundle: the members' declared sizes, before anything is inflated.
    const std::string zeros = good("npz_zeros_1mb.npz");
    Bundle all = load_bundle(zeros);
    REQUIRE(all.arrays.count("zeros"));
    CHECK(all.arrays.at("zeros").shape == std::vector<std::size_t>{125000});
    check_message(memory_limit_error([&] { load_bundle(zeros, 100000); }),
                  {zeros + ": its members would need ", "decompressed, over the memory limit of 97.7 KiB (max_memory)"});
    check_message(memory_limit_error([&] { parse_npz(slurp(zeros), "z.npz", 100000); }), {"z.npz: its members would need "});
}

TEST_CASE("io: the memory limit covers all of an archive's arrays together") {
    // Four int8 members of 1000 values: 4.4 KiB decompressed in all, 8000 bytes each
    // widened to double, 32000 bytes together. io.hpp: max_bytes is "the most it may
    // allocate for what it reads"; each array fits the limit, all four do not.
    const std::string path = good("npz_int8_members.npz");
    CHECK(parse_npz(slurp(path), path).arrays.size() == 4);
    std::size_t widened = 0;
    INFO("parse_npz with a 10000-byte limit returned arrays holding " << widened << " bytes of values");
    std::string message = memory_limit_error([&] {
        Bundle b = parse_npz(slurp(path), path, 10000);
        for (const auto& [name, a] : b.arrays) widened += a.count() * sizeof(double);
    });
    check_message(message, {path + ": its arrays together", "over the memory limit of 9.8 KiB"});
}

TEST_CASE("io: the memory limit covers a JSON file's values widened to double") {
    // 10000 zeros: about 20 KB of JSON, 80000 bytes of doubles. io.hpp: max_bytes is
    // "the most it may allocate for what it reads (..., values widened to double)".
    TempDir dir;
    std::string text = "{\"x\": [0";
    for (int i = 1; i < 10000; ++i) text += ",0";
    text += "]}";
    spit(dir / "zeros.json", text);
    spit(dir / "list.json", text.substr(6, text.size() - 7));  // the bare list
    REQUIRE(text.size() < 40000);
    for (const std::string file : {"zeros.json", "list.json"}) {
        CAPTURE(file);
        const std::string path = dir / file;
        std::size_t widened = 0;
        INFO("read with a 40000-byte limit, the values alone hold " << widened << " bytes");
        std::string message = memory_limit_error([&] {
            if (file == "zeros.json") widened = load_bundle(path, 40000).arrays.at("x").count() * sizeof(double);
            else widened = load_array(path, "x", 40000).count() * sizeof(double);
        });
        check_message(message, {path + ": ", "over the memory limit of 39.1 KiB"});
    }
}

// ---- choosing a reader -----------------------------------------------------------------

TEST_CASE("io: load_bundle and load_array choose the reader by extension, then by content") {
    TempDir dir;
    spit(dir / "archive.data", slurp(good("savez.npz")));
    spit(dir / "bundle.txt", slurp(good("bundle.json")));
    spit(dir / "x.dat", slurp(good("float64.npy")));
    spit(dir / "w.txt", slurp(good("single_list.json")));

    Bundle npz = load_bundle(good("savez_compressed.npz"));
    CHECK(npz.source == good("savez_compressed.npz"));
    CHECK(npz.arrays.size() == 6);
    Bundle sniffed = load_bundle(dir / "archive.data");  // "PK" at the start
    CHECK(sniffed.arrays.size() == 6);
    CHECK(sniffed.arrays.at("expected/Q").origin == (dir / "archive.data") + ": expected/Q");
    CHECK(load_bundle(good("bundle.json")).arrays.size() == 10);
    CHECK(load_bundle(dir / "bundle.txt").arrays.size() == 10);

    Array npy = load_array(good("float64.npy"), "x");
    CHECK(npy.origin == good("float64.npy") + ": x");
    check_values(npy.doubles(), kA2);
    Array magic = load_array(dir / "x.dat", "x");  // "\x93NUMPY" at the start
    CHECK(magic.dtype == "float64");
    check_values(magic.doubles(), kA2);
    Array json = load_array(dir / "w.txt", "W");
    CHECK(json.shape == std::vector<std::size_t>{3, 2});
    CHECK(json.origin == (dir / "w.txt") + ": W");

    check_message(input_error([&] { load_array(good("savez.npz"), "W_Q"); }),
                  {good("savez.npz") + ": an .npz archive is a bundle", "W_Q"});
    check_message(input_error([&] { load_array(dir / "missing.npy", "x"); }),
                  {(dir / "missing.npy") + ": cannot open file"});
    check_message(input_error([&] { load_bundle(dir / "missing.npz"); }),
                  {(dir / "missing.npz") + ": cannot open file"});
}

TEST_CASE("io: a .npy given as a bundle says to pass it as one array") {
    const std::string path = good("float32.npy");
    check_message(input_error([&] { load_bundle(path); }),
                  {path + ": a .npy file holds one array, not a bundle", "x " + path});
}

TEST_CASE("io: \"-\" reads a JSON bundle from standard input") {
    std::istringstream in(R"({"x": [[1, 2]], "bad": [1, "z"]})");
    std::streambuf* saved = std::cin.rdbuf(in.rdbuf());
    std::string message = input_error([] { load_bundle("-"); });
    std::cin.rdbuf(saved);
    check_message(message, {"<stdin>: bad[1]: expected a number, found string \"z\""});

    std::istringstream in2(R"({"x": [[1, 2]]})");
    saved = std::cin.rdbuf(in2.rdbuf());
    Bundle b;
    try {
        b = load_bundle("-");
    } catch (...) {
        std::cin.rdbuf(saved);
        throw;
    }
    std::cin.rdbuf(saved);
    CHECK(b.source == "<stdin>");
    check_values(b.arrays.at("x").doubles(), {1, 2});
}

TEST_CASE("io: a directory given as an input file is an InputError naming it") {
    TempDir dir;
    fs::create_directory(dir.path / "inputs.npz");
    fs::create_directory(dir.path / "x.npy");
    const std::string bundle = dir / "inputs.npz", array = dir / "x.npy";
    check_message(input_error([&] { read_file(bundle); }), {bundle + ": ", "is a directory"});
    check_message(input_error([&] { load_bundle(bundle); }), {bundle + ": ", "is a directory"});
    check_message(input_error([&] { load_array(array, "x"); }), {array + ": ", "is a directory"});
}

// ---- reading in place: mapped files, numbers kept as stored, copy-out -----------------

namespace {

// A little-endian C-order .npy of float32 or float64 numbers given as raw bytes.
template <typename F>
std::string npy_of(const std::vector<F>& v, const std::string& shape) {
    const std::string descr = sizeof(F) == 4 ? "<f4" : "<f8";
    return make_npy("{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }",
                    std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(F)));
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

bool points_into(std::string_view inner, std::string_view outer) {
    auto p = reinterpret_cast<std::uintptr_t>(inner.data()), o = reinterpret_cast<std::uintptr_t>(outer.data());
    return p >= o && p + inner.size() <= o + outer.size();
}

}  // namespace

TEST_CASE("io: map_file gives a file's bytes, mapped or read, with read_file's checks") {
    TempDir dir;
    const std::string path = dir / "x.npy", empty = dir / "empty.npy";
    const std::string bytes = slurp(good("float32.npy"));
    spit(path, bytes);
    spit(empty, "");

    FileBytes mapped = map_file(path);
    CHECK(mapped.bytes == bytes);
    CHECK(read_file(path) == bytes);
    fs::remove(path);  // the mapping outlives the name
    CHECK(mapped.bytes == bytes);

    CHECK(map_file(empty).bytes.empty());
    check_message(input_error([&] { load_array(empty, "x"); }), {empty + ": x: not a .npy file"});
    spit(dir / "empty.npz", "");
    check_message(input_error([&] { load_bundle(dir / "empty.npz"); }),
                  {dir / "empty.npz", "too short to hold a zip directory"});

    spit(path, bytes);
    check_message(memory_limit_error([&] { map_file(path, bytes.size() - 1); }),
                  {path + ": the file holds", "over the memory limit"});
    check_message(input_error([&] { map_file(dir / "missing"); }), {(dir / "missing") + ": cannot open file"});
    check_message(input_error([&] { map_file(dir.path.string()); }), {"is a directory"});

    // A pipe cannot be mapped: it is read to its end, as read_file does.
    int fds[2];
    REQUIRE(::pipe(fds) == 0);
    REQUIRE(::write(fds[1], bytes.data(), bytes.size()) == ssize_t(bytes.size()));
    ::close(fds[1]);
    const std::string via_pipe = "/dev/fd/" + std::to_string(fds[0]);
    Array piped = load_array(via_pipe, "x");  // sniffed by its magic: the name has no .npy
    ::close(fds[0]);
    CHECK(piped.dtype == "float32");
    check_values(piped.doubles(), parse_npy(bytes, "x").doubles());
}

TEST_CASE("io: numbers read in place, from a copy and through a mapped file are the same") {
    for (const std::string file : {"float32.npy", "float64.npy", "float32_3d.npy", "be_f8.npy", "fortran_f8_2d.npy",
                                   "fortran_f4_3d.npy", "float16.npy", "int64.npy", "bool.npy", "empty_0x3_f4.npy",
                                   "empty_2x0_f8.npy", "scalar_f8.npy", "v3_f8.npy"}) {
        CAPTURE(file);
        const std::string bytes = slurp(good(file));
        auto keep = std::make_shared<const std::string>(bytes);
        Array in_place = parse_npy(*keep, "a", kNoLimit, keep);
        Array copied = parse_npy(std::string(bytes), "a");  // its source is gone after the call
        Array mapped = load_array(good(file), "a");
        for (const Array* a : {&copied, &mapped}) {
            CHECK(a->shape == in_place.shape);
            CHECK(a->dtype == in_place.dtype);
            CHECK(a->held == in_place.held);
            check_values(a->doubles(), in_place.doubles());
        }
        const bool as_stored = (in_place.dtype == "float32" || in_place.dtype == "float64") &&
                               file.find("be_") != 0 && file.find("fortran") != 0;
        CHECK((in_place.held != Array::Held::doubles) == as_stored);
        if (as_stored) {
            CHECK(in_place.values.empty());
            CHECK(points_into(in_place.stored, *keep));
            CHECK_FALSE(points_into(copied.stored, *keep));
        }
        std::vector<double> one_by_one;
        for (std::size_t k = 0; k < in_place.count(); ++k) one_by_one.push_back(in_place.value(k));
        check_values(one_by_one, in_place.doubles());
    }

    // An .npz's stored members are read in place in the archive; deflated ones are not.
    const std::string zip = slurp(good("savez.npz"));
    auto keep = std::make_shared<const std::string>(zip);
    Bundle b = parse_npz(*keep, "s.npz", kNoLimit, keep);
    bool any_stored = false;
    for (const auto& [name, a] : b.arrays)
        if (a.held != Array::Held::doubles) {
            any_stored = true;
            CHECK(points_into(a.stored, *keep));
        }
    CHECK(any_stored);
    Bundle c = load_bundle(good("savez_compressed.npz"));
    Bundle s = load_bundle(good("savez.npz"));
    for (const auto& [name, a] : s.arrays) {
        CAPTURE(name);
        REQUIRE(c.arrays.count(name));
        CHECK(c.arrays.at(name).held == a.held);
        if (!a.is_text()) check_values(c.arrays.at(name).doubles(), a.doubles());
    }
}

TEST_CASE("io: copy_numbers gives float32 data to a float run bit for bit, wherever the bytes lie") {
    // 5000 numbers: several copy chunks; subnormals, -0, a NaN with a payload, the extremes.
    std::vector<float> v(5000);
    for (std::size_t k = 0; k < v.size(); ++k) v[k] = float(std::ldexp(double(k) - 2500.0, int(k % 200) - 100));
    v[1] = -0.0f;
    v[2] = std::numeric_limits<float>::denorm_min();
    v[3] = std::numeric_limits<float>::max();
    v[4] = -std::numeric_limits<float>::max();
    std::uint32_t payload = 0x7fc12345u;
    std::memcpy(&v[3000], &payload, 4);
    v[4500] = -std::numeric_limits<float>::infinity();
    const std::string npy = npy_of(v, "(5000,)");

    for (std::size_t offset : {0, 1, 2, 3}) {  // members of an .npz start at any byte
        CAPTURE(offset);
        auto buffer = std::make_shared<const std::string>(std::string(offset, 'z') + npy);
        Array a = parse_npy(std::string_view(*buffer).substr(offset), "a", kNoLimit, buffer);
        REQUIRE(a.held == Array::Held::float32);
        if (offset) CHECK(reinterpret_cast<std::uintptr_t>(a.stored.data()) % 4 != 0);
        std::vector<float> f(a.count());
        NonFinite nf = copy_numbers<float>(a, f.data());
        CHECK(std::memcmp(f.data(), v.data(), v.size() * sizeof(float)) == 0);
        CHECK(nf.count == 2);
        CHECK(nf.first == 3000);
        CHECK(std::isnan(nf.first_value));
        std::vector<double> d(a.count());
        NonFinite nd = copy_numbers<double>(a, d.data());
        std::size_t differ = 0;
        for (std::size_t k = 0; k < v.size(); ++k) differ += !same(d[k], double(v[k])) && !std::isnan(v[k]);
        CHECK(differ == 0);
        CHECK(nd.count == 2);
        CHECK(nd.first == 3000);
    }
}

TEST_CASE("io: copy_numbers finds float64 numbers beyond float32's range in a float run only") {
    const float fmax = std::numeric_limits<float>::max();
    // 3.4028235e38 lies above float's largest finite value, yet rounds to it.
    const std::vector<double> v = {1.0, 1e39, -2.5, -1e39, 3.4028235e38, double(fmax), 0x1p-149, 1e-50};
    for (const bool stored : {true, false}) {
        CAPTURE(stored);
        Array a = stored ? parse_npy(npy_of(v, "(2, 4)"), "a") : Array{};
        if (!stored) {  // the same numbers held as doubles, as JSON gives them
            a.shape = {2, 4};
            a.values = v;
            a.dtype = "json";
        }
        CHECK((a.held == Array::Held::float64) == stored);
        std::vector<float> f(a.count());
        NonFinite nf = copy_numbers<float>(a, f.data());
        for (std::size_t k = 0; k < v.size(); ++k) CHECK(same_bits(f[k], static_cast<float>(v[k])));
        CHECK(nf.count == 3);
        CHECK(nf.first == 1);
        CHECK(nf.first_value == 1e39);
        std::vector<double> d(a.count());
        NonFinite nd = copy_numbers<double>(a, d.data());
        check_values(d, v);
        CHECK(nd.count == 0);
    }
    Array empty = parse_npy(npy_of(std::vector<double>{}, "(0, 4)"), "e");
    CHECK(empty.count() == 0);
    CHECK(copy_numbers<float>(empty, nullptr).count == 0);
}

TEST_CASE("model: float32 inputs reach a float32 problem bit for bit, with each non-finite input reported") {
    TempDir dir;
    const std::size_t Tq = 3, D = 4;
    std::vector<float> x(Tq * D), wq(D * D), wk(D * D), wv(D * D);
    for (std::size_t k = 0; k < x.size(); ++k) x[k] = float(std::ldexp(1.0 + double(k) / 7, int(k) - 6));
    for (std::size_t k = 0; k < wq.size(); ++k) {
        wq[k] = float(k) / 3.0f;
        wk[k] = 1.0f - float(k) / 5.0f;
        wv[k] = float(k % 5) * 0.1f;
    }
    x[6] = std::numeric_limits<float>::infinity();  // x[0][1][2]
    wk[6] = std::numeric_limits<float>::quiet_NaN();  // W_K[1][2]
    wk[9] = std::numeric_limits<float>::quiet_NaN();
    const std::string path = dir / "in.npz";
    {
        AtomicFile f(path);
        write_npz(f, {{"x", {1, Tq, D}, DType::float32, x.data()},
                      {"W_Q", {D, D}, DType::float32, wq.data()},
                      {"W_K", {D, D}, DType::float32, wk.data()},
                      {"W_V", {D, D}, DType::float32, wv.data()}});
        f.commit();
    }
    const Bundle b = load_bundle(path);
    Problem<float> p = make_problem<float>(b, Spec{});
    CHECK(std::memcmp(p.x.data(), x.data(), x.size() * sizeof(float)) == 0);
    CHECK(std::memcmp(p.W_Q.data(), wq.data(), wq.size() * sizeof(float)) == 0);
    CHECK(std::memcmp(p.W_K.data(), wk.data(), wk.size() * sizeof(float)) == 0);
    CHECK(std::memcmp(p.W_V.data(), wv.data(), wv.size() * sizeof(float)) == 0);
    const std::vector<std::string> want = {
        path + ": x: 1 non-finite value, the first inf at [0][1][2]; every stage it reaches will carry it",
        path + ": W_K: 2 non-finite values, the first nan at [1][2]; every stage it reaches will carry it"};
    CHECK(p.warnings == want);
    Problem<double> pd = make_problem<double>(b, Spec{});
    CHECK(pd.warnings == want);
    for (std::size_t k = 0; k < x.size(); ++k) CHECK(same(pd.x.data()[k], double(x[k])));

    // PyTorch's in_proj_weight (3E, E): each block transposed, each bias a third.
    std::vector<double> in_proj(3 * D * D), in_bias(3 * D);
    for (std::size_t k = 0; k < in_proj.size(); ++k) in_proj[k] = double(k) * 0.25 - 3;
    for (std::size_t k = 0; k < in_bias.size(); ++k) in_bias[k] = double(k);
    in_bias[5] = 1e39;  // beyond float32: reported in a float run only
    const std::string torch_path = dir / "torch.npz";
    {
        AtomicFile f(torch_path);
        write_npz(f, {{"x", {1, Tq, D}, DType::float32, x.data()},
                      {"in_proj_weight", {3 * D, D}, DType::float64, in_proj.data()},
                      {"in_proj_bias", {3 * D}, DType::float64, in_bias.data()}});
        f.commit();
    }
    Spec torch;
    torch.layout = Layout::torch;
    const Bundle tb = load_bundle(torch_path);
    Problem<float> t = make_problem<float>(tb, torch);
    for (std::size_t i = 0; i < D; ++i)
        for (std::size_t j = 0; j < D; ++j) {
            CHECK(t.W_Q(i, j) == static_cast<float>(in_proj[j * D + i]));
            CHECK(t.W_K(i, j) == static_cast<float>(in_proj[(D + j) * D + i]));
            CHECK(t.W_V(i, j) == static_cast<float>(in_proj[(2 * D + j) * D + i]));
        }
    REQUIRE(t.b_K);
    CHECK(same_bits((*t.b_K)(1), std::numeric_limits<float>::infinity()));
    CHECK((*t.b_V)(3) == 11.0f);
    REQUIRE(t.warnings.size() == 2);
    CHECK(t.warnings[1] == torch_path + ": in_proj_bias: 1 non-finite value in this precision, the first 1e+39 at [5]; "
                                        "every stage it reaches will carry it");
    CHECK(make_problem<double>(tb, torch).warnings.size() == 1);  // x's inf only
}

TEST_CASE("model: nn.MultiheadAttention's two forms of q, k, v weights, or W_Q and a state dict name, do not mix") {
    // E = 2, one head; x (3, 2). Arrays built here, named as in a bundle "mha.npz".
    auto array = [](const std::string& name, std::vector<std::size_t> shape) {
        Array a;
        a.shape = std::move(shape);
        a.values.assign(element_count(a.shape), 0.5);
        a.dtype = "float64";
        a.origin = "mha.npz: " + name;
        return a;
    };
    const std::map<std::string, std::vector<std::size_t>> shapes = {
        {"x", {3, 2}}, {"memory", {4, 3}}, {"in_proj_weight", {6, 2}}, {"in_proj_bias", {6}}, {"q_proj_weight", {2, 2}},
        {"k_proj_weight", {2, 2}}, {"v_proj_weight", {2, 2}}, {"out_proj.weight", {2, 2}}, {"out_proj.bias", {2}},
        {"W_Q", {2, 2}}, {"W_K", {2, 2}}, {"W_V", {2, 2}}, {"W_O", {2, 2}}};
    auto make = [&](const std::vector<std::string>& names) {
        Bundle b;
        b.source = "mha.npz";
        for (const std::string& n : names) b.arrays[n] = array(n, shapes.at(n));
        return b;
    };
    Spec torch;
    torch.layout = Layout::torch;

    // Every form on its own still reads.
    const std::vector<std::vector<std::string>> good = {
        {"x", "in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"},
        {"x", "q_proj_weight", "k_proj_weight", "v_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"},
        {"x", "W_Q", "W_K", "W_V", "W_O"},
    };
    for (const auto& names : good) {
        CAPTURE(names.size());
        CHECK_NOTHROW(make_problem<double>(make(names), torch));
    }

    struct Bad { std::vector<std::string> names; std::string message; };
    const std::string both = "mha.npz: both forms of nn.MultiheadAttention's q, k, v weights given: in_proj_weight and ";
    const std::vector<Bad> bad = {
        {{"x", "in_proj_weight", "q_proj_weight", "k_proj_weight", "v_proj_weight"},
         both + "q_proj_weight, k_proj_weight, v_proj_weight; remove q_proj_weight, k_proj_weight, v_proj_weight "
                "(inputs of one width, as here, take in_proj_weight)"},
        {{"x", "in_proj_weight", "in_proj_bias", "k_proj_weight"},
         both + "k_proj_weight; remove k_proj_weight (inputs of one width, as here, take in_proj_weight)"},
        {{"x", "memory", "in_proj_weight", "q_proj_weight", "k_proj_weight", "v_proj_weight"},
         both + "q_proj_weight, k_proj_weight, v_proj_weight; remove in_proj_weight (memory's width 3 is not x's 2: "
                "that takes q/k/v_proj_weight)"},
        {{"x", "k_proj_weight", "v_proj_weight"}, "mha.npz: k_proj_weight needs q_proj_weight beside it"},
        {{"x", "v_proj_weight"}, "mha.npz: v_proj_weight needs q_proj_weight and k_proj_weight beside it"},
        {{"x", "q_proj_weight"}, "mha.npz: q_proj_weight needs k_proj_weight and v_proj_weight beside it"},
        {{"x", "W_Q", "W_K", "W_V", "k_proj_weight"},
         "mha.npz: W_Q: given together with PyTorch's nn.MultiheadAttention weights; keep one set"},
        {{"x", "W_Q", "W_K", "W_V", "in_proj_bias"},
         "mha.npz: in_proj_bias: an nn.MultiheadAttention parameter without in_proj_weight or q/k/v_proj_weight, given "
         "together with W_Q, W_K, W_V; keep one set"},
        {{"x", "W_Q", "W_K", "W_V", "out_proj.weight"},
         "mha.npz: out_proj.weight: an nn.MultiheadAttention parameter without in_proj_weight or q/k/v_proj_weight, "
         "given together with W_Q, W_K, W_V; keep one set"},
        {{"x", "W_Q", "W_K", "W_V", "W_O", "out_proj.bias"},
         "mha.npz: out_proj.bias: an nn.MultiheadAttention parameter without in_proj_weight or q/k/v_proj_weight, "
         "given together with W_Q, W_K, W_V; keep one set"},
        {{"x", "out_proj.weight"},
         "mha.npz: out_proj.weight: an nn.MultiheadAttention parameter without in_proj_weight or q/k/v_proj_weight"},
    };
    for (const Bad& c : bad) {
        CAPTURE(c.message);
        CHECK(input_error([&] { make_problem<double>(make(c.names), torch); }) == c.message);
    }
}

TEST_CASE("io: crc32_bytes is zip's CRC-32 for every length, offset and starting value") {
    // The oracle: the CRC-32 of the zip format (reflected polynomial 0xEDB88320), bit by bit.
    auto reference = [](std::uint32_t crc, const unsigned char* p, std::size_t n) {
        crc = ~crc;
        for (std::size_t i = 0; i < n; ++i) {
            crc ^= p[i];
            for (int b = 0; b < 8; ++b) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
        }
        return ~crc;
    };
    CHECK(crc32_bytes(0, reinterpret_cast<const unsigned char*>("123456789"), 9) == 0xCBF43926u);  // the check value
    std::vector<unsigned char> bytes(4096 + 64);
    std::uint64_t state = 0x9E3779B97F4A7C15ull;
    for (unsigned char& c : bytes) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        c = static_cast<unsigned char>(state >> 56);
    }
    std::size_t differ = 0, first_len = 0, first_offset = 0;
    for (std::size_t offset = 0; offset < 17; ++offset)
        for (std::size_t n = 0; n <= 700; ++n) {
            const std::uint32_t start = n % 3 == 0 ? 0u : static_cast<std::uint32_t>(n * 2654435761u);
            if (crc32_bytes(start, bytes.data() + offset, n) != reference(start, bytes.data() + offset, n) && differ++ == 0) {
                first_len = n;
                first_offset = offset;
            }
        }
    CHECK_MESSAGE(differ == 0, differ << " differ; the first at length " << first_len << ", offset " << first_offset);
    CHECK(crc32_bytes(0, bytes.data(), bytes.size()) == reference(0, bytes.data(), bytes.size()));
    const std::uint32_t half = crc32_bytes(0, bytes.data(), 1000);
    CHECK(crc32_bytes(half, bytes.data() + 1000, bytes.size() - 1000) == reference(0, bytes.data(), bytes.size()));
}

TEST_CASE("io: shape_str spells shapes as numpy does") {
    CHECK(shape_str({}) == "()");
    CHECK(shape_str({5}) == "(5,)");
    CHECK(shape_str({2, 3, 4}) == "(2, 3, 4)");
    CHECK(element_count({}) == 1);
    CHECK(element_count({2, 0, 3}) == 0);
    CHECK(dtype_size(DType::float32) == 4);
    CHECK(dtype_size(DType::float64) == 8);
    CHECK(dtype_size(DType::boolean) == 1);
}

// ---- AtomicFile ------------------------------------------------------------------------

TEST_CASE("io: AtomicFile destroyed uncommitted leaves no file and no temporary") {
    TempDir dir;
    const std::string target = dir / "out.npy";
    {
        AtomicFile f(target);
        f.write("partial");
        CHECK(f.written() == 7);
        CHECK(dir.entries().size() == 1);  // the temporary, beside the target
        CHECK(f.target() == target);
    }
    CHECK(dir.entries().empty());
    {
        AtomicFile f(target);
        f.write("closed, not committed");
        f.close();
    }
    CHECK(dir.entries().empty());
}

TEST_CASE("io: AtomicFile commit replaces the target") {
    TempDir dir;
    const std::string target = dir / "out.json";
    spit(target, "old contents, longer than the new ones");
    {
        AtomicFile f(target);
        f.write("new");
        CHECK(slurp(target) == "old contents, longer than the new ones");  // untouched until commit
        f.commit();
    }
    CHECK(slurp(target) == "new");
    CHECK(dir.entries() == std::set<std::string>{"out.json"});

    // Permissions follow the umask, like any file the user creates.
    mode_t mask = ::umask(0);
    ::umask(mask);
    struct stat st {};
    REQUIRE(::stat(target.c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == (0666 & ~mask));

    // A moved AtomicFile commits through its new owner only.
    {
        AtomicFile a(target);
        a.write("moved");
        AtomicFile b(std::move(a));
        b.commit();
    }
    CHECK(slurp(target) == "moved");
    CHECK(dir.entries() == std::set<std::string>{"out.json"});
}

TEST_CASE("io: AtomicFile failures leave what was at the target intact") {
    TempDir dir;

    SUBCASE("the target's directory does not exist: RuntimeFailure on construction") {
        const std::string target = dir / "no/such/dir/out.npy";
        try {
            AtomicFile f(target);
            FAIL("AtomicFile was created in a nonexistent directory");
        } catch (const RuntimeFailure& e) {
            check_message(e.what(), {target + ": cannot create output file"});
        }
        CHECK(dir.entries().empty());
    }

    SUBCASE("an error before commit: the old target stays") {
        const std::string target = dir / "out.npz";
        spit(target, "old");
        try {
            AtomicFile f(target);
            f.write("half of the new archive");
            throw InputError("a later array is bad");
        } catch (const InputError&) {
        }
        CHECK(slurp(target) == "old");
        CHECK(dir.entries() == std::set<std::string>{"out.npz"});
    }

    SUBCASE("the rename fails (the target is a directory): RuntimeFailure, temporary removed") {
        const std::string target = dir / "out";
        fs::create_directory(target);
        spit(target + "/keep", "kept");
        try {
            AtomicFile f(target);
            f.write("data");
            f.commit();
            FAIL("commit over a directory succeeded");
        } catch (const RuntimeFailure& e) {
            check_message(e.what(), {target + ": cannot move output into place"});
        }
        CHECK(dir.entries() == std::set<std::string>{"out"});
        CHECK(slurp(target + "/keep") == "kept");
    }

    SUBCASE("a write fails (file size limit): RuntimeFailure, old target intact") {
        const std::string target = dir / "big.npy";
        spit(target, "old");
        const int rc = write_past_size_limit(target, [&] {
            AtomicFile f(target);
            f.write(std::string(8192, 'x'));
            f.commit();
        });
        INFO("child outcome " << rc << " (" << kSizeLimitOutcomes << ")");
        CHECK(rc == 0);
        CHECK(slurp(target) == "old");
        CHECK(dir.entries() == std::set<std::string>{"big.npy"});
    }
}

// ---- AtomicTextFile --------------------------------------------------------------------

TEST_CASE("io: AtomicTextFile streams text into place on commit, and only then") {
    TempDir dir;
    const std::string target = dir / "view.html";
    // More than the 64 KiB buffer, so the text reaches the file in several writes.
    std::string text;
    for (int i = 0; text.size() < 200000; ++i) text += "<p>row " + std::to_string(i) + "</p>\n";
    {
        AtomicTextFile out(target);
        out << text;
        CHECK(!fs::exists(target));
    }
    CHECK(dir.entries().empty());  // destroyed uncommitted: nothing left
    {
        AtomicTextFile out(target);
        out << text;
        out.commit();
    }
    CHECK(slurp(target) == text);
    CHECK(dir.entries() == std::set<std::string>{"view.html"});
}

TEST_CASE("io: AtomicTextFile reports a write error from commit and keeps the old target") {
    TempDir dir;
    const std::string target = dir / "view.svg";
    spit(target, "old");
    const int rc = write_past_size_limit(target, [&] {
        AtomicTextFile out(target);
        out << std::string(200000, 'x');
        out.commit();  // the error surfaces here, or is lost
    });
    INFO("child outcome " << rc << " (" << kSizeLimitOutcomes << ")");
    CHECK(rc == 0);
    CHECK(slurp(target) == "old");
    CHECK(dir.entries() == std::set<std::string>{"view.svg"});
}
