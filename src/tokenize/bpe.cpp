// The BPE model: a word starts as one symbol per character (unknown characters as their
// <0xNN> bytes with byte_fallback, else the unknown token), then the pair of adjacent
// symbols whose merge has the lowest rank is merged, again and again, until no pair has a
// merge. The pairs wait in a priority queue (rank, then position), as the Hugging Face
// library does: O(n log n) per word, not a rescan after each merge. Words already seen
// are answered from a cache.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <queue>

#include "attnscope/base/errors.hpp"
#include "attnscope/base/text.hpp"
#include "internal.hpp"

namespace attnscope::tok {

Vocab read_vocab(const Node& n, Budget& budget) {
    n.expect_object();
    Vocab v;
    v.ids.reserve(n.size());
    for (auto it = n.json().begin(); it != n.json().end(); ++it) {
        const std::string& token = it.key();
        // The node (and its path for messages) is made only for an id that is not plain.
        const auto node = [&] { return Node(*it, n.path() + "[\"" + clip_fragment(token, 40) + "\"]", n.file()); };
        const std::uint32_t id = it->is_number_unsigned() && it->get<std::uint64_t>() < kMaxVocab
                                     ? std::uint32_t(it->get<std::uint64_t>())
                                     : node().id();
        budget.add(2 * token.size() + 96);
        if (id >= kMaxVocab)
            node().fail("the id " + std::to_string(id) + " is past the largest id attnscope takes (2^26 - 1)");
        if (id >= v.tokens.size()) {
            budget.add((std::size_t(id) + 1 - v.tokens.size()) * sizeof(std::string));
            v.tokens.resize(std::size_t(id) + 1), v.present.resize(std::size_t(id) + 1);
        }
        if (v.present[id])
            node().fail("the id " + std::to_string(id) + " is given to two tokens (\"" +
                        escape_control(clip_fragment(v.tokens[id], 40)) + "\" too)");
        v.present[id] = true;
        v.tokens[id] = token;
        v.ids.emplace(token, id);
    }
    return v;
}

namespace {

// Words kept (the library keeps 10,000; a text of a megabyte has more distinct words, and
// each costs about 100 bytes).
constexpr std::size_t kCacheWords = 100'000;
constexpr std::size_t kCachedLength = 256;  // longer words are not kept

struct Merge {
    std::uint32_t rank, id;
};
std::uint64_t pair_key(std::uint32_t a, std::uint32_t b) { return std::uint64_t(a) << 32 | b; }

// The merges by pair of ids: open addressing with linear probing on a multiplicative hash
// (the lookups are most of the work of a word not seen before).
class MergeTable {
   public:
    void reserve(std::size_t n) {
        std::size_t cap = 16;
        while (cap < 2 * n) cap *= 2;
        keys_.assign(cap, kEmpty);
        values_.resize(cap);
        shift_ = 64 - unsigned(__builtin_ctzll(cap));
    }
    // Sets the merge of `key` (replacing an earlier one). reserve() must have room.
    void set(std::uint64_t key, Merge m) {
        std::size_t i = slot(key);
        while (keys_[i] != kEmpty && keys_[i] != key) i = (i + 1) & (keys_.size() - 1);
        keys_[i] = key, values_[i] = m;
    }
    const Merge* find(std::uint64_t key) const {
        if (keys_.empty()) return nullptr;
        for (std::size_t i = slot(key);; i = (i + 1) & (keys_.size() - 1)) {
            if (keys_[i] == key) return &values_[i];
            if (keys_[i] == kEmpty) return nullptr;
        }
    }

