// The tokenize layer's inner pieces, shared by its files (not a public header).
//
//   json_value.cpp     tokenizer.json read under a depth and memory bound; typed access
//   unicode.cpp        UTF-8, Unicode categories and normalization (utf8proc), regexes (PCRE2)
//   normalizers.cpp    NFC ... Sequence, on a Text that keeps each byte's place in the input
//   pre_tokenizers.cpp ByteLevel, Split, Metaspace, Bert, Whitespace, Punctuation, Digits ...
//   bpe.cpp            the BPE model (merge loop on a priority queue, cache of words)
//   wordpiece.cpp      the WordPiece model
//   added_tokens.cpp   added tokens cut out of the text before the model
//   post_processors.cpp TemplateProcessing, BertProcessing, RobertaProcessing, ByteLevel
//   decoders.cpp       ids back to text
//   tokenizer.cpp      the pipeline, tokenizer.json and the older vocabulary files
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "attnscope/base/text.hpp"
#include "attnscope/tokenize/tokenizer.hpp"

namespace attnscope::tok {

// ---- JSON ------------------------------------------------------------------------------

// A value of tokenizer.json with its path ("model.merges[3]") for messages.
class Node {
   public:
    Node(const nlohmann::json& j, std::string path, const std::string& file)
        : j_(&j), path_(std::move(path)), file_(&file) {}
    const nlohmann::json& json() const { return *j_; }
    const std::string& path() const { return path_; }
    const std::string& file() const { return *file_; }
    bool is_null() const { return j_->is_null(); }
    // The member `key` (required), or nullopt when absent or null.
    Node at(const std::string& key) const;
    std::optional<Node> find(const std::string& key) const;
    Node at(std::size_t i) const;
    std::size_t size() const;  // of an array or object
    std::string str() const;
    bool boolean() const;
    std::uint32_t id() const;     // a token id: an integer 0..2^31-1
    std::uint64_t count() const;  // a non-negative integer
    void expect_object() const;
    void expect_array() const;
    // Optional members with defaults.
    std::string str_or(const std::string& key, const std::string& fallback) const;
    bool bool_or(const std::string& key, bool fallback) const;
    // "FILE: PATH: WHAT" as an InputError.
    [[noreturn]] void fail(const std::string& what) const;

