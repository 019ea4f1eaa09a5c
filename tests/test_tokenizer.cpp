// The tokenize layer, component by component, against expectations written by hand: most
// are the cases of the Hugging Face tokenizers library's own unit tests (its
// pre_tokenizers/{byte_level,split,metaspace,bert,whitespace,punctuation,digits}.rs,
// models/bpe/model.rs, processors/byte_level.rs, decoders/*.rs), the others worked out
// by hand in the comments. The whole-pipeline cases read the small tokenizer.json files of
// tests/fixtures/tokenizers/.
#include <doctest/doctest.h>

#include <string>
#include <tuple>
#include <vector>

#include "attnscope/base/errors.hpp"
#include "attnscope/io/read.hpp"
#include "attnscope/tokenize/tokenizer.hpp"
#include "internal.hpp"  // white-box: the components (tests/CMakeLists.txt adds src/tokenize)

using namespace attnscope;
using namespace attnscope::tok;

namespace {

const std::string kFile = "test.json";
const std::string kFixtures = std::string(ATTNSCOPE_SOURCE_DIR) + "/tests/fixtures/tokenizers/";

using Split = std::tuple<std::string, std::uint32_t, std::uint32_t>;  // piece, original start, end

std::vector<Split> splits_of(const std::vector<Text>& list) {
    std::vector<Split> out;
    for (const Text& t : list) out.emplace_back(t.text, t.align.front().start, t.align.back().end);
    return out;
}

// The words a pre-tokenizer (its JSON) makes of `text`, with their places in it.
std::vector<Split> pre_tokenized(const char* json, const std::string& text, std::uint32_t base = 0) {
    const nlohmann::json j = nlohmann::json::parse(json);
    std::vector<Text> list;
    make_pre_tokenizer(Node(j, "pre_tokenizer", kFile))(text_of(text, base),
                                                        [&](Text&& w) { list.push_back(std::move(w)); });
    return splits_of(list);
}

Text normalized(const char* json, const std::string& text) {
    const nlohmann::json j = nlohmann::json::parse(json);
    Text t = text_of(text);
    Budget budget;
    make_normalizer(Node(j, "normalizer", kFile))(t, budget);
    return t;
}

std::string decoded(const char* json, std::vector<std::string> tokens) {
    const nlohmann::json j = nlohmann::json::parse(json);
    make_decoder(Node(j, "decoder", kFile))(tokens);
    std::string out;
    for (const auto& t : tokens) out += t;
    return out;
}

std::vector<std::string> decoded_tokens(const char* json, std::vector<std::string> tokens) {
    const nlohmann::json j = nlohmann::json::parse(json);
    make_decoder(Node(j, "decoder", kFile))(tokens);
    return tokens;
}

// (id, start, end) of each piece a model (its JSON) makes of one word.
std::vector<std::tuple<std::uint32_t, std::uint32_t, std::uint32_t>> model_pieces(const char* json,
                                                                                  const std::string& word) {
    const nlohmann::json j = nlohmann::json::parse(json);
    Budget budget;
    const Node m(j, "model", kFile);
    const auto model = m.at("type").str() == "BPE" ? make_bpe(m, budget) : make_wordpiece(m, budget);
    std::vector<Piece> pieces;
    model->tokenize(word, pieces);
    std::vector<std::tuple<std::uint32_t, std::uint32_t, std::uint32_t>> out;
    for (const Piece& p : pieces) out.emplace_back(p.id, p.start, p.end);
    return out;
}

Tokenizer fixture(const std::string& name) { return load_tokenizer(kFixtures + name); }

std::string refusal(const std::string& json, std::size_t max_bytes = kNoLimit) {
    try {
        parse_tokenizer_json(json, "tok.json", max_bytes);
    } catch (const InputError& e) {
        return e.what();
    }
    return "(accepted)";
}

// A tokenizer.json around one component, with a one-character vocabulary.
std::string with(const std::string& key, const std::string& component) {
    return R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": []}, ")" + key + "\": " + component + "}";
}

}  // namespace

TEST_CASE("tokenize: GPT-2's byte table is a bijection with Ġ for a space and Ċ for a newline") {
    CHECK(byte_char(' ') == U'\u0120');
    CHECK(byte_char('\n') == U'\u010A');
    CHECK(byte_char('a') == U'a');
    for (int b = 0; b < 256; ++b) CHECK(char_byte(byte_char(static_cast<unsigned char>(b))) == b);
}