   private:
    static constexpr std::uint64_t kEmpty = ~std::uint64_t(0);  // ids are below 2^26
    std::size_t slot(std::uint64_t key) const { return std::size_t((key * 0x9E3779B97F4A7C15ull) >> shift_); }
    std::vector<std::uint64_t> keys_;
    std::vector<Merge> values_;
    unsigned shift_ = 64;
};

// A word's hash: eight bytes at a time, each multiplied in (the cache's lookups are most of
// the work of a word seen before, and most words are).
std::uint64_t word_hash(std::string_view w) {
    constexpr std::uint64_t kMul = 0x9E3779B97F4A7C15ull;
    std::uint64_t h = 0x243F6A8885A308D3ull ^ w.size();
    for (std::size_t k = 0; k < w.size(); k += 8) {
        std::uint64_t chunk = 0;
        std::memcpy(&chunk, w.data() + k, std::min<std::size_t>(8, w.size() - k));
        h = (h ^ chunk) * kMul;
        h ^= h >> 29;
    }
    return h ^ (h >> 32);
}

// The pieces of words already seen: open addressing with linear probing; the words' bytes
// and pieces live in two pools (no allocation per word). At most kCacheWords words.
class WordCache {
   public:
    // Appends the pieces of `word` to `out` when it is kept; whether it was.
    bool find(std::string_view word, std::uint64_t h, std::vector<Piece>& out) const {
        if (slots_.empty()) return false;
        for (std::size_t i = h & (slots_.size() - 1);; i = (i + 1) & (slots_.size() - 1)) {
            const Slot& e = slots_[i];
            if (e.key_len == 0) return false;
            if (e.hash == h && std::string_view(bytes_).substr(e.key, e.key_len) == word) {
                out.insert(out.end(), pieces_.begin() + e.piece, pieces_.begin() + e.piece + e.count);
                return true;
            }
        }
    }
    // Keeps `word` (not empty) and its `n` pieces, while there is room. A word two threads
    // both add is kept twice, harmlessly: the first is found.
    void add(std::string_view word, std::uint64_t h, const Piece* first, std::size_t n) {
        if (size_ >= kCacheWords) return;
        if (2 * (size_ + 1) > slots_.size()) grow();
        const Slot e{h, std::uint32_t(bytes_.size()), std::uint32_t(word.size()), std::uint32_t(pieces_.size()),
                     std::uint32_t(n)};
        bytes_.append(word);
        pieces_.insert(pieces_.end(), first, first + n);
        place(e);
        ++size_;
    }

   private:
    struct Slot {
        std::uint64_t hash = 0;
        std::uint32_t key = 0, key_len = 0;  // in bytes_; key_len 0: an empty slot
        std::uint32_t piece = 0, count = 0;  // in pieces_
    };
    void place(const Slot& e) {
        std::size_t i = e.hash & (slots_.size() - 1);
        while (slots_[i].key_len != 0) i = (i + 1) & (slots_.size() - 1);
        slots_[i] = e;
    }
    void grow() {
        std::vector<Slot> old(slots_.empty() ? 1024 : 2 * slots_.size());
        old.swap(slots_);
        for (const Slot& e : old)
            if (e.key_len != 0) place(e);
    }
    std::vector<Slot> slots_;
    std::string bytes_;
    std::vector<Piece> pieces_;
    std::size_t size_ = 0;
};

struct Symbol {
    std::uint32_t id;
    std::uint32_t len;  // bytes of the word; 0 once merged into its left neighbour
    int prev, next;
};

class Bpe final : public Model {
   public:
    Bpe(const Node& m, Budget& budget);
    void tokenize(std::string_view word, std::vector<Piece>& out) const override;

   private:
    void read_merges(const Node& merges, Budget& budget);
    std::vector<Symbol> initial_symbols(std::string_view word) const;
    void merge_all(std::vector<Symbol>& s) const;

