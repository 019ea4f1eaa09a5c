// libFuzzer target: random bytes as the text to encode, through tokenizers built like real
// ones (the first byte picks one): GPT-2's byte-level BPE with every byte in its
// vocabulary; Llama 3's pre-tokenizer (its Split pattern, then ByteLevel) with NFC;
// a Llama 2 style SentencePiece BPE (Prepend, Replace, byte fallback, fused <unk>); BERT's
// pipeline (BertNormalizer, BertPreTokenizer, WordPiece, TemplateProcessing); and one with
// Metaspace, Digits, Punctuation and added tokens with lstrip, rstrip and single_word.
//
// Oracles, besides the sanitizers:
//  - text that is not well-formed UTF-8 is refused (InputError), anything else encodes;
//  - every offset lies within the text, start <= end, and every id has its piece;
//  - decode(ids) is well-formed UTF-8;
//  - through the byte-level tokenizers without a normalizer, decode(encode(text)) == text.
#include <string>
#include <vector>

#include "attnscope/tokenize/tokenizer.hpp"
#include "fuzz_common.hpp"

using namespace attnscope;

namespace {

// GPT-2's character for byte b, in UTF-8.
std::string byte_char(int b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    int cp = b;
    if (!printable) {
        cp = 0x100;
        for (int k = 0; k < b; ++k) {
            const bool p = (k >= 0x21 && k <= 0x7E) || (k >= 0xA1 && k <= 0xAC) || (k >= 0xAE && k <= 0xFF);
            if (!p) ++cp;
        }
    }
    std::string out;
    if (cp < 0x80) {
        out += char(cp);
    } else {
        out += char(0xC0 | (cp >> 6));
        out += char(0x80 | (cp & 0x3F));
    }
    return out == "\"" ? "\\\"" : out == "\\" ? "\\\\" : out;
}

// A byte-level BPE: every byte a token, and merges making "Ġthe", "Ġand", "ing", "er".
std::string byte_level(const std::string& pre_tokenizer, const std::string& normalizer) {
    std::string vocab;
    for (int b = 0; b < 256; ++b) vocab += "\"" + byte_char(b) + "\": " + std::to_string(b) + ", ";
    vocab +=
        R"("Ġt": 256, "he": 257, "Ġthe": 258, "Ġa": 259, "nd": 260, "Ġand": 261, "in": 262, "ing": 263, "er": 264, "<|endoftext|>": 265)";
    return R"({"added_tokens": [{"id": 265, "content": "<|endoftext|>", "special": true, "normalized": false}],
      "normalizer": )" +
           normalizer + R"(, "pre_tokenizer": )" + pre_tokenizer + R"(,
      "post_processor": {"type": "ByteLevel", "trim_offsets": true}, "decoder": {"type": "ByteLevel"},
      "model": {"type": "BPE", "vocab": {)" +
           vocab + R"(},
        "merges": ["Ġ t", "h e", "Ġt he", "Ġ a", "n d", "Ġa nd", "i n", "in g", "e r"]}})";
}

const char* const kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+)";

const char* const kSentencePiece = R"({
  "added_tokens": [{"id": 0, "content": "<unk>", "special": true, "normalized": false},
                   {"id": 1, "content": "<s>", "special": true, "normalized": false}],
  "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"},
                 {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
  "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                     {"Sequence": {"id": "A", "type_id": 0}}], "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
  "decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
              {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
  "model": {"type": "BPE", "unk_token": "<unk>", "fuse_unk": true, "byte_fallback": true,
    "vocab": {"<unk>": 0, "<s>": 1, "<0x0A>": 2, "<0xC3>": 3, "<0xA9>": 4, "<0xE2>": 5, "▁": 6, "a": 7, "▁a": 8, "b": 9, "ab": 10},
    "merges": ["▁ a", "a b"]}})";