TEST_CASE("tokenize: ByteLevel pre-tokenizer (byte_level.rs pre_tokenization, no_regex_maps_whole_string)") {
    const std::vector<Split> want = {{"Hello", 0, 5},    {"Ġmy", 5, 8},   {"Ġfriend", 8, 15}, {",", 15, 16},
                                     {"Ġhow", 16, 20},   {"Ġis", 20, 23}, {"Ġyour", 23, 28},  {"Ġday", 28, 32},
                                     {"Ġgoing", 32, 38}, {"?", 38, 39}};
    CHECK(pre_tokenized(R"({"type": "ByteLevel", "add_prefix_space": false})",
                        "Hello my friend, how is your day going?") == want);
    CHECK(pre_tokenized(R"({"type": "ByteLevel", "use_regex": false})", "Hello my friend") ==
          std::vector<Split>{{"ĠHelloĠmyĠfriend", 0, 15}});
    // A multi-byte character: each of its bytes stands for the whole character's place.
    CHECK(pre_tokenized(R"({"type": "ByteLevel", "add_prefix_space": false})", "é") ==
          std::vector<Split>{{"Ã©", 0, 2}});
}

TEST_CASE("tokenize: Split's five behaviors, inverted (split.rs basic)") {
    const std::string text = "How are you doing?";
    auto split = [&](const char* behavior) {
        const std::string json =
            std::string(R"({"type": "Split", "pattern": {"Regex": "\\w+|[^\\w\\s]+"}, "behavior": ")") + behavior +
            R"(", "invert": true})";
        return pre_tokenized(json.c_str(), text);
    };
    CHECK(split("Removed") ==
          std::vector<Split>{{"How", 0, 3}, {"are", 4, 7}, {"you", 8, 11}, {"doing", 12, 17}, {"?", 17, 18}});
    CHECK(split("Isolated") == std::vector<Split>{{"How", 0, 3},
                                                  {" ", 3, 4},
                                                  {"are", 4, 7},
                                                  {" ", 7, 8},
                                                  {"you", 8, 11},
                                                  {" ", 11, 12},
                                                  {"doing", 12, 17},
                                                  {"?", 17, 18}});
    CHECK(split("MergedWithPrevious") ==
          std::vector<Split>{{"How ", 0, 4}, {"are ", 4, 8}, {"you ", 8, 12}, {"doing", 12, 17}, {"?", 17, 18}});
    CHECK(split("MergedWithNext") ==
          std::vector<Split>{{"How", 0, 3}, {" are", 3, 7}, {" you", 7, 11}, {" doing", 11, 17}, {"?", 17, 18}});
    CHECK(
        split("Contiguous") ==
        std::vector<Split>{
            {"How", 0, 3}, {" ", 3, 4}, {"are", 4, 7}, {" ", 7, 8}, {"you", 8, 11}, {" ", 11, 12}, {"doing?", 12, 18}});
    // split.rs invert: removing " " equals keeping only "Hello" (removing the inverse)
    CHECK(pre_tokenized(R"({"type": "Split", "pattern": {"String": " "}, "behavior": "Removed", "invert": false})",
                        "Hello Hello Hello") ==
          pre_tokenized(R"({"type": "Split", "pattern": {"String": "Hello"}, "behavior": "Removed", "invert": true})",
                        "Hello Hello Hello"));
    // A string pattern is literal: "." is not "any character".
    CHECK(pre_tokenized(R"({"type": "Split", "pattern": {"String": "."}, "behavior": "Isolated"})", "a.b") ==
          std::vector<Split>{{"a", 0, 1}, {".", 1, 2}, {"b", 2, 3}});
}