   private:
    const nlohmann::json* j_;
    std::string path_;
    const std::string* file_;
};

// `text` parsed as JSON by the io layer's reader (parse_json_tree: nesting deeper than
// kMaxJsonDepth refused, the tree bounded by `max_bytes` as it grows); `used`, when
// given, receives the bytes the tree and text take.
nlohmann::json parse_json_bounded(std::string_view text, const std::string& origin, std::size_t max_bytes,
                                  std::size_t* used = nullptr);

// What the tokenizer holds in memory, against the limit.
struct Budget {
    std::size_t used = 0, max = kNoLimit;
    std::string origin;
    void add(std::size_t bytes);  // MemoryLimitError past `max`
    // The same, the message "WHAT past the memory limit of N MiB (--max-memory)".
    void add(std::size_t bytes, const std::string& what);
};

// "a JSON string" / "an integer" ...: for messages.
std::string json_kind(const nlohmann::json& j);

// The code point at s[k] (valid UTF-8 assumed; a stray byte counts as one) and its length.
// Inline for ASCII: every character of a text and of its pieces goes through it.
char32_t decode_multibyte_at(std::string_view s, std::size_t k, std::size_t& len);
inline char32_t decode_at(std::string_view s, std::size_t k, std::size_t& len) {
    const auto c = static_cast<unsigned char>(s[k]);
    if (c < 0x80) return len = 1, c;
    return decode_multibyte_at(s, k, len);
}

// ---- text with its places in the input ----------------------------------------------

// Bytes [start, end) of the original text that a byte of a transformed text came from.
struct Span {
    std::uint32_t start = 0, end = 0;
};

// A piece of text after normalization and pre-tokenization: its bytes and, for each
// byte, the original bytes it came from. align.size() == text.size().
struct Text {
    std::string text;
    std::vector<Span> align;
    // The original span of bytes [b, e) of `text` (e > b).
    Span original(std::size_t b, std::size_t e) const { return {align[b].start, align[e - 1].end}; }
    Text slice(std::size_t b, std::size_t e) const;
};

// Rebuilds `t` character by character: f(c, out) appends what c becomes (nothing to
// remove it); every byte appended takes c's place in the input.
template <typename F>
void map_chars(Text& t, F&& f) {
    Text out;
    out.text.reserve(t.text.size());
    out.align.reserve(t.text.size());
    for (std::size_t k = 0; k < t.text.size();) {
        std::size_t n = 0;
        const char32_t c = decode_at(t.text, k, n);
        const Span sp = t.original(k, k + n);
        f(c, out.text);
        out.align.resize(out.text.size(), sp);
        k += n;
    }
    t = std::move(out);
}

// `s` put before a non-empty `t`, in the place of t's first character.
void prepend(Text& t, const std::string& s);

// Identity alignment: byte k of `s` comes from byte base + k... of its code point.
Text text_of(std::string_view s, std::uint32_t base = 0);

// ---- Unicode ---------------------------------------------------------------------------
// (append_utf8, decode_utf8: base/text.hpp)

// `s` with each ill-formed part replaced by U+FFFD, as Rust's String::from_utf8_lossy.
std::string utf8_lossy(std::string_view s);
bool is_whitespace(char32_t c);       // Rust's char::is_whitespace (White_Space)
bool is_punctuation(char32_t c);      // ASCII punctuation or a Unicode P* category
bool is_control(char32_t c);          // Cc/Cf/Cn/Co but not \t \n \r (BERT's clean_text)
bool is_mark_nonspacing(char32_t c);  // Mn
bool is_numeric(char32_t c);          // Nd/Nl/No (Rust's char::is_numeric)
bool is_alphanumeric(char32_t c);     // L* or N*
bool is_chinese(char32_t c);          // the CJK blocks BERT pads with spaces
std::string lowercase(char32_t c);    // full lower-case mapping
// One of "NFC", "NFD", "NFKC", "NFKD" of a short string.
std::string unicode_normalize(std::string_view s, const std::string& form);

// A compiled PCRE2 pattern (UTF + UCP, JIT where available) with a match limit.
class Regex {
   public:
    // `where` names it in messages ("FILE: pre_tokenizer.pattern.Regex"). A `counted`
    // pattern (one read from a file) has the steps of a whole find_all bounded too,
    // linearly in the subject's length.
    Regex(const std::string& pattern, std::string where, bool counted = false);
    ~Regex();
    Regex(const Regex&) = delete;
    Regex& operator=(const Regex&) = delete;
    // Every non-overlapping match [start, end) of `s`, left to right; an empty match
    // moves on by one character. InputError when a limit is reached.
    std::vector<std::pair<std::size_t, std::size_t>> find_all(std::string_view s) const;

   private:
    void* code_ = nullptr;     // pcre2_code_8
    void* context_ = nullptr;  // pcre2_match_context_8
    void* stack_ = nullptr;    // pcre2_jit_stack_8
    std::string where_;
    std::uint64_t steps_per_byte_ = 0;  // a counted pattern's bound; 0: not counted
};

// The pattern that matches `literal` exactly.
std::string regex_escape(std::string_view literal);

// A pattern of tokenizer.json: {"String": s} or {"Regex": r}, compiled.
std::shared_ptr<const Regex> pattern_of(const Node& n);

// ---- components ------------------------------------------------------------------------

// A normalizer rewrites a Text; what the text grows by is charged to the Budget
// (kEncodeBytesPerByte a byte, before the bytes are made where it can grow without
// bound: a Sequence of Replace steps each doubling the text).
using Normalizer = std::function<void(Text&, Budget&)>;
Normalizer make_normalizer(const Node& n);  // null → identity
// What encoding holds per byte of text, at most: the text and its alignment twice over
// (normalized, pre-tokenized), and a token per byte in the worst case.
constexpr std::size_t kEncodeBytesPerByte = 96;

// A pre-tokenizer cuts a Text into words, handing each to `emit` in order (empty words
// are never handed on).
using Emit = std::function<void(Text&&)>;
using PreTokenizer = std::function<void(Text&&, const Emit&)>;
PreTokenizer make_pre_tokenizer(const Node& n);
// The matches' places, and how the pieces between and around them are kept.
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };
// The pieces [start, end) of a text of `size` bytes cut at `matches` (sorted, disjoint)
// and kept by `behavior` (the library's SplitDelimiterBehavior); empty pieces dropped.
std::vector<std::pair<std::size_t, std::size_t>> split_ranges(
    std::size_t size, const std::vector<std::pair<std::size_t, std::size_t>>& matches, SplitBehavior behavior,
    bool invert = false);
std::vector<Text> split_text(const Text& t, const std::vector<std::pair<std::size_t, std::size_t>>& matches,
                             SplitBehavior behavior, bool invert = false);