const char* const kBert = R"({
  "added_tokens": [{"id": 0, "content": "[UNK]", "special": true, "normalized": false},
                   {"id": 1, "content": "[CLS]", "special": true, "normalized": false},
                   {"id": 2, "content": "[SEP]", "special": true, "normalized": false},
                   {"id": 3, "content": "[MASK]", "special": true, "normalized": false, "lstrip": true}],
  "normalizer": {"type": "BertNormalizer", "lowercase": true},
  "pre_tokenizer": {"type": "BertPreTokenizer"},
  "post_processor": {"type": "BertProcessing", "cls": ["[CLS]", 1], "sep": ["[SEP]", 2]},
  "decoder": {"type": "WordPiece"},
  "model": {"type": "WordPiece", "unk_token": "[UNK]", "max_input_chars_per_word": 20,
    "vocab": {"[UNK]": 0, "[CLS]": 1, "[SEP]": 2, "[MASK]": 3, "a": 4, "##a": 5, "b": 6, "##b": 7, "!": 8, "ab": 9}}})";

const char* const kMixed = R"({
  "added_tokens": [{"id": 20, "content": "ab", "single_word": true, "special": false, "normalized": true},
                   {"id": 21, "content": "<x>", "lstrip": true, "rstrip": true, "special": true, "normalized": false}],
  "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFKD"}, {"type": "StripAccents"}, {"type": "Lowercase"},
                 {"type": "Strip"}, {"type": "Replace", "pattern": {"Regex": "\\s+"}, "content": " "}]},
  "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Metaspace", "prepend_scheme": "first"},
                    {"type": "Digits", "individual_digits": true}, {"type": "Punctuation", "behavior": "Contiguous"}]},
  "decoder": {"type": "Metaspace", "prepend_scheme": "first"},
  "model": {"type": "BPE", "unk_token": "<unk>", "vocab": {"<unk>": 0, "▁": 1, "a": 2, "b": 3, "1": 4, "!": 5, "▁a": 6},
    "merges": ["▁ a"]}})";

struct Case {
    Tokenizer t;
    bool round_trip;  // byte-level without a normalizer: decode(encode(text)) == text
};

std::vector<Case> tokenizers() {
    std::vector<Case> out;
    out.push_back(
        {parse_tokenizer_json(byte_level(R"({"type": "ByteLevel", "add_prefix_space": false})", "null"), "gpt2"),
         true});
    const std::string llama3 =
        std::string(R"({"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": ")") +
        kLlama3Pattern +
        R"("}, "behavior": "Isolated"}, {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]})";
    out.push_back({parse_tokenizer_json(byte_level(llama3, "null"), "llama3"), true});
    out.push_back({parse_tokenizer_json(byte_level(llama3, R"({"type": "NFC"})"), "qwen"), false});
    out.push_back({parse_tokenizer_json(kSentencePiece, "llama2"), false});
    out.push_back({parse_tokenizer_json(kBert, "bert"), false});
    out.push_back({parse_tokenizer_json(kMixed, "mixed"), false});
    return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    static const std::vector<Case> cases = tokenizers();
    if (size == 0) return 0;
    const Case& c = cases[data[0] % cases.size()];
    const std::string text(fuzz::as_bytes(data + 1, size - 1));
    const bool utf8 = fuzz::valid_utf8(text);
    Encoding e;
    const bool accepted = fuzz::accepts([&] { e = c.t.encode(text, (data[0] & 0x80) != 0); });
    ATTNSCOPE_FUZZ_CHECK(accepted == utf8);
    if (!accepted) return 0;
    for (std::size_t i = 0; i < e.size(); ++i) {
        ATTNSCOPE_FUZZ_CHECK(c.t.piece(e.ids[i]).has_value());
        if (e.offsets[i])
            ATTNSCOPE_FUZZ_CHECK(e.offsets[i]->start <= e.offsets[i]->end && e.offsets[i]->end <= text.size());
    }
    const std::string decoded = c.t.decode(e.ids, false);
    ATTNSCOPE_FUZZ_CHECK(fuzz::valid_utf8(decoded));
    if (c.round_trip) ATTNSCOPE_FUZZ_CHECK(decoded == text);
    return 0;
}