TEST_CASE("tokenize: Metaspace (metaspace.rs basic, multiple_spaces; prepend_scheme first and never)") {
    CHECK(pre_tokenized(R"({"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always"})", "Hey friend!") ==
          std::vector<Split>{{"▁Hey", 0, 3}, {"▁friend!", 3, 11}});
    CHECK(pre_tokenized(R"({"type": "Metaspace", "replacement": "▁", "add_prefix_space": true})", "Hey   friend!") ==
          std::vector<Split>{{"▁Hey", 0, 3}, {"▁", 3, 4}, {"▁", 4, 5}, {"▁friend!", 5, 13}});
    CHECK(pre_tokenized(R"({"type": "Metaspace", "prepend_scheme": "never"})", "Hey friend!") ==
          std::vector<Split>{{"Hey", 0, 3}, {"▁friend!", 3, 11}});
    // "first": only a piece that starts the text (e.g. not one after an added token)
    CHECK(pre_tokenized(R"({"type": "Metaspace", "prepend_scheme": "first"})", "Hey") ==
          std::vector<Split>{{"▁Hey", 0, 3}});
    CHECK(pre_tokenized(R"({"type": "Metaspace", "prepend_scheme": "first"})", "Hey", 5) ==
          std::vector<Split>{{"Hey", 5, 8}});
    CHECK(pre_tokenized(R"({"type": "Metaspace", "prepend_scheme": "always"})", "Hey", 5) ==
          std::vector<Split>{{"▁Hey", 5, 8}});
    CHECK(pre_tokenized(R"({"type": "Metaspace", "split": false})", "Hey friend") ==
          std::vector<Split>{{"▁Hey▁friend", 0, 10}});
}

TEST_CASE("tokenize: BertPreTokenizer, Whitespace, WhitespaceSplit, Punctuation, Digits (their .rs tests)") {
    CHECK(pre_tokenized(R"({"type": "BertPreTokenizer"})", "Hey friend!     How are you?!?") ==
          std::vector<Split>{{"Hey", 0, 3},
                             {"friend", 4, 10},
                             {"!", 10, 11},
                             {"How", 16, 19},
                             {"are", 20, 23},
                             {"you", 24, 27},
                             {"?", 27, 28},
                             {"!", 28, 29},
                             {"?", 29, 30}});
    CHECK(pre_tokenized(R"({"type": "Whitespace"})", "Hey man!") ==
          std::vector<Split>{{"Hey", 0, 3}, {"man", 4, 7}, {"!", 7, 8}});
    CHECK(pre_tokenized(R"({"type": "Whitespace"})", "\n").empty());
    CHECK(pre_tokenized(R"({"type": "WhitespaceSplit"})", "Hey man!") ==
          std::vector<Split>{{"Hey", 0, 3}, {"man!", 4, 8}});
    CHECK(pre_tokenized(R"({"type": "Punctuation"})", "Hey friend!     How are you?!?") ==
          std::vector<Split>{{"Hey friend", 0, 10},
                             {"!", 10, 11},
                             {"     How are you", 11, 27},
                             {"?", 27, 28},
                             {"!", 28, 29},
                             {"?", 29, 30}});
    CHECK(pre_tokenized(R"({"type": "Digits", "individual_digits": true})", "Hey 123 friend!") ==
          std::vector<Split>{{"Hey ", 0, 4}, {"1", 4, 5}, {"2", 5, 6}, {"3", 6, 7}, {" friend!", 7, 15}});
    CHECK(pre_tokenized(R"({"type": "Digits", "individual_digits": false})", "Hey 123 friend!") ==
          std::vector<Split>{{"Hey ", 0, 4}, {"123", 4, 7}, {" friend!", 7, 15}});
    CHECK(
        pre_tokenized(
            R"({"type": "Sequence", "pretokenizers": [{"type": "WhitespaceSplit"}, {"type": "Digits", "individual_digits": true}]})",
            "Hey 12") == std::vector<Split>{{"Hey", 0, 3}, {"1", 4, 5}, {"2", 5, 6}});
}