// GPT-2's byte ↔ character table: byte b is shown as the character byte_char(b).
char32_t byte_char(unsigned char b);
// The byte a character stands for, or -1.
int char_byte(char32_t c);

// One token of a word: its id and bytes [start, end) of the word.
struct Piece {
    std::uint32_t id;
    std::uint32_t start, end;
};

// Hashing of std::string that also finds by std::string_view (no string built to look up).
struct StringHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>()(s); }
};
template <typename V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

// Ids stop below this (2^26), the model's and the added tokens' alike: ids are indices
// of a table, and a vocabulary of 64 million tokens is not a real one.
constexpr std::uint32_t kMaxVocab = 1u << 26;

// A model's vocabulary: token → id and id → token. Ids need not be dense.
struct Vocab {
    StringMap<std::uint32_t> ids;
    std::vector<std::string> tokens;  // by id; "" where no token has that id
    std::vector<bool> present;        // by id
    std::optional<std::uint32_t> id(std::string_view t) const {
        const auto it = ids.find(t);
        return it == ids.end() ? std::nullopt : std::optional<std::uint32_t>(it->second);
    }
};
// A vocabulary object {"token": id, ...}, refusing duplicate ids and memory overuse.
Vocab read_vocab(const Node& n, Budget& budget);

// A model cuts one word into pieces of its vocabulary.
class Model {
   public:
    explicit Model(Vocab vocab) : vocab_(std::move(vocab)) {}
    virtual ~Model() = default;
    virtual void tokenize(std::string_view word, std::vector<Piece>& out) const = 0;
    const Vocab& vocab() const { return vocab_; }
    // The token of `id`, or nullptr.
    const std::string* token(std::uint32_t id) const {
        return id < vocab_.present.size() && vocab_.present[id] ? &vocab_.tokens[id] : nullptr;
    }

   protected:
    Vocab vocab_;
};
std::unique_ptr<Model> make_bpe(const Node& model, Budget& budget);
std::unique_ptr<Model> make_wordpiece(const Node& model, Budget& budget);

// One token of the output, before and after post-processing.
struct Token {
    std::uint32_t id;
    std::string piece;
    std::optional<Span> offsets;
    bool special = false;
};

// The added tokens: cut out of the text before the model.
struct AddedToken {
    std::uint32_t id = 0;
    std::string content;
    bool single_word = false, lstrip = false, rstrip = false, normalized = false, special = false;
};
class AddedVocabulary {
   public:
    void add(AddedToken t) { tokens_.push_back(std::move(t)); }
    // Built once the normalizer is known (normalized tokens are matched normalized).
    void build(const Normalizer& normalizer, Budget& budget);
    const std::vector<AddedToken>& tokens() const { return tokens_; }
    // Splits `t` at the tokens whose `normalized` flag is `normalized`: pieces of text
    // (index -1) and matches (index into tokens()).
    std::vector<std::pair<Text, int>> split(Text t, bool normalized) const;

   private:
    struct Trie;
    std::vector<AddedToken> tokens_;
    std::shared_ptr<Trie> raw_, normalized_;
};

// Post-processing: adds special tokens (when `add_special`), adjusts offsets.
using PostProcessor = std::function<void(std::vector<Token>&, bool add_special)>;
PostProcessor make_post_processor(const Node& n);
// A Span's bytes [start, end) trimmed of the spaces the piece starts or ends with
// (ByteLevel's and RoBERTa's trim_offsets).
void trim_byte_level_offsets(std::vector<Token>& tokens, bool add_prefix_space);

// Decoding: the tokens' strings to text.
using Decoder = std::function<void(std::vector<std::string>&)>;  // the chain, in place
Decoder make_decoder(const Node& n);
// transformers' clean_up_tokenization: the space before . ? ! , and in "n't", "'m", "'s",
// "'ve", "'re", " ' " removed (decode() does it when tokenizer_config.json asks).
std::string clean_up_tokenization(std::string s);

// ---- the whole ---------------------------------------------------------------------------

struct Pipeline {
    std::string source;
    Normalizer normalizer;
    PreTokenizer pre_tokenizer;
    std::unique_ptr<Model> model;
    AddedVocabulary added;
    std::unordered_map<std::uint32_t, std::size_t> added_by_id;  // id → index in added.tokens()
    PostProcessor post_processor;
    Decoder decoder;
    bool has_decoder = false;
    bool clean_up_spaces = false;  // tokenizer_config.json's clean_up_tokenization_spaces
    bool byte_level = false;       // pieces are GPT-2 byte-level characters
    Budget budget;                 // what it holds, and the memory limit it was read under
};

}  // namespace attnscope::tok
