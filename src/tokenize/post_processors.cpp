// Post-processors: the special tokens around the sequence (TemplateProcessing's single
// template, BERT's [CLS] A [SEP], RoBERTa's <s> A </s>), only when special tokens are
// asked for; and ByteLevel's and RoBERTa's offsets trimmed of the spaces a piece holds.
#include "attnscope/base/errors.hpp"
#include "attnscope/base/text.hpp"
#include "internal.hpp"

namespace attnscope::tok {

namespace {

// How many characters of `piece` are blank (a byte-level space or whitespace) at its
// start and at its end (both the whole count when every one is), in one pass.
std::pair<std::size_t, std::size_t> blanks_around(std::string_view piece) {
    const char32_t space = byte_char(' ');
    std::size_t leading = 0, trailing = 0;
    bool before_text = true;
    for (std::size_t k = 0, n = 0; k < piece.size(); k += n) {
        const char32_t c = decode_at(piece, k, n);
        if (c == space || is_whitespace(c)) {
            leading += before_text;
            ++trailing;
        } else {
            before_text = false;
            trailing = 0;
        }
    }
    return {leading, trailing};
}

}  // namespace

void trim_byte_level_offsets(std::vector<Token>& tokens, bool add_prefix_space) {
    for (std::size_t i = 0; i < tokens.size(); ++i) {
        Token& t = tokens[i];
        if (!t.offsets) continue;
        auto [leading, trailing] = blanks_around(t.piece);
        Span& o = *t.offsets;
        // A single space the pre-tokenizer put before the first word is not in the text.
        if (leading == 1 && add_prefix_space && (i == 0 || o.start == 0)) leading = 0;
        if (leading > 0) o.start = std::min<std::uint32_t>(o.start + std::uint32_t(leading), o.end);
        if (trailing > 0 && o.end >= trailing)
            o.end = std::max<std::uint32_t>(o.end - std::uint32_t(trailing), o.start);
    }
}

namespace {

Token special_token(std::uint32_t id, std::string piece) { return Token{id, std::move(piece), std::nullopt, true}; }

// ["[SEP]", 102]
Token pair_token(const Node& n) {
    if (!n.json().is_array() || n.size() != 2) n.fail("expected [\"token\", id], found " + json_kind(n.json()));
    return special_token(n.at(1).id(), n.at(0).str());
}

PostProcessor around(Token first, Token last, bool trim, bool prefix_space) {
    return [=](std::vector<Token>& tokens, bool add_special) {
        if (trim) trim_byte_level_offsets(tokens, prefix_space);
        if (!add_special) return;
        tokens.insert(tokens.begin(), first);
        tokens.push_back(last);
    };
}

// {"single": [{"SpecialToken": {"id": "<s>"}}, {"Sequence": {"id": "A"}}], "special_tokens":
// {"<s>": {"ids": [1], "tokens": ["<s>"]}}}
PostProcessor template_processing(const Node& n) {
    const Node single = n.at("single");
    single.expect_array();
    const auto specials = n.find("special_tokens");
    // Each item: the tokens it stands for, or nullopt for the sequence itself.
    std::vector<std::optional<std::vector<Token>>> items;
    for (std::size_t i = 0; i < single.size(); ++i) {
        const Node item = single.at(i);
        if (item.find("Sequence")) {
            items.emplace_back(std::nullopt);
            continue;
        }
        const std::string name = item.at("SpecialToken").at("id").str();
        if (!specials || !specials->json().contains(name))
            item.fail("the special token \"" + escape_control(name) + "\" is not in special_tokens");
        const Node s = specials->at(name);
        const Node ids = s.at("ids"), pieces = s.at("tokens");
        ids.expect_array();
        pieces.expect_array();
        if (ids.size() != pieces.size()) s.fail("ids and tokens differ in length");
        std::vector<Token> tokens;
        for (std::size_t k = 0; k < ids.size(); ++k)
            tokens.push_back(special_token(ids.at(k).id(), pieces.at(k).str()));
        items.emplace_back(std::move(tokens));
    }
    return [items](std::vector<Token>& tokens, bool add_special) {
        if (!add_special) return;
        std::vector<Token> out;
        for (const auto& item : items) {
            if (item)
                out.insert(out.end(), item->begin(), item->end());
            else
                out.insert(out.end(), tokens.begin(), tokens.end());
        }
        tokens = std::move(out);
    };
}

}  // namespace

PostProcessor make_post_processor(const Node& n) {
    if (n.is_null()) return [](std::vector<Token>&, bool) {};
    const std::string type = n.at("type").str();
    if (type == "TemplateProcessing") return template_processing(n);
    if (type == "BertProcessing") return around(pair_token(n.at("cls")), pair_token(n.at("sep")), false, false);
    if (type == "RobertaProcessing")
        return around(pair_token(n.at("cls")), pair_token(n.at("sep")), n.bool_or("trim_offsets", true),
                      n.bool_or("add_prefix_space", true));
    if (type == "ByteLevel") {
        const bool trim = n.bool_or("trim_offsets", true), prefix = n.bool_or("add_prefix_space", true);
        return [=](std::vector<Token>& tokens, bool) {
            if (trim) trim_byte_level_offsets(tokens, prefix);
        };
    }
    if (type == "Sequence") {
        const Node list = n.at("processors");
        list.expect_array();
        std::vector<PostProcessor> steps;
        for (std::size_t i = 0; i < list.size(); ++i) steps.push_back(make_post_processor(list.at(i)));
        return [steps](std::vector<Token>& tokens, bool add_special) {
            for (const auto& s : steps) s(tokens, add_special);
        };
    }
    n.at("type").fail("the post-processor \"" + type +
                      "\" is not supported (attnscope reads TemplateProcessing, BertProcessing, RobertaProcessing, "
                      "ByteLevel, Sequence)");
}

}  // namespace attnscope::tok
