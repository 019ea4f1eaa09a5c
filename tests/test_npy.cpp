// .npy reading: dtypes, byte orders, layouts, header versions and header details, each
// good fixture against numpy's own reading of it, and shape_str's numpy spelling.
// Expected values are written here or come from numpy: the fixtures under tests/fixtures/
// are written by scripts/make_fixtures.py, and good/expected.json holds numpy's own
// reading of every good .npy and .npz file. Nothing is compared with the code under test.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <new>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "attnscope/base/errors.hpp"
#include "attnscope/io/read.hpp"
#include "attnscope/io/write.hpp"
#include "attnscope/model/model.hpp"
#include "test_util.hpp"

using namespace attnscope;
using namespace testutil;

namespace {

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
    std::string bytes =
        make_npy("{'descr': '<U1', 'fortran_order': False, 'shape': (1,), }", std::string("\x00\x00\x11\x00", 4));
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
    Array d32 = parse_npy(
        make_npy("{'descr': '<f8', 'fortran_order': False, 'shape': " + ones32 + ", }", std::string(8, '\0')), "d32");
    CHECK(d32.ndim() == 32);

    struct Bad {
        std::string dict, phrase;
    };
    const std::vector<Bad> cases = {
        {"{'descr': '<f8', 'fortran_order': False, 'shape': " + ones33 + ", }", "more than 32 dimensions"},
        {"{'descr': '<f8', 'fortran_order': False, 'shape': (6,), 'extra': 1, }", "unexpected header key 'extra'"},
        {"{'descr': '<f8', 'fortran_order': False, }", "header lacks one of 'descr', 'fortran_order', 'shape'"},
        {"{'descr': '<f8', 'fortran_order': 0, 'shape': (6,), }", "'fortran_order' must be True or False"},
        {"{'descr': '<f3', 'fortran_order': False, 'shape': (6,), }", "unsupported dtype '<f3'"},
        {"{'descr': '<f8', 'fortran_order': False, 'shape': (6.0,), }",
         "shape must be a tuple of non-negative integers"},
        {"{'descr': '<f8', 'fortran_order': False, 'shape': (99999999999999999999999,), }",
         "a shape entry is too large"},
        {"['descr', '<f8']", "expected '{'"},
    };
    for (const Bad& b : cases) {
        CAPTURE(b.dict);
        check_message(input_error([&] { parse_npy(make_npy(b.dict, data), "hdr.npy"); }), {"hdr.npy: ", b.phrase});
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
    struct Case {
        std::string name, header;
        bool ok;
        std::string found;
    };
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

TEST_CASE("io: .npy header keys and dtypes reach messages escaped, clipped, on one line") {
    const std::vector<std::pair<std::string, std::string>> texts = {
        {"\x1b[31mRED", "\\x1b[31mRED"},
        {"\x1b]0;title\x07", "\\x1b]0;title\\x07"},
        {"a\nb", "a\\nb"},
        {std::string("nul\0after", 9), "nul\\x00after"},
        {"bad\xff\xfe", "bad\\xff\\xfe"},
    };
    for (const auto& item : texts) {
        const auto& raw = item.first;  // not a structured binding: clang 14 cannot capture one
        const auto& escaped = item.second;
        CAPTURE(escaped);
        const std::string descr = make_npy("{'descr': '<" + raw + "', 'fortran_order': False, 'shape': (1,), }", "");
        const std::string m = input_error([&] { parse_npy(descr, "d.npy"); });
        check_message(m, {"d.npy: unsupported dtype '<" + escaped + "'"});
        CHECK(m.find_first_of(std::string("\n\x1b\x07\0", 4)) == std::string::npos);
        const std::string key =
            make_npy("{'" + raw + "': 1, 'descr': '<f8', 'fortran_order': False, 'shape': (1,), }", "");
        check_message(input_error([&] { parse_npy(key, "k.npy"); }),
                      {"k.npy: not a valid .npy header: unexpected header key '" + escaped + "'"});
    }
    // A long dtype is clipped; the origin (a file name and an array) is escaped.
    const std::string long_descr =
        make_npy("{'descr': '<" + std::string(5000, 'f') + "', 'fortran_order': False, 'shape': (1,), }", "");
    const std::string m = input_error([&] { parse_npy(long_descr, "dir\x1b/l.npy: x"); });
    check_message(m, {"dir\\x1b/l.npy: x: unsupported dtype '<ffff", "... (5001 bytes in all)'"});
    CHECK(m.size() < 400);
}

TEST_CASE("io: format versions other than 1.0, 2.0 and 3.0 are refused by their number, as numpy does") {
    // numpy's test_format.py lists (1, 1), (0, 0), (0, 1), (2, 2), (255, 255) as bad magic;
    // (2, 1) and (3, 1) are refused the same way (numpy reads only minor version 0).
    const std::string dict = "{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }";
    const std::string data("\x00\x00\x00\x00\x00\x00\xf0\x3f\x00\x00\x00\x00\x00\x00\x00\x40", 16);  // 1.0, 2.0
    const std::vector<std::pair<int, int>> versions = {{1, 1}, {2, 1}, {3, 1}, {2, 2}, {0, 0}, {0, 1}, {255, 255}};
    TempDir dir;
    std::string names;
    for (const auto& [major, minor] : versions) {
        const std::string v = std::to_string(major) + "." + std::to_string(minor);
        CAPTURE(v);
        std::string bytes = make_npy(dict, data, major >= 2 && major <= 3 ? 2 : 1);
        bytes[6] = char(major);
        bytes[7] = char(minor);
        const std::string phrase = "v.npy: unsupported .npy format version " + v + " (expected 1.0, 2.0 or 3.0)";
        check_message(input_error([&] { parse_npy(bytes, "v.npy"); }), {phrase});
        // The 8 bytes of the magic alone (numpy's test): the version is what is wrong, not the length.
        check_message(input_error([&] { parse_npy(bytes.substr(0, 8), "v.npy"); }), {phrase});
        spit(dir / ("v" + std::to_string(major) + "_" + std::to_string(minor) + ".npy"), bytes);
        names += " v" + std::to_string(major) + "_" + std::to_string(minor);
    }
    // float128 ('<f16') and other widths: the width is what is not supported.
    check_message(input_error([&] {
                      parse_npy(
                          make_npy("{'descr': '<f16', 'fortran_order': False, 'shape': (1,), }", std::string(16, '\0')),
                          "w.npy");
                  }),
                  {"w.npy: unsupported dtype '<f16' (128-bit floats are not supported)"});
    check_message(input_error([&] {
                      parse_npy(
                          make_npy("{'descr': '<i3', 'fortran_order': False, 'shape': (1,), }", std::string(3, '\0')),
                          "w.npy");
                  }),
                  {"w.npy: unsupported dtype '<i3' (24-bit integers are not supported)"});
    if (!have_numpy()) {
        MESSAGE("skipped the numpy check: /usr/bin/python3 cannot import numpy");
        return;
    }
    // numpy refuses every one of those files too.
    spit(dir / "check.py", R"PY(
import sys, numpy as np
for name in sys.argv[2:]:
    try:
        np.load("%s/%s.npy" % (sys.argv[1], name))
        print(name, "read")
    except ValueError:
        print(name, "refused")
)PY");
    const std::string command = "/usr/bin/python3 '" + (dir / "check.py") + "' '" + dir.path.string() + "'" + names;
    CHECK(std::system((command + " > '" + (dir / "numpy.log") + "' 2>&1").c_str()) == 0);
    std::string want;
    for (const auto& [major, minor] : versions)
        want += "v" + std::to_string(major) + "_" + std::to_string(minor) + " refused\n";
    CHECK(slurp(dir / "numpy.log") == want);
}