TEST_CASE("tokenize: normalizers, and each byte's place in the input") {
    CHECK(normalized(R"({"type": "Strip", "strip_left": true, "strip_right": true})", "  This is an example  ").text ==
          "This is an example");
    CHECK(normalized(R"({"type": "Prepend", "prepend": "▁"})", "Hello").text == "▁Hello");
    CHECK(normalized(R"({"type": "Prepend", "prepend": "▁"})", "").text.empty());
    CHECK(
        normalized(R"({"type": "Replace", "pattern": {"String": "''"}, "content": "\""})", "This is a ''test''").text ==
        "This is a \"test\"");
    CHECK(normalized(R"({"type": "Replace", "pattern": {"Regex": "\\s+"}, "content": " "})",
                     "This     is   a         test")
              .text == "This is a test");
    CHECK(normalized(R"({"type": "Lowercase"})", "HELLO Ünïcode İ").text == "hello ünïcode i\u0307");
    // é (U+00E9) <-> e + U+0301; ﬁ -> fi; ① -> 1
    CHECK(normalized(R"({"type": "NFD"})", "\u00e9").text == "e\u0301");
    CHECK(normalized(R"({"type": "NFC"})", "e\u0301").text == "\u00e9");
    CHECK(normalized(R"({"type": "NFKC"})", "\ufb01").text == "fi");
    CHECK(normalized(R"({"type": "NFKD"})", "\u2460").text == "1");
    CHECK(normalized(R"({"type": "Sequence", "normalizers": [{"type": "NFD"}, {"type": "StripAccents"}]})", "élégant")
              .text == "elegant");
    // BERT: \t -> space, NUL dropped, CJK padded, accents stripped, lower case
    CHECK(normalized(R"({"type": "BertNormalizer", "lowercase": true})",
                     std::string("H\u00e9llo\tWORLD\0 \u4e2d\u56fd", 20))
              .text == "hello world  \u4e2d  \u56fd ");
    // NFD's two characters both come from the é at bytes [1, 3) of "xé".
    const Text t = normalized(R"({"type": "NFD"})", "x\u00e9");
    REQUIRE(t.text.size() == 4);
    CHECK(t.original(1, 2).start == 1);
    CHECK(t.original(1, 4).end == 3);
}

TEST_CASE("tokenize: BPE merges by rank, as model.rs's tests") {
    // model.rs test_tokenize_with_and_without_dropout: "unrelated" is one token
    const char* unrelated = R"({"type": "BPE", "vocab": {"u": 0, "n": 1, "r": 2, "e": 3, "l": 4, "a": 5, "t": 6, "d": 7,
        "re": 8, "at": 9, "ed": 10, "un": 11, "ated": 12, "rel": 13, "related": 14, "unrelated": 15},
        "merges": ["r e", "a t", "e d", "u n", "at ed", "re l", "rel ated", "un related"]})";
    using P = std::vector<std::tuple<std::uint32_t, std::uint32_t, std::uint32_t>>;
    CHECK(model_pieces(unrelated, "unrelated") == P{{15, 0, 9}});
    CHECK(model_pieces(unrelated, "unrelated") == P{{15, 0, 9}});  // again, from the cache
    CHECK(model_pieces(unrelated, "ate") == P{{9, 0, 2}, {3, 2, 3}});
    // byte_fallback (test_bpe_byte_fallback, _newline): <0xNN> for an unknown character's bytes
    const char* fallback = R"({"type": "BPE", "vocab": {"<unk>": 0, "<0x61>": 1, "<0x0A>": 2}, "merges": [],
        "unk_token": "<unk>", "byte_fallback": true})";
    CHECK(model_pieces(fallback, "c") == P{{0, 0, 1}});
    CHECK(model_pieces(fallback, "a") == P{{1, 0, 1}});
    CHECK(model_pieces(fallback, "\n") == P{{2, 0, 1}});
    // fuse_unk: unknown characters in a row are one <unk>
    CHECK(model_pieces(
              R"({"type": "BPE", "vocab": {"<unk>": 0, "a": 1}, "merges": [], "unk_token": "<unk>", "fuse_unk": true})",
              "cca") == P{{0, 0, 2}, {1, 2, 3}});
    CHECK(model_pieces(R"({"type": "BPE", "vocab": {"<unk>": 0, "a": 1}, "merges": [], "unk_token": "<unk>"})",
                       "cca") == P{{0, 0, 1}, {0, 1, 2}, {1, 2, 3}});
    // no unk_token: an unknown character is dropped (and, as in the library, the offsets
    // count only the characters kept)
    CHECK(model_pieces(R"({"type": "BPE", "vocab": {"a": 0}, "merges": []})", "bab") == P{{0, 0, 1}});
    // ignore_merges (test_ignore_merges): a word in the vocabulary is taken whole
    const std::string ignore = R"({"type": "BPE", "vocab": {".:.:": 0, "Ġbelirtilen": 1, ".": 2, ":": 3, "bel": 4,
        "irtilen": 5, "Ġ": 6, ".:": 7, "belirtilen": 8, ".:.": 9, "be": 10, "l": 11, "ir": 12, "ti": 13, "en": 14,
        "irtil": 15, "irti": 16, "i": 17, "r": 18, "t": 19, "b": 20, "e": 21, "n": 22},
        "merges": [". :", "b e", "be l", "i r", "t i", "ir ti", "e n", "irti l"], "ignore_merges": )";
    CHECK(model_pieces((ignore + "true}").c_str(), ".:.:") == P{{0, 0, 4}});
    CHECK(model_pieces((ignore + "true}").c_str(), "Ġbelirtilen") == P{{1, 0, 12}});
    CHECK(model_pieces((ignore + "false}").c_str(), ".:.:") == P{{7, 0, 2}, {7, 2, 4}});
    CHECK(model_pieces((ignore + "false}").c_str(), "Ġbelirtilen") ==
          P{{6, 0, 2}, {4, 2, 5}, {15, 5, 10}, {14, 10, 12}});
    // merges as pairs, and a continuing_subword_prefix (the merged token drops b's prefix)
    CHECK(model_pieces(R"({"type": "BPE", "vocab": {"a": 0, "##b": 1, "##c": 2, "ab": 3, "abc": 4},
        "merges": [["a", "##b"], ["ab", "##c"]], "continuing_subword_prefix": "##"})",
                       "abc") == P{{4, 0, 3}});
    // end_of_word_suffix on the last character
    CHECK(model_pieces(R"({"type": "BPE", "vocab": {"a": 0, "b</w>": 1, "ab</w>": 2}, "merges": ["a b</w>"],
        "end_of_word_suffix": "</w>"})",
                       "ab") == P{{2, 0, 2}});
}

