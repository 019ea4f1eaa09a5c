// attnscope — tokenize layer: a model's own tokenizer, read from its tokenizer.json (as the
// Hugging Face tokenizers library writes it), or from GPT-2's vocab.json + merges.txt or
// BERT's vocab.txt, giving the ids that library gives.
//
// The pipeline is the library's: added tokens are cut out of the text first (those with
// "normalized": false on the raw text, the others after normalization), the rest is
// normalized, pre-tokenized into words, each word is cut into pieces by the model (BPE or
// WordPiece), and the post-processor adds the special tokens. Offsets are byte offsets
// into the UTF-8 text, end exclusive. What cannot be followed (a Unigram or WordLevel
// model, an unknown normalizer, ...) is refused by name with InputError.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "attnscope/io/array.hpp"  // kNoLimit

namespace attnscope {

// A token's place in the text: bytes [start, end) of the UTF-8 input.
struct ByteSpan {
    std::size_t start = 0, end = 0;
};

// The result of encode(): one entry per token, in order. Tokens added by the
// post-processor have no offsets (nullopt).
struct Encoding {
    std::vector<std::uint32_t> ids;
    std::vector<std::string> pieces;               // the vocabulary's string of each id ("Ġworld")
    std::vector<std::optional<ByteSpan>> offsets;  // into the text; nullopt for added specials
    std::vector<bool> special;                     // a special token (post-processor's or added)
    std::size_t size() const { return ids.size(); }
};

namespace tok {
struct Pipeline;
}

class Tokenizer {
   public:
    // The tokens of `text` (valid UTF-8, else InputError naming the byte offset), with
    // the post-processor's special tokens when `add_special` (the library's default).
    Encoding encode(std::string_view text, bool add_special = true) const;
    // `ids` spelled back into text by the decoder; special tokens left out when
    // `skip_special`. An id outside the vocabulary is an InputError.
    std::string decode(const std::vector<std::uint32_t>& ids, bool skip_special = false) const;
    // The vocabulary's string of `id` (an added token's content), or nullopt.
    std::optional<std::string> piece(std::uint32_t id) const;
    // `id`'s piece as a person reads it: byte-level characters turned back into their
    // bytes (Ġ a space, shown as "␣"; Ċ a newline, shown as "\n"), control characters
    // escaped; "▁", "##" and "<0x0A>" kept as they are.
    std::string readable_piece(std::uint32_t id) const;
    // One more than the largest id (model vocabulary and added tokens).
    std::size_t vocab_size() const;
    // Where it was read from, as shown in messages.
    const std::string& source() const;

    explicit Tokenizer(std::shared_ptr<const tok::Pipeline> p) : p_(std::move(p)) {}

   private:
    std::shared_ptr<const tok::Pipeline> p_;
};

// Reads a tokenizer: `path` is a tokenizer.json file, or a folder holding tokenizer.json,
// else vocab.json + merges.txt (GPT-2 byte-level BPE), else vocab.txt (BERT WordPiece).
// A tokenizer_config.json beside tokenizer.json is read for one key: with
// "clean_up_tokenization_spaces": true, decode() removes the space before . ? ! , and in
// "n't", "'s", ... as transformers' decode does (the tokenizers library itself never does).
// Everything it holds, the parsed JSON included, is bounded by `max_bytes`
// (MemoryLimitError past it). InputError with the file and key for anything malformed.
Tokenizer load_tokenizer(const std::string& path, std::size_t max_bytes = kNoLimit);

// The same from the text of a tokenizer.json already in memory; `origin` names it.
Tokenizer parse_tokenizer_json(std::string_view json, const std::string& origin, std::size_t max_bytes = kNoLimit);

}  // namespace attnscope
