// The JSON writer of every output (base/json_writer.hpp) and base's UTF-8 decoder and
// encoder. Expected texts are written here by hand from RFC 8259 and RFC 3629.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "attnscope/base/json_writer.hpp"
#include "attnscope/base/text.hpp"

using namespace attnscope;

namespace {

std::string escaped(const std::string& s, bool in_script = false) {
    std::ostringstream out;
    put_json_string(out, s, in_script);
    return out.str();
}

}  // namespace

TEST_CASE("json writer: strings are escaped, bad UTF-8 becomes U+FFFD") {
    CHECK(escaped("a\"b\\c") == "\"a\\\"b\\\\c\"");
    CHECK(escaped("\n\t\r\x01\x1f") == "\"\\n\\t\\r\\u0001\\u001f\"");
    CHECK(escaped("caf\xc3\xa9 \xe4\xb8\xad") == "\"caf\xc3\xa9 \xe4\xb8\xad\"");  // kept as UTF-8
    CHECK(escaped("a\xff"
                  "b") ==
          "\"a\xef\xbf\xbd"
          "b\"");                                                                  // a stray byte
    CHECK(escaped("\xed\xa0\x80") == "\"\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\"");  // a surrogate: 3 bytes
    CHECK(escaped("</script>&") == "\"</script>&\"");
    CHECK(escaped("</script>&\xe2\x80\xa8", true) == "\"\\u003c/script\\u003e\\u0026\\u2028\"");
}

TEST_CASE("json writer: numbers, the shortest that reads back, and what JSON cannot spell") {
    std::ostringstream out;
    JsonWriter w(out);
    const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
    w.begin_array().value(0.1).value(0.1f).value(1e300).value(-0.0).value(3).value(std::size_t(7));
    w.value(nan).value(-inf).value(inf).value(nan, JsonNonFinite::nan_null).value(-inf, JsonNonFinite::nan_null);
    w.value(true).value(nullptr).value("x").end_array();
    CHECK(out.str() == "[0.1,0.1,1e+300,-0,3,7,\"nan\",\"-inf\",\"inf\",null,\"-inf\",true,null,\"x\"]");
}

TEST_CASE("json writer: objects, nesting and line breaks") {
    std::ostringstream out;
    JsonWriter w(out);
    w.begin_object().key("schema").value("attnscope.test/1").newline().key("a").begin_object().end_object();
    w.key("b").list(std::vector<int>{1, 2}).newline().end_object();
    CHECK(out.str() == "{\"schema\":\"attnscope.test/1\",\n\"a\":{},\"b\":[1,2]\n}");
    CHECK(w.depth() == 0);
}

TEST_CASE("json writer: indented as nlohmann's dump(2)") {
    std::ostringstream out;
    JsonWriter w(out, {.indent = 2, .in_script = false});
    w.begin_object().key("a").list(std::vector<int>{1}).key("b").begin_array().end_array().key("c");
    w.begin_object().key("d").value(nullptr).end_object().end_object();
    CHECK(out.str() == "{\n  \"a\": [\n    1\n  ],\n  \"b\": [],\n  \"c\": {\n    \"d\": null\n  }\n}");
}

TEST_CASE("json writer: nested lists in C order, streamed") {
    const std::vector<double> data = {0, 1, 2, 3, 4, 5};
    const auto nested = [&](const std::vector<std::size_t>& shape) {
        std::ostringstream out;
        JsonWriter w(out);
        w.nested(shape, [&](JsonWriter& j, std::size_t k) { j.value(data[k]); });
        return out.str();
    };
    CHECK(nested({2, 3}) == "[[0,1,2],[3,4,5]]");
    CHECK(nested({3, 1, 2}) == "[[[0,1]],[[2,3]],[[4,5]]]");
    CHECK(nested({6}) == "[0,1,2,3,4,5]");
    CHECK(nested({2, 0}) == "[[]]");  // no element: the brackets alone
    CHECK(nested({}) == "0");         // a scalar
}

TEST_CASE("utf-8: decode_utf8 and append_utf8 agree on every boundary (RFC 3629)") {
    for (char32_t cp : {0x0u, 0x7Fu, 0x80u, 0x7FFu, 0x800u, 0xD7FFu, 0xE000u, 0xFFFFu, 0x10000u, 0x10FFFFu}) {
        CAPTURE(std::uint32_t(cp));
        std::string s;
        append_utf8(s, cp);
        CHECK(s.size() == (cp < 0x80 ? 1u : cp < 0x800 ? 2u : cp < 0x10000 ? 3u : 4u));
        char32_t back = 0;
        CHECK(decode_utf8(s, 0, back) == s.size());
        CHECK(back == cp);
    }
    char32_t cp = 0;
    CHECK(decode_utf8("\xc0\x80", 0, cp) == 0);          // overlong
    CHECK(decode_utf8("\xed\xa0\x80", 0, cp) == 0);      // surrogate
    CHECK(decode_utf8("\xf4\x90\x80\x80", 0, cp) == 0);  // past U+10FFFF
    CHECK(decode_utf8("\xe2\x82", 0, cp) == 0);          // cut short
    CHECK(next_code_point("\xff", 0, cp) == 1);
    CHECK(cp == 0xFFFD);
}