TEST_CASE("tokenize: WordPiece, longest first, ## after the first piece") {
    const char* bert = R"({"type": "WordPiece", "unk_token": "[UNK]", "vocab": {"[UNK]": 0, "un": 1, "##aff": 2,
        "##able": 3, "aff": 4}, "max_input_chars_per_word": 100})";
    using P = std::vector<std::tuple<std::uint32_t, std::uint32_t, std::uint32_t>>;
    CHECK(model_pieces(bert, "unaffable") == P{{1, 0, 2}, {2, 2, 5}, {3, 5, 9}});
    CHECK(model_pieces(bert, "unx") == P{{0, 0, 3}});
    CHECK(model_pieces(R"({"type": "WordPiece", "vocab": {"[UNK]": 0, "un": 1, "##aff": 2, "##able": 3},
        "max_input_chars_per_word": 5})",
                       "unaffable") == P{{0, 0, 9}});
}

TEST_CASE("tokenize: WordPiece's candidates start at the longest entry, on a character's boundary") {
    // The longest entry, "##é", is 4 bytes: from "a" (byte 0) the first candidate would end
    // inside the second "é" (bytes 1-2, 3-4), so it starts at byte 3: "aé", then "a".
    const char* json = R"({"type": "WordPiece", "unk_token": "[UNK]", "vocab": {"[UNK]": 0, "a": 1, "\u00e9": 2,
        "##\u00e9": 3, "##a": 4}, "max_input_chars_per_word": 1000000})";
    using P = std::vector<std::tuple<std::uint32_t, std::uint32_t, std::uint32_t>>;
    CHECK(model_pieces(json, "a\u00e9\u00e9a") == P{{1, 0, 1}, {3, 1, 3}, {3, 3, 5}, {4, 5, 6}});
    CHECK(model_pieces(json, "\u00e9a") == P{{2, 0, 2}, {4, 2, 3}});
    CHECK(model_pieces(json, "ab") == P{{0, 0, 2}});
    // a word of 20,000 letters: 20,000 pieces, each found among 4 candidates (before: the
    // word's length of candidates each, 2 * 10^8 string builds)
    const P long_word = model_pieces(json, std::string(20000, 'a'));
    REQUIRE(long_word.size() == 20000);
    CHECK(long_word.back() == std::make_tuple(4u, 19999u, 20000u));
}

