// libFuzzer target: the tokenizer.json reader (attnscope::parse_tokenizer_json) on
// arbitrary text: the bounded JSON parse, every component's keys (models, normalizers,
// pre-tokenizers with their regular expressions, post-processors, decoders, added
// tokens), and, when the file is accepted, a few texts encoded and decoded through it.
//
// Oracles, besides the sanitizers:
//  - every offset lies within the text, start <= end;
//  - every id of an encoding has its piece in the tokenizer (piece(id)), except the ids
//    a post-processor's template names, which decode() then refuses (InputError);
//  - the decoded text is well-formed UTF-8.
// A regular expression that backtracks without bound is refused by PCRE2's match limit
// (InputError), never run for long.
#include <string>
#include <vector>

#include "attnscope/tokenize/tokenizer.hpp"
#include "fuzz_common.hpp"

using namespace attnscope;

namespace {

const char* const kTexts[] = {"Hello world! 123", " \u00e9t\u00e9  <s>\n\t[MASK]", ""};

void check_encoding(const Tokenizer& t, const std::string& text) {
    const Encoding e = t.encode(text, true);
    ATTNSCOPE_FUZZ_CHECK(e.pieces.size() == e.size() && e.offsets.size() == e.size() && e.special.size() == e.size());
    bool all_known = true;
    for (std::size_t i = 0; i < e.size(); ++i) {
        if (e.offsets[i])
            ATTNSCOPE_FUZZ_CHECK(e.offsets[i]->start <= e.offsets[i]->end && e.offsets[i]->end <= text.size());
        if (!t.piece(e.ids[i])) {
            ATTNSCOPE_FUZZ_CHECK(!e.offsets[i]);  // only a post-processor's own ids may be unknown
            all_known = false;
        }
    }
    if (all_known) ATTNSCOPE_FUZZ_CHECK(fuzz::valid_utf8(t.decode(e.ids, false)));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view json = fuzz::as_bytes(data, size);
    fuzz::accepts([&] {
        const Tokenizer t = parse_tokenizer_json(json, "fuzz.json", fuzz::kMaxBytes);
        for (const char* text : kTexts) fuzz::accepts([&] { check_encoding(t, text); });
    });
    return 0;
}
