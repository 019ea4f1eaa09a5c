// The WordPiece model (BERT): each word is cut greedily, longest vocabulary entry first,
// the pieces after the first spelled with the continuing prefix ("##"); a word with a
// part that matches nothing, or longer than max_input_chars_per_word characters, is the
// unknown token whole.
#include <algorithm>

#include "attnscope/base/errors.hpp"
#include "attnscope/base/text.hpp"
#include "internal.hpp"

namespace attnscope::tok {
namespace {

class WordPiece final : public Model {
   public:
    WordPiece(const Node& m, Budget& budget)
        : Model(read_vocab(m.at("vocab"), budget)), where_(escape_control(m.file()) + ": " + m.path()) {
        unk_ = m.str_or("unk_token", "[UNK]");
        prefix_ = m.str_or("continuing_subword_prefix", "##");
        if (auto n = m.find("max_input_chars_per_word")) max_chars_ = n->count();
        for (const auto& [token, id] : vocab_.ids) longest_ = std::max(longest_, token.size());
    }
    void tokenize(std::string_view word, std::vector<Piece>& out) const override;

   private:
    std::uint32_t unk_id() const {
        const auto id = vocab_.id(unk_);
        if (!id) throw InputError(where_ + ".unk_token \"" + escape_control(unk_) + "\" is not in the vocabulary");
        return *id;
    }

    std::string unk_, prefix_;
    std::uint64_t max_chars_ = 100;
    std::size_t longest_ = 0;  // the longest vocabulary entry, in bytes
    std::string where_;
};

void WordPiece::tokenize(std::string_view word, std::vector<Piece>& out) const {
    const auto whole_unknown = [&] { out.push_back({unk_id(), 0, std::uint32_t(word.size())}); };
    std::uint64_t chars = 0;
    for (std::size_t k = 0, n = 0; k < word.size(); k += n, ++chars) decode_at(word, k, n);
    if (chars > max_chars_) return whole_unknown();
    const std::size_t first = out.size();
    std::string candidate;
    for (std::size_t start = 0; start < word.size();) {
        // No entry is longer than longest_: the candidates start there (at a character's
        // boundary), so that a word of n bytes costs n * longest_^2, not n^3.
        std::size_t end = word.size() - start > longest_ ? start + longest_ : word.size();
        while (end > start && end < word.size() && (static_cast<unsigned char>(word[end]) & 0xC0) == 0x80) --end;
        std::optional<std::uint32_t> found;
        while (end > start) {
            candidate.assign(start > 0 ? prefix_ : std::string());
            candidate.append(word.substr(start, end - start));
            if (const auto it = vocab_.ids.find(candidate); it != vocab_.ids.end()) {
                found = it->second;
                break;
            }
            do --end;  // back to the previous character boundary
            while (end > start && (static_cast<unsigned char>(word[end]) & 0xC0) == 0x80);
        }
        if (!found) {
            out.resize(first);
            return whole_unknown();
        }
        out.push_back({*found, std::uint32_t(start), std::uint32_t(end)});
        start = end;
    }
}

}  // namespace

std::unique_ptr<Model> make_wordpiece(const Node& model, Budget& budget) {
    return std::make_unique<WordPiece>(model, budget);
}

}  // namespace attnscope::tok