TEST_CASE("tokenize: decoders (decoders/*.rs tests)") {
    CHECK(decoded(R"({"type": "ByteLevel"})", {"Hello", "Ġmy", "Ġfriend", ",", "Ġhow", "Ġis", "Ġyour", "Ġday", "Ġgoing",
                                               "?"}) == "Hello my friend, how is your day going?");
    // an incomplete character is U+FFFD
    CHECK(decoded(R"({"type": "ByteLevel"})", {"Ã"}) == "\ufffd");
    using V = std::vector<std::string>;
    CHECK(decoded_tokens(R"({"type": "ByteFallback"})", {"<0x61>"}) == V{"a"});
    CHECK(decoded_tokens(R"({"type": "ByteFallback"})", {"<0xE5>", "<0x8f>", "<0xab>"}) == V{"叫"});
    CHECK(decoded_tokens(R"({"type": "ByteFallback"})", {"<0xE5>", "<0x8f>", "<0xab>", "a"}) == V{"叫", "a"});
    CHECK(decoded_tokens(R"({"type": "ByteFallback"})", {"<0xE5>", "<0x8f>", "a"}) == V{"\ufffd", "\ufffd", "a"});
    CHECK(decoded_tokens(R"({"type": "Fuse"})", {"Hey", " friend!"}) == V{"Hey friend!"});
    CHECK(decoded_tokens(R"({"type": "Strip", "content": "H", "start": 1, "stop": 0})", {"Hey", " friend!", "HHH"}) ==
          V{"ey", " friend!", "HH"});
    CHECK(decoded_tokens(R"({"type": "Strip", "content": "y", "start": 0, "stop": 1})", {"Hey", " friend!", "HHH"}) ==
          V{"He", " friend!", "HHH"});
    CHECK(decoded(R"({"type": "WordPiece", "prefix": "##", "cleanup": true})",
                  {"##uelo", "Ara", "##új", "##o", "No", "##guera"}) == "##uelo Araújo Noguera");
    CHECK(decoded_tokens(R"({"type": "Metaspace", "replacement": "▁", "add_prefix_space": true})",
                         {"▁Hey", "▁friend!"}) == V{"Hey", " friend!"});
    CHECK(decoded_tokens(R"({"type": "Metaspace", "prepend_scheme": "never"})", {"▁Hey", "▁friend!"}) ==
          V{" Hey", " friend!"});
    CHECK(decoded(R"({"type": "Replace", "pattern": {"String": "_"}, "content": " "})", {"Hello", "_Hello"}) ==
          "Hello Hello");
    // a token with a character outside GPT-2's table keeps its own bytes, between two that are in it
    CHECK(decoded(R"({"type": "ByteLevel"})", {"Hello", "Ġ\u2603", "Ġx"}) == "HelloĠ\u2603 x");
}

TEST_CASE("tokenize: clean_up_tokenization as transformers' (str.replace, pattern after pattern)") {
    // Python's str.replace of each pair in turn, as transformers' clean_up_tokenization
    CHECK(clean_up_tokenization("a . b , c ' d do n't it 's we 're  . .") == "a. b, c'd don't it's we're ..");
    CHECK(clean_up_tokenization(" ' ' ' ") == "'''");
    // many matches: one pass each, not a move of the rest of the text per match
    std::string many, expected;
    for (int i = 0; i < 200000; ++i) many += "x .", expected += "x.";
    CHECK(clean_up_tokenization(many) == expected);
}

TEST_CASE("tokenize: ByteLevel post-processor trims offsets (processors/byte_level.rs processor_trims_offsets)") {
    std::vector<Token> tokens;
    const std::vector<std::pair<std::string, Span>> in = {
        {"Ġ", {0, 1}}, {"ĠĠĠĠHelloĠĠ", {0, 11}}, {"ĠĠHello", {11, 18}}, {"HelloĠĠ", {18, 25}}, {"ĠĠĠĠ", {25, 29}}};
    for (const auto& [p, s] : in) tokens.push_back({0, p, s, false});
    const nlohmann::json j =
        nlohmann::json::parse(R"({"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true})");
    make_post_processor(Node(j, "post_processor", kFile))(tokens, true);
    const std::vector<std::pair<std::uint32_t, std::uint32_t>> want = {{0, 0}, {4, 9}, {13, 18}, {18, 23}, {29, 29}};
    for (std::size_t i = 0; i < want.size(); ++i) {
        CAPTURE(i);
        CHECK(tokens[i].offsets->start == want[i].first);
        CHECK(tokens[i].offsets->end == want[i].second);
    }
}

