// libFuzzer target: the JSON readers (attnscope::parse_json_bundle, parse_json_array)
// on arbitrary text — nlohmann/json's parser, the rectangularity walk, token labels,
// and the "inf"/"-inf"/"nan" strings.
//
// Oracles, besides the sanitizers:
//  - every accepted array holds exactly shape-product values (or strings), at most 32
//    dimensions, text in valid UTF-8;
//  - a text without any string (no '"') yields only finite values: non-finite ones can
//    only come from the strings "inf", "-inf", "nan";
//  - a lone number is read as strtod reads it (both round correctly), and one too large
//    for a double is refused, never read as infinity or anything else.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include "fuzz_common.hpp"

using namespace attnscope;

namespace {

void check(const Array& a, bool has_strings) {
    attnscope::fuzz::check_array(a);
    ATTNSCOPE_FUZZ_CHECK(a.ndim() <= 32);
    if (!has_strings)
        for (double v : a.doubles()) ATTNSCOPE_FUZZ_CHECK(std::isfinite(v));
}

// The text without JSON's surrounding whitespace.
std::string_view trimmed(std::string_view s) {
    const char* ws = " \t\n\r";
    const std::size_t b = s.find_first_not_of(ws);
    if (b == std::string_view::npos) return {};
    return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

// `a` was read from `text`: when the text is one number, compare with strtod.
void check_lone_number(std::string_view text, const Array& a) {
    const std::string t(trimmed(text));
    if (t.empty() || !(t[0] == '-' || (t[0] >= '0' && t[0] <= '9')) || !a.shape.empty()) return;
    char* end = nullptr;
    const double ref = std::strtod(t.c_str(), &end);
    if (end != t.c_str() + t.size()) return;
    ATTNSCOPE_FUZZ_CHECK(std::isfinite(ref));  // accepted, so it must not overflow a double
    const double got = a.count() == 1 ? a.value(0) : 0.0;
    ATTNSCOPE_FUZZ_CHECK(a.count() == 1 && std::memcmp(&ref, &got, sizeof ref) == 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view text = fuzz::as_bytes(data, size);
    const bool has_strings = text.find('"') != std::string_view::npos;
    Bundle b;
    if (fuzz::accepts([&] { b = parse_json_bundle(text, "fuzz.json"); })) {
        ATTNSCOPE_FUZZ_CHECK(b.source == "fuzz.json");
        for (const auto& [name, a] : b.arrays) check(a, has_strings);
    }
    Array a;
    if (fuzz::accepts([&] { a = parse_json_array(text, "fuzz.json: a"); })) {
        check(a, has_strings);
        ATTNSCOPE_FUZZ_CHECK(!a.is_text());
        check_lone_number(text, a);
    }
    return 0;
}
