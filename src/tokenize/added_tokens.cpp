// Added tokens, cut out of the text before the model sees it. As the library does: two
// sets, the tokens with "normalized": false matched on the raw text and the others
// (their content normalized too) on the normalized text; at each place the longest token
// that starts there (leftmost-longest); a single_word token only where no word character
// touches it (else it is passed over); lstrip and rstrip take in the whitespace beside it.
#include <array>

#include "internal.hpp"

namespace attnscope::tok {

// A byte trie of the tokens' contents.
struct AddedVocabulary::Trie {
    std::vector<std::unordered_map<unsigned char, std::uint32_t>> next{1};
    std::vector<int> token{-1};  // index into tokens() ending at this node, or -1
    std::array<bool, 256> first{};

    void insert(std::string_view s, int index) {
        if (s.empty()) return;
        std::uint32_t node = 0;
        for (unsigned char c : s) {
            auto it = next[node].find(c);
            if (it == next[node].end()) {
                it = next[node].emplace(c, std::uint32_t(next.size())).first;
                next.emplace_back();
                token.push_back(-1);
            }
            node = it->second;
        }
        token[node] = index;  // a later duplicate wins, as a later entry of the library's map
        first[static_cast<unsigned char>(s[0])] = true;
    }
    // The longest token starting at s[k]: (its index, its end), or index -1.
    std::pair<int, std::size_t> longest(std::string_view s, std::size_t k) const {
        std::pair<int, std::size_t> best{-1, k};
        std::uint32_t node = 0;
        for (std::size_t i = k; i < s.size(); ++i) {
            const auto it = next[node].find(static_cast<unsigned char>(s[i]));
            if (it == next[node].end()) break;
            node = it->second;
            if (token[node] >= 0) best = {token[node], i + 1};
        }
        return best;
    }
};

namespace {

bool is_word_char(char32_t c) { return c == '_' || is_alphanumeric(c) || is_mark_nonspacing(c); }

bool ends_with_word(std::string_view s, std::size_t at) {
    if (at == 0) return false;
    std::size_t k = at - 1, n = 0;
    while (k > 0 && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
    return is_word_char(decode_at(s, k, n));
}

bool starts_with_word(std::string_view s, std::size_t at) {
    std::size_t n = 0;
    return at < s.size() && is_word_char(decode_at(s, at, n));
}

// The start of the whitespace that ends s[floor, at).
std::size_t whitespace_before(std::string_view s, std::size_t at, std::size_t floor) {
    while (at > floor) {
        std::size_t k = at - 1, n = 0;
        while (k > floor && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
        if (!is_whitespace(decode_at(s, k, n))) break;
        at = k;
    }
    return at;
}

std::size_t whitespace_after(std::string_view s, std::size_t at) {
    for (std::size_t n = 0; at < s.size() && is_whitespace(decode_at(s, at, n));) at += n;
    return at;
}

}  // namespace

void AddedVocabulary::build(const Normalizer& normalizer, Budget& budget) {
    raw_ = std::make_shared<Trie>();
    normalized_ = std::make_shared<Trie>();
    for (std::size_t i = 0; i < tokens_.size(); ++i) {
        const AddedToken& t = tokens_[i];
        if (!t.normalized) {
            raw_->insert(t.content, int(i));
            continue;
        }
        Text n = text_of(t.content);
        normalizer(n, budget);
        normalized_->insert(n.text, int(i));
    }
}

std::vector<std::pair<Text, int>> AddedVocabulary::split(Text t, bool normalized) const {
    const Trie& trie = normalized ? *normalized_ : *raw_;
    const std::string_view s = t.text;
    std::vector<std::pair<Text, int>> out;
    std::size_t done = 0;  // end of the last match
    for (std::size_t k = 0; k < s.size();) {
        if (!trie.first[static_cast<unsigned char>(s[k])]) {
            ++k;
            continue;
        }
        auto [index, stop] = trie.longest(s, k);
        if (index < 0) {
            ++k;
            continue;
        }
        const AddedToken& token = tokens_[std::size_t(index)];
        std::size_t start = k;
        k = stop;
        if (token.single_word && (ends_with_word(s, start) || starts_with_word(s, stop))) continue;
        if (token.lstrip) start = whitespace_before(s, start, done);
        if (token.rstrip) stop = whitespace_after(s, stop);
        if (start > done) out.emplace_back(t.slice(done, start), -1);
        out.emplace_back(t.slice(start, stop), index);
        done = k = stop;
    }
    if (done < s.size()) out.emplace_back(done == 0 ? std::move(t) : t.slice(done, s.size()), -1);
    return out;
}

}  // namespace attnscope::tok