TEST_CASE("tokenize: a byte-level BPE tokenizer.json whole (GPT-2's pipeline)") {
    const Tokenizer t = fixture("bytelevel_bpe");
    // "Hello" merges H e, l l, ll o, He llo; "Ġworld" merges Ġ w, o r, Ġw or, l d, Ġwor ld
    const Encoding e = t.encode("Hello world!\n");
    CHECK(e.ids == std::vector<std::uint32_t>{12, 17, 18, 19});
    CHECK(e.pieces == std::vector<std::string>{"Hello", "Ġworld", "!", "Ċ"});
    REQUIRE(e.offsets[1]);
    CHECK(e.offsets[1]->start == 5);
    CHECK(e.offsets[1]->end == 11);
    CHECK(t.decode(e.ids) == "Hello world!\n");
    CHECK(t.readable_piece(17) == "␣world");
    CHECK(t.readable_piece(19) == "\\n");
    // the special token is cut out first; an unknown character with no unk_token is dropped
    const Encoding s = t.encode("Hello<|endoftext|>Hz");
    CHECK(s.ids == std::vector<std::uint32_t>{12, 0, 1});
    CHECK(s.special == std::vector<bool>{false, true, false});
    CHECK(t.decode(s.ids, true) == "HelloH");
    CHECK_THROWS_AS(t.decode({99}), InputError);
    CHECK_THROWS_AS(t.encode("\xff"), InputError);
    // its tokenizer_config.json says clean_up_tokenization_spaces: "Hello" "Ġ" "!" decodes as
    // transformers decodes it, "Hello!"; the tokenizer.json alone (the library) keeps the space
    CHECK(t.decode({12, 5, 18}) == "Hello!");
    const std::string json = attnscope::read_file(kFixtures + "bytelevel_bpe/tokenizer.json");
    CHECK(parse_tokenizer_json(json, "tokenizer.json").decode({12, 5, 18}) == "Hello !");
}

TEST_CASE("tokenize: a BERT tokenizer.json whole (normalizer, WordPiece, template, added token with lstrip)") {
    const Tokenizer t = fixture("wordpiece_bert");
    const Encoding e = t.encode("Hello World! unaffable Café");
    CHECK(e.ids == std::vector<std::uint32_t>{2, 5, 6, 7, 8, 9, 10, 11, 3});
    CHECK(!e.offsets[0]);
    CHECK(e.special.front());
    CHECK(e.special.back());
    // "cafe" comes from "Café" at bytes [23, 28): é is two bytes
    REQUIRE(e.offsets[7]);
    CHECK(e.offsets[7]->start == 23);
    CHECK(e.offsets[7]->end == 28);
    CHECK(t.decode(e.ids) == "[CLS] hello world! unaffable cafe [SEP]");
    CHECK(t.encode("Hello", false).ids == std::vector<std::uint32_t>{5});
    // [MASK] has lstrip: it takes the space before it
    const Encoding m = t.encode("hello [MASK]");
    CHECK(m.ids == std::vector<std::uint32_t>{2, 5, 4, 3});
    REQUIRE(m.offsets[2]);
    CHECK(m.offsets[2]->start == 5);
    CHECK(m.offsets[2]->end == 12);
}

TEST_CASE("tokenize: a SentencePiece-style BPE tokenizer.json whole (Prepend, byte fallback, fused <unk>)") {
    const Tokenizer t = fixture("sentencepiece_bpe");
    const Encoding e = t.encode("Hi there\n\u00e9");
    CHECK(e.ids == std::vector<std::uint32_t>{1, 10, 19, 3, 4, 5});
    REQUIRE(e.offsets[1]);
    CHECK(e.offsets[1]->start == 0);  // the prepended ▁ stands in the place of "H"
    CHECK(e.offsets[1]->end == 2);
    CHECK(e.offsets[4]->start == 9);  // both bytes of é point at the whole character
    CHECK(e.offsets[5]->end == 11);
    CHECK(t.decode(e.ids) == "<s> Hi there\n\u00e9");
    CHECK(t.decode(e.ids, true) == "Hi there\n\u00e9");
    CHECK(t.encode("Hizz").ids == std::vector<std::uint32_t>{1, 10, 0});
    CHECK(t.readable_piece(10) == "▁Hi");
    CHECK(t.readable_piece(3) == "<0x0A>");
}

TEST_CASE("tokenize: added tokens are matched longest first; single_word only between non-word characters") {
    const std::string json = R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "x": 2, " ": 3}, "merges": []},
        "added_tokens": [
          {"id": 10, "content": "ab", "special": false, "normalized": false},
          {"id": 11, "content": "abab", "special": false, "normalized": false},
          {"id": 12, "content": "xa", "single_word": true, "special": false, "normalized": false}]})";
    const Tokenizer t = parse_tokenizer_json(json, "added.json");
    CHECK(t.encode("ababab").ids == std::vector<std::uint32_t>{11, 10});
    CHECK(t.encode("bxa").ids == std::vector<std::uint32_t>{1, 2, 0});  // "xa" touches "b": not a single word
    CHECK(t.encode("b xa").ids == std::vector<std::uint32_t>{1, 3, 12});
}

