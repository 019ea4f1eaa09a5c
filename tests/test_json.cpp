// JSON bundles: nested lists, non-finite spellings, number ranges, nesting limits, element
// errors and the byte-order mark.
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
    Bundle b = parse_json_bundle(
        R"({"v": ["inf", "+inf", "Infinity", "+Infinity", "-inf", "-Infinity", "nan", "NaN", -0.0]})", "nf.json");
    check_values(b.arrays.at("v").doubles(), {kInf, kInf, kInf, kInf, -kInf, -kInf, kNaN, kNaN, -0.0});
}

TEST_CASE("io: JSON errors name the source, the element path, what was expected and found") {
    struct Bad {
        std::string text;
        std::vector<std::string> phrases;
    };
    const std::vector<Bad> cases = {
        {R"({"x": [[1, 2, 3]], "W_Q": [[1, 2, 3], [4, 5]]})",
         {"W_Q[1]", "ragged array", "expected 3 elements", "found 2"}},
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
    auto nested = [](int depth) {
        return std::string(std::size_t(depth), '[') + "1" + std::string(std::size_t(depth), ']');
    };
    Bundle ok = parse_json_bundle("{\"x\": " + nested(32) + "}", "deep.json");
    CHECK(ok.arrays.at("x").ndim() == 32);
    check_message(input_error([&] { parse_json_bundle("{\"x\": " + nested(33) + "}", "deep.json"); }),
                  {"deep.json: x: ", "objects and arrays nested more than 32 deep"});
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
    check_message(input_error([] { parse_json_array("[[1, 2], [3]]", "r.json: W"); }), {"r.json: W[1]: ragged array"});
}

TEST_CASE("io: JSON element errors name the array once, then the element's indices") {
    struct Case {
        std::string text, origin, message;
    };
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
        {"true false", "w.json: W_Q",
         "w.json: W_Q: invalid JSON at line 1, column 6 (byte 5): unexpected data after the value"},
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

    // Byte offsets still count the mark, columns do not; only one mark, only at the start,
    // is skipped (a second one is a character of the line: column 1).
    check_message(input_error([&] { parse_json_bundle(bom + R"({"x": [1,]})", "bom.json"); }),
                  {"bom.json: invalid JSON at line 1, column 10 (byte 12): invalid number"});
    check_message(input_error([&] { parse_json_bundle(bom + bom + "{}", "two.json"); }),
                  {"two.json: invalid JSON at line 1, column 1 (byte 3)"});
    check_message(input_error([&] { parse_json_bundle(" " + bom + "{}", "late.json"); }),
                  {"late.json: invalid JSON at line 1, column 2 (byte 1)"});
    check_message(input_error([&] { parse_json_array(bom, "only.json: W"); }),
                  {"only.json: W: invalid JSON", "empty input"});
}

TEST_CASE("io: JSON syntax errors give the line and the column (in characters) and the byte") {
    // Line 3: two spaces, "é" (2 bytes, 1 character), then the bad token at column 5.
    const std::string text = "{\n\"x\": [1,\n  \xC3\xA9 2]}";
    check_message(input_error([&] { parse_json_bundle(text, "multi.json"); }),
                  {"multi.json: invalid JSON at line 3, column 3 (byte 13): invalid number"});
    const std::string after = "{\n\"x\": [1],\n \"\xC3\xA9\" 2]}";  // after the key: column 6, byte 18
    check_message(input_error([&] { parse_json_bundle(after, "s.json"); }),
                  {"s.json: invalid JSON at line 3, column 6 (byte 18): expected ':'"});
    // CRLF line ends count as one line each.
    check_message(input_error([&] { parse_json_bundle("{\r\n\"x\": [1,\r\n]}", "crlf.json"); }),
                  {"crlf.json: invalid JSON at line 3, column 1 (byte 13)"});
    // Through load_bundle: the file's name first.
    TempDir dir;
    spit(dir / "bad.json", "{\"x\": [[1, 2],\n       [3, 4]]\n  \"W_Q\": []}");
    check_message(input_error([&] { load_bundle(dir / "bad.json"); }),
                  {dir / "bad.json" + ": invalid JSON at line 3, column 3 (byte 32): expected ',' or '}'"});
}

TEST_CASE("io: JSON keys, strings and numbers reach messages escaped, clipped, on one line") {
    const std::vector<std::pair<std::string, std::string>> texts = {
        {"\x1b[31mRED", "\\x1b[31mRED"},
        {"\x1b]0;title\x07", "\\x1b]0;title\\x07"},
        {"a\nb", "a\\nb"},
        {std::string("nul\0after", 9), "nul\\x00after"},
    };
    // JSON spells control characters as \u escapes; the reader decodes them.
    auto json_string = [](const std::string& s) {
        std::string out = "\"";
        for (const char ch : s) {
            const auto c = static_cast<unsigned char>(ch);
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\u%04x", c);
            out += c < 0x20 ? std::string(buf) : std::string(1, char(c));
        }
        return out + "\"";
    };
    for (const auto& item : texts) {
        const auto& raw = item.first;  // not a structured binding: clang 14 cannot capture one
        const auto& escaped = item.second;
        CAPTURE(escaped);
        const std::string key = json_string(raw);
        // A key twice; a key's element of the wrong kind (the key in the path); a string where a number goes.
        const std::vector<std::pair<std::string, std::string>> cases = {
            {"{" + key + ": [1], " + key + ": [2]}", "k.json: '" + escaped + "' appears twice in the object"},
            {"{" + key + ": [1, null]}", "k.json: " + escaped + "[1]: expected a number, found null"},
            {"{\"x\": [1, " + key + "]}", "k.json: x[1]: expected a number, found string \"" + escaped + "\""},
        };
        for (const auto& c : cases) {
            const std::string& text = c.first;
            const std::string& phrase = c.second;
            const std::string m = input_error([&] { parse_json_bundle(text, "k.json"); });
            check_message(m, {phrase});
            CHECK(m.find_first_of(std::string("\n\x1b\x07\0", 4)) == std::string::npos);
        }
    }
    // Bytes that are not UTF-8 are refused inside strings; in a file name they are escaped.
    check_message(input_error([&] { parse_json_bundle("[1]", "bad\xff.json"); }), {"bad\\xff.json: expected"});
    // An invalid escape shows the character escaped.
    check_message(input_error([&] { parse_json_bundle("{\"x\\\x01\": 1}", "e.json"); }), {"invalid escape \\\\x01"});
}

TEST_CASE("io: a JSON number of a million digits is echoed clipped") {
    // 1e1000000 spelled out: out of range, and the message shows its first 80 bytes.
    const std::string digits = "1" + std::string(1000000, '0');
    const std::string m = input_error([&] { parse_json_bundle("{\"x\": [" + digits + "]}", "big.json"); });
    check_message(m, {"big.json: invalid JSON at line 1, column 8 (byte 7): number 1000000",
                      "... (1000001 bytes in all) is out of range"});
    CHECK(m.size() < 300);
    // A long string and a long key, found where they do not belong.
    const std::string s(100000, 's');
    check_message(input_error([&] { parse_json_bundle("{\"x\": [\"" + s + "\"]}", "s.json"); }),
                  {"found string \"ssssssssssssssssssss... (100000 bytes in all)\""});
    const std::string m2 = input_error([&] { parse_json_bundle("{\"" + s + "\": [null]}", "k.json"); });
    check_message(m2, {"k.json: " + std::string(80, 's') + "... (100000 bytes in all)[0]: expected a number"});
    CHECK(m2.size() < 300);
}

TEST_CASE("io: the JSON memory limit counts the text and stops a long list at the limit") {
    // 1000 zeros: 2001 bytes of text, 8000 bytes of doubles. Within 10001 bytes: accepted;
    // within 9000 (the doubles alone would fit): refused, the text counted.
    std::string text = "[0";
    for (int i = 1; i < 1000; ++i) text += ",0";
    text += "]";
    CHECK(parse_json_array(text, "z.json: x", 10001).count() == 1000);
    check_message(memory_limit_error([&] { parse_json_array(text, "z.json: x", 10000); }), {"z.json: x: "});
    check_message(memory_limit_error([&] { parse_json_array(text, "z.json: x", 9000); }),
                  {"z.json: x: the values read so far need ", "beside the 2.0 KiB of JSON text",
                   "over the memory limit of 8.8 KiB"});
    // JSON numbers are kept as float64 in a buffer that grows without copying.
    const Array a = parse_json_array("[[1, 2], [3, 4]]", "m.json: x");
    CHECK(a.held == Array::Held::float64);
    CHECK(a.values.empty());
    check_values(a.doubles(), {1, 2, 3, 4});
}
