// Pre-tokenizers: each cuts every Text of the list into words (and ByteLevel, Metaspace
// rewrite them). A cut keeps each byte's place in the input; empty pieces are dropped.
#include <algorithm>
#include <array>

#include "attnscope/base/errors.hpp"
#include "internal.hpp"

namespace attnscope::tok {
namespace {

// GPT-2's table: the printable bytes ('!'..'~', '¡'..'¬', '®'..'ÿ') stand for themselves,
// the other 68 for U+0100, U+0101, ... in the order of their values.
struct ByteTable {
    std::array<char32_t, 256> to_char{};
    std::array<int, 0x200> to_byte{};
    ByteTable() {
        to_byte.fill(-1);
        char32_t next = 0x100;
        for (int b = 0; b < 256; ++b) {
            const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
            to_char[std::size_t(b)] = printable ? char32_t(b) : next++;
            to_byte[to_char[std::size_t(b)]] = b;
        }
    }
};
const ByteTable& byte_table() {
    static const ByteTable t;
    return t;
}

const char* const kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Each character for which pred(c) holds, as one match.
template <typename P>
std::vector<std::pair<std::size_t, std::size_t>> char_matches(const std::string& s, P pred) {
    std::vector<std::pair<std::size_t, std::size_t>> out;
    for (std::size_t k = 0, n = 0; k < s.size(); k += n)
        if (pred(decode_at(s, k, n))) out.emplace_back(k, k + n);
    return out;
}

PreTokenizer make_step(const Node& n);  // one pre-tokenizer of tokenizer.json

// The pieces [b, e) of `t` handed on one by one.
void emit_ranges(const Text& t, const std::vector<std::pair<std::size_t, std::size_t>>& ranges, const Emit& emit) {
    for (const auto& [b, e] : ranges) emit(t.slice(b, e));
}

SplitBehavior behavior_of(const Node& n) {
    const std::string b = n.str();
    if (b == "Removed") return SplitBehavior::kRemoved;
    if (b == "Isolated") return SplitBehavior::kIsolated;
    if (b == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
    if (b == "MergedWithNext") return SplitBehavior::kMergedWithNext;
    if (b == "Contiguous") return SplitBehavior::kContiguous;
    n.fail("expected Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous");
}

// Bytes [b, e) of `t`, each as GPT-2's character for it, in that byte's place, into `out`
// (its storage reused from word to word).
void byte_chars(const Text& t, std::size_t b, std::size_t e, Text& out) {
    const auto& table = byte_table().to_char;
    out.text.clear();
    out.align.clear();
    for (std::size_t k = b; k < e; ++k) {
        const char32_t c = table[static_cast<unsigned char>(t.text[k])];
        if (c < 0x80) {
            out.text += char(c);
            out.align.push_back(t.align[k]);
        } else {
            out.text += char(0xC0 | (c >> 6));
            out.text += char(0x80 | (c & 0x3F));
            out.align.insert(out.align.end(), 2, t.align[k]);
        }
    }
}

PreTokenizer byte_level(const Node& n) {
    const bool prefix = n.bool_or("add_prefix_space", true), use_regex = n.bool_or("use_regex", true);
    static const std::shared_ptr<const Regex> gpt2 = std::make_shared<const Regex>(kGpt2Pattern, "GPT-2's pattern");
    return [=](Text&& t, const Emit& emit) {
        if (prefix && t.text[0] != ' ') prepend(t, " ");
        Text word;  // emptied and refilled for each word; emit may take it
        if (!use_regex) return byte_chars(t, 0, t.text.size(), word), emit(std::move(word));
        for (const auto& [b, e] : split_ranges(t.text.size(), gpt2->find_all(t.text), SplitBehavior::kIsolated)) {
            byte_chars(t, b, e, word);
            emit(std::move(word));
        }
    };
}

PreTokenizer metaspace(const Node& n) {
    const std::string replacement = n.str_or("replacement", "\xE2\x96\x81");
    std::string scheme = n.str_or("prepend_scheme", "");
    if (scheme.empty()) scheme = n.bool_or("add_prefix_space", true) ? "always" : "never";
    if (scheme != "always" && scheme != "first" && scheme != "never")
        n.at("prepend_scheme").fail("expected always, first or never");
    std::size_t rn = 0;
    const char32_t rep = replacement.empty() ? 0 : decode_at(replacement, 0, rn);
    if (rn != replacement.size()) n.at("replacement").fail("expected one character");
    const bool split = n.bool_or("split", true);
    return [=](Text&& t, const Emit& emit) {
        map_chars(t, [&](char32_t c, std::string& out) { c == ' ' ? void(out += replacement) : append_utf8(out, c); });
        const bool starts = t.text.compare(0, replacement.size(), replacement) == 0;
        if (!starts && (scheme == "always" || (scheme == "first" && t.align[0].start == 0))) prepend(t, replacement);
        if (!split) return emit(std::move(t));
        const auto matches = char_matches(t.text, [&](char32_t c) { return c == rep; });
        emit_ranges(t, split_ranges(t.text.size(), matches, SplitBehavior::kMergedWithNext), emit);
    };
}

PreTokenizer by_chars(bool (*pred)(char32_t), SplitBehavior behavior) {
    return [=](Text&& t, const Emit& emit) {
        emit_ranges(t, split_ranges(t.text.size(), char_matches(t.text, pred), behavior), emit);
    };
}

PreTokenizer by_regex(std::shared_ptr<const Regex> re, SplitBehavior behavior, bool invert) {
    return [=](Text&& t, const Emit& emit) {
        emit_ranges(t, split_ranges(t.text.size(), re->find_all(t.text), behavior, invert), emit);
    };
}

// Steps applied in turn (empty pieces dropped): each piece of one step goes through the
// next before the following piece is made, so that no list of every word is ever held.
void run_steps(const std::vector<PreTokenizer>& steps, std::size_t i, Text&& t, const Emit& emit) {
    if (t.text.empty()) return;
    if (i == steps.size()) return emit(std::move(t));
    steps[i](std::move(t), [&](Text&& piece) { run_steps(steps, i + 1, std::move(piece), emit); });
}

PreTokenizer chain(std::vector<PreTokenizer> steps) {
    return [steps = std::move(steps)](Text&& t, const Emit& emit) { run_steps(steps, 0, std::move(t), emit); };
}

PreTokenizer sequence(const Node& n) {
    const Node list = n.at("pretokenizers");
    list.expect_array();
    std::vector<PreTokenizer> steps;
    for (std::size_t i = 0; i < list.size(); ++i) steps.push_back(make_pre_tokenizer(list.at(i)));
    return chain(std::move(steps));
}

bool is_digit(char32_t c) { return is_numeric(c); }

}  // namespace

char32_t byte_char(unsigned char b) { return byte_table().to_char[b]; }

int char_byte(char32_t c) { return c < 0x200 ? byte_table().to_byte[c] : -1; }

std::vector<std::pair<std::size_t, std::size_t>> split_ranges(
    std::size_t size, const std::vector<std::pair<std::size_t, std::size_t>>& matches, SplitBehavior behavior,
    bool invert) {
    // 1) the whole text as alternating pieces: (start, end, is_match)
    struct Part {
        std::size_t b, e;
        bool match;
    };
    std::vector<Part> parts;
    parts.reserve(2 * matches.size() + 1);
    std::size_t at = 0;
    for (const auto& [b, e] : matches) {
        if (b > at) parts.push_back({at, b, invert});
        parts.push_back({b, e, !invert});
        at = e;
    }
    if (at < size || parts.empty()) parts.push_back({at, size, invert});
    // 2) the behavior: which pieces are dropped, which are joined to a neighbour
    std::vector<Part> kept;
    kept.reserve(parts.size());
    if (behavior == SplitBehavior::kMergedWithNext) {
        bool previous = false;
        for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
            if (it->match && !previous && !kept.empty())
                kept.back().b = it->b;
            else
                kept.push_back({it->b, it->e, false});
            previous = it->match;
        }
        std::reverse(kept.begin(), kept.end());
    } else {
        bool previous = false;
        for (const Part& p : parts) {
            const bool join =
                !kept.empty() && ((behavior == SplitBehavior::kMergedWithPrevious && p.match && !previous) ||
                                  (behavior == SplitBehavior::kContiguous && p.match == previous));
            if (join)
                kept.back().e = p.e;
            else if (!(behavior == SplitBehavior::kRemoved && p.match))
                kept.push_back({p.b, p.e, false});
            previous = p.match;
        }
    }
    // 3) the pieces, empty ones dropped
    std::vector<std::pair<std::size_t, std::size_t>> out;
    out.reserve(kept.size());
    for (const Part& p : kept)
        if (p.e > p.b) out.emplace_back(p.b, p.e);
    return out;
}

std::vector<Text> split_text(const Text& t, const std::vector<std::pair<std::size_t, std::size_t>>& matches,
                             SplitBehavior behavior, bool invert) {
    std::vector<Text> out;
    for (const auto& [b, e] : split_ranges(t.text.size(), matches, behavior, invert))
        out.push_back(b == 0 && e == t.text.size() ? t : t.slice(b, e));
    return out;
}

PreTokenizer make_pre_tokenizer(const Node& n) { return chain({make_step(n)}); }

namespace {

PreTokenizer make_step(const Node& n) {
    if (n.is_null()) return [](Text&& t, const Emit& emit) { emit(std::move(t)); };
    const std::string type = n.at("type").str();
    if (type == "ByteLevel") return byte_level(n);
    if (type == "Metaspace") return metaspace(n);
    if (type == "Sequence") return sequence(n);
    if (type == "Split")
        return by_regex(pattern_of(n.at("pattern")), behavior_of(n.at("behavior")), n.bool_or("invert", false));
    if (type == "Whitespace")
        return by_regex(std::make_shared<const Regex>(R"(\w+|[^\w\s]+)", n.path() + " (Whitespace)"),
                        SplitBehavior::kRemoved, true);
    if (type == "WhitespaceSplit") return by_chars(is_whitespace, SplitBehavior::kRemoved);
    if (type == "Punctuation") {
        const auto b = n.find("behavior");
        return by_chars(is_punctuation, b ? behavior_of(*b) : SplitBehavior::kIsolated);
    }
    if (type == "Digits")
        return by_chars(is_digit,
                        n.bool_or("individual_digits", false) ? SplitBehavior::kIsolated : SplitBehavior::kContiguous);
    if (type == "BertPreTokenizer")
        return chain(
            {by_chars(is_whitespace, SplitBehavior::kRemoved), by_chars(is_punctuation, SplitBehavior::kIsolated)});
    if (type == "CharDelimiterSplit") {
        const std::string d = n.at("delimiter").str();
        return by_regex(std::make_shared<const Regex>(regex_escape(d), n.path()), SplitBehavior::kRemoved, false);
    }
    n.at("type").fail("the pre-tokenizer \"" + type +
                      "\" is not supported (attnscope reads ByteLevel, Split, Metaspace, BertPreTokenizer, "
                      "Whitespace, WhitespaceSplit, Punctuation, Digits, CharDelimiterSplit, Sequence)");
}

}  // namespace

}  // namespace attnscope::tok