TEST_CASE("tokenize: what cannot be followed, or lies, is refused in one line") {
    CHECK(refusal(R"({"model": {"type": "Unigram", "vocab": [["a", 0.0]]}})")
              .find("model.type: the model type \"Unigram\" is not supported") != std::string::npos);
    CHECK(refusal(with("normalizer", R"({"type": "Precompiled"})")).find("\"Precompiled\" is not supported") !=
          std::string::npos);
    CHECK(refusal(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a q"]}})")
              .find("model.merges[0]: the token \"q\" is not in the vocabulary") != std::string::npos);
    CHECK(refusal(R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": ["a b"]}})")
              .find("the merged token \"ab\"") != std::string::npos);
    CHECK(refusal(R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 0}, "merges": []}})")
              .find("the id 0 is given to two tokens") != std::string::npos);
    CHECK(refusal(with("pre_tokenizer", R"({"type": "Split", "pattern": {"Regex": "(a"}, "behavior": "Isolated"})"))
              .find("does not compile") != std::string::npos);
    CHECK(refusal(std::string(100000, '[') + std::string(100000, ']'))
              .find("objects and arrays nested more than 64 deep") != std::string::npos);
    CHECK(refusal(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})", 100).find("memory limit") !=
          std::string::npos);
    CHECK(refusal("{\"model\": 3}").find("model: expected an object") != std::string::npos);
    CHECK(refusal(R"({"model": {"type": "BPE", "vocab": {"a": 3000000000}, "merges": []}})").find("2^31") !=
          std::string::npos);
    CHECK(refusal(R"({"model": {"type": "BPE", "vocab": {"a": -1}, "merges": []}})")
              .find("model.vocab[\"a\"]: expected a non-negative integer, found the integer -1") != std::string::npos);
    CHECK(refusal(R"({"model": {"type": "BPE", "vocab": {"a": 70000000}, "merges": []}})")
              .find("model.vocab[\"a\"]: the id 70000000 is past the largest id") != std::string::npos);
    CHECK(refusal(R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b", ["a", 1]]}})")
              .find("model.merges[1][1]: expected a string, found the integer 1") != std::string::npos);
    CHECK(refusal(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a  a"]}})")
              .find("model.merges[0]: expected two tokens separated by one space") != std::string::npos);
    CHECK(refusal(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [["a"]]}})")
              .find("model.merges[0]: expected \"a b\" or [\"a\", \"b\"], found an array") != std::string::npos);
}

TEST_CASE("tokenize: a pattern from the file is bounded over the whole text, not per starting place") {
    // (?=a*a*a*b) costs n^3 steps at each of n places, each under PCRE2's own limit.
    const Regex counted("(?=a*a*a*b)a", "f.json: pre_tokenizer.pattern.Regex", true);
    const std::string text(3000, 'a');
    try {
        counted.find_all(text);
        FAIL("accepted");
    } catch (const InputError& e) {
        const std::string what = e.what();
        CHECK(what.find("f.json: pre_tokenizer.pattern.Regex: the regular expression takes more than 784384 steps on "
                        "a text of 3000 bytes") != std::string::npos);
        CHECK(what.find("backtracks without bound") != std::string::npos);
    }
    // an ordinary pattern, counted, on text it walks once
    const Regex words(R"('s|'t| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)", "f.json", true);
    std::string english;
    for (int i = 0; i < 20000; ++i) english += " It's 12 cats,  said\tshe.";
    CHECK(words.find_all(english).size() == 20000 * 10);
}

TEST_CASE("tokenize: a pattern that backtracks without bound is stopped by the match limit") {
    const std::string json =
        with("pre_tokenizer", R"({"type": "Split", "pattern": {"Regex": "(a+)+$"}, "behavior": "Isolated"})");
    const Tokenizer t = parse_tokenizer_json(json, "slow.json");
    std::string text(40, 'a');
    text += 'b';
    try {
        t.encode(text);
        FAIL("accepted");
    } catch (const InputError& e) {
        CHECK(std::string(e.what()).find("backtracks without bound") != std::string::npos);
    }
}