    MergeTable merges_;
    std::vector<std::int32_t> char_ids_;  // id of each one-character token below U+0800, or -1
    std::optional<std::string> unk_;
    std::string prefix_, suffix_;  // continuing_subword_prefix, end_of_word_suffix
    bool byte_fallback_ = false, fuse_unk_ = false, ignore_merges_ = false;
    std::string where_;
    mutable std::mutex mutex_;
    mutable WordCache cache_;
};

Bpe::Bpe(const Node& m, Budget& budget)
    : Model(read_vocab(m.at("vocab"), budget)), where_(escape_control(m.file()) + ": " + m.path()) {
    if (auto u = m.find("unk_token")) unk_ = u->str();
    prefix_ = m.str_or("continuing_subword_prefix", "");
    suffix_ = m.str_or("end_of_word_suffix", "");
    byte_fallback_ = m.bool_or("byte_fallback", false);
    fuse_unk_ = m.bool_or("fuse_unk", false);
    ignore_merges_ = m.bool_or("ignore_merges", false);
    if (auto merges = m.find("merges")) read_merges(*merges, budget);
    char_ids_.assign(0x800, -1);
    for (const auto& [token, id] : vocab_.ids) {
        std::size_t n = 0;
        const char32_t c = token.empty() ? 0 : decode_at(token, 0, n);
        if (n == token.size() && c < 0x800) char_ids_[c] = std::int32_t(id);
    }
}

// Each merge "a b" or ["a", "b"]: both tokens and their join (b without the subword
// prefix) must be in the vocabulary. A later duplicate replaces an earlier one.
void Bpe::read_merges(const Node& merges, Budget& budget) {
    merges.expect_array();
    budget.add(merges.size() * 64);
    merges_.reserve(merges.size());
    std::string joined;  // reused: no allocation per merge
    for (std::size_t i = 0; i < merges.size(); ++i) {
        const nlohmann::json& j = merges.json()[i];
        // The node (and its path for messages) is made only to refuse the merge.
        const auto m = [&] { return merges.at(i); };
        std::string_view a, b;
        if (j.is_string()) {
            const std::string& line = j.get_ref<const std::string&>();
            const auto space = line.find(' ');
            if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos)
                m().fail("expected two tokens separated by one space");
            a = std::string_view(line).substr(0, space), b = std::string_view(line).substr(space + 1);
        } else {
            if (!j.is_array() || j.size() != 2) m().fail("expected \"a b\" or [\"a\", \"b\"], found " + json_kind(j));
            for (std::size_t k = 0; k < 2; ++k)
                if (!j[k].is_string()) m().at(k).str();  // refuses it
            a = j[0].get_ref<const std::string&>(), b = j[1].get_ref<const std::string&>();
        }
        const auto ia = vocab_.id(a), ib = vocab_.id(b);
        if (!ia) m().fail("the token \"" + escape_control(clip_fragment(a, 40)) + "\" is not in the vocabulary");
        if (!ib) m().fail("the token \"" + escape_control(clip_fragment(b, 40)) + "\" is not in the vocabulary");
        if (b.compare(0, prefix_.size(), prefix_) != 0)
            m().fail("the second token lacks the continuing_subword_prefix");
        joined.assign(a).append(b.substr(prefix_.size()));
        const auto ij = vocab_.id(joined);
        if (!ij)
            m().fail("the merged token \"" + escape_control(clip_fragment(joined, 40)) + "\" is not in the vocabulary");
        merges_.set(pair_key(*ia, *ib), {std::uint32_t(i), *ij});
    }
}

// One symbol per character, as the library builds a word (its quirks kept: a pending
// unknown is added after a character's fallback bytes; with no unk_token an unknown
// character is dropped).
std::vector<Symbol> Bpe::initial_symbols(std::string_view word) const {
    std::vector<Symbol> s;
    s.reserve(word.size());
    auto add = [&](std::uint32_t id, std::uint32_t len) { s.push_back({id, len, int(s.size()) - 1, -1}); };
    bool unk = false;  // an unknown token pending: its id and bytes
    std::uint32_t unk_id = 0, unk_len = 0;
    const bool plain = prefix_.empty() && suffix_.empty();
    std::string spelled;
    for (std::size_t k = 0, n = 0; k < word.size(); k += n) {
        n = utf8_sequence_length(word, k);
        if (n == 0) n = 1;
        std::string_view c = word.substr(k, n);  // the character, with prefix and suffix
        if (plain && n <= 2) {                   // below U+0800: a table
            std::size_t len = 0;
            const std::int32_t id = char_ids_[decode_at(word, k, len)];
            if (id >= 0) {
                if (unk) add(unk_id, unk_len), unk = false;
                add(std::uint32_t(id), std::uint32_t(n));
                continue;
            }
        } else if (!plain) {
            spelled.assign(k > 0 ? prefix_ : std::string());
            spelled.append(c);
            if (k + n == word.size()) spelled += suffix_;
            c = spelled;
        }
        if (const auto it = vocab_.ids.find(c); it != vocab_.ids.end()) {
            if (unk) add(unk_id, unk_len), unk = false;
            add(it->second, std::uint32_t(n));
            continue;
        }
        if (byte_fallback_) {
            std::vector<std::uint32_t> bytes;
            for (unsigned char b : c) {
                char hex[8];
                std::snprintf(hex, sizeof hex, "<0x%02X>", b);
                const auto id = vocab_.id(hex);
                if (!id) break;
                bytes.push_back(*id);
            }
            if (bytes.size() == c.size()) {
                for (std::uint32_t id : bytes) add(id, 1);
                continue;
            }
        }
        if (!unk_) continue;
        const auto u = vocab_.id(*unk_);
        if (!u) throw InputError(where_ + ".unk_token \"" + escape_control(*unk_) + "\" is not in the vocabulary");
        if (unk && fuse_unk_) {
            unk_len += std::uint32_t(n);
        } else {
            if (unk) add(unk_id, unk_len);
            unk = true, unk_id = *u, unk_len = std::uint32_t(n);
        }
    }
    if (unk) add(unk_id, unk_len);
    for (auto& sym : s) sym.next = -1;
    for (std::size_t i = 0; i + 1 < s.size(); ++i) s[i].next = int(i + 1);
    return s;
}

void Bpe::merge_all(std::vector<Symbol>& s) const {
    struct Candidate {
        std::uint32_t rank, pos, id;
        bool operator<(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    std::priority_queue<Candidate> queue;
    auto offer = [&](int left) {
        if (left < 0 || s[std::size_t(left)].next < 0) return;
        const Merge* m = merges_.find(pair_key(s[std::size_t(left)].id, s[std::size_t(s[std::size_t(left)].next)].id));
        if (m) queue.push({m->rank, std::uint32_t(left), m->id});
    };
    for (std::size_t i = 0; i + 1 < s.size(); ++i) offer(int(i));
    while (!queue.empty()) {
        const Candidate top = queue.top();
        queue.pop();
        Symbol& left = s[top.pos];
        if (left.len == 0 || left.next < 0) continue;
        Symbol& right = s[std::size_t(left.next)];
        const Merge* m = merges_.find(pair_key(left.id, right.id));
        if (!m || m->id != top.id) continue;  // the pair changed since
        left.id = top.id;
        left.len += right.len;
        right.len = 0;
        left.next = right.next;
        if (left.next >= 0) s[std::size_t(left.next)].prev = int(top.pos);
        offer(left.prev);
        offer(int(top.pos));
    }
}

void Bpe::tokenize(std::string_view word, std::vector<Piece>& out) const {
    if (word.empty()) return;
    if (ignore_merges_)
        if (const auto it = vocab_.ids.find(word); it != vocab_.ids.end()) {
            out.push_back({it->second, 0, std::uint32_t(word.size())});
            return;
        }
    const bool cacheable = word.size() <= kCachedLength;
    const std::uint64_t h = cacheable ? word_hash(word) : 0;
    if (cacheable) {
        std::lock_guard<std::mutex> lock(mutex_);
        if (cache_.find(word, h, out)) return;
    }
    std::vector<Symbol> s = initial_symbols(word);
    merge_all(s);
    const std::size_t first = out.size();
    std::uint32_t at = 0;
    for (const Symbol& sym : s) {
        if (sym.len == 0) continue;
        const std::uint32_t end = std::min<std::uint32_t>(at + sym.len, std::uint32_t(word.size()));
        out.push_back({sym.id, std::min(at, end), end});
        at = end;
    }
    if (cacheable) {
        std::lock_guard<std::mutex> lock(mutex_);
        cache_.add(word, h, out.data() + first, out.size() - first);
    }
}

}  // namespace

std::unique_ptr<Model> make_bpe(const Node& model, Budget& budget) { return std::make_unique<Bpe>(model, budget); }

}  // namespace attnscope::tok
