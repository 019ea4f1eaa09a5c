// Decoders: the tokens' strings, changed in place as the library's decode_chain does;
// the caller joins what is left.
#include <cctype>
#include <cstdlib>

#include "attnscope/base/errors.hpp"
#include "internal.hpp"

namespace attnscope::tok {
namespace {

using Tokens = std::vector<std::string>;

// Every token's characters back to GPT-2's bytes (a token with a character outside the
// table stays as its own bytes), all joined into one string, ill-formed UTF-8 replaced.
// Written in place: a character gives at most as many bytes as it takes.
void byte_level(Tokens& tokens) {
    std::size_t total = 0;
    for (const std::string& t : tokens) total += t.size();
    std::string bytes(total, '\0');
    std::size_t size = 0;
    for (const std::string& t : tokens) {
        const std::size_t mark = size;
        for (std::size_t k = 0, n = 0; k < t.size(); k += n) {
            const int b = char_byte(decode_at(t, k, n));
            if (b < 0) {  // not the table's: the token's own bytes
                size = mark + t.copy(bytes.data() + mark, t.size());
                break;
            }
            bytes[size++] = char(b);
        }
    }
    bytes.resize(size);
    tokens.assign(1, utf8_lossy(bytes));
}

// Runs of <0xNN> tokens become the text of their bytes, or one U+FFFD per byte when the
// run is not well-formed UTF-8.
void byte_fallback(Tokens& tokens) {
    Tokens out;
    std::string run;
    std::size_t count = 0;
    auto flush = [&] {
        if (count == 0) return;
        if (invalid_utf8_at(run) == std::string::npos)
            out.push_back(run);
        else
            for (std::size_t i = 0; i < count; ++i) out.emplace_back("\xEF\xBF\xBD");
        run.clear();
        count = 0;
    };
    for (std::string& t : tokens) {
        const bool is_byte = t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' &&
                             std::isxdigit(static_cast<unsigned char>(t[3])) &&
                             std::isxdigit(static_cast<unsigned char>(t[4]));
        if (is_byte) {
            run += char(std::strtoul(t.substr(3, 2).c_str(), nullptr, 16));
            ++count;
        } else {
            flush();
            out.push_back(std::move(t));
        }
    }
    flush();
    tokens = std::move(out);
}

void fuse(Tokens& tokens) {
    std::string all;
    for (const auto& t : tokens) all += t;
    tokens.assign(1, all);
}

// The first `from` in `s` at or after `at`, or npos. Looked for by its second byte: in the
// patterns decoding replaces (" .", " n't", "\u2581") the first is a space or a lead byte,
// found every few bytes of a text, the second far less often.
std::size_t find_from(const std::string& s, std::string_view from, std::size_t at) {
    if (from.size() < 2) return s.find(from, at);
    for (std::size_t q = s.find(from[1], at + 1); q != std::string::npos; q = s.find(from[1], q + 1))
        if (s.compare(q - 1, from.size(), from) == 0) return q - 1;
    return std::string::npos;
}

// Left to right, matches not overlapping; built anew, so that a text with many matches
// costs one pass (a replace in place moves the rest of the text each time).
std::string replace_all(std::string s, std::string_view from, std::string_view to) {
    std::size_t at = from.empty() ? std::string::npos : find_from(s, from, 0);
    if (at == std::string::npos) return s;
    std::string out;
    out.reserve(s.size());
    std::size_t done = 0;
    for (; at != std::string::npos; at = find_from(s, from, done)) {
        out.append(s, done, at - done).append(to);
        done = at + from.size();
    }
    out.append(s, done, std::string::npos);
    return out;
}

Decoder wordpiece(const Node& n) {
    const std::string prefix = n.str_or("prefix", "##");
    const bool cleanup = n.bool_or("cleanup", true);
    return [=](Tokens& tokens) {
        for (std::size_t i = 0; i < tokens.size(); ++i) {
            std::string& t = tokens[i];
            if (i > 0) t = t.compare(0, prefix.size(), prefix) == 0 ? t.substr(prefix.size()) : " " + t;
            if (!cleanup) continue;
            for (auto [from, to] : {std::pair{" .", "."},
                                    {" ?", "?"},
                                    {" !", "!"},
                                    {" ,", ","},
                                    {" ' ", "'"},
                                    {" n't", "n't"},
                                    {" 'm", "'m"},
                                    {" do not", " don't"},
                                    {" 's", "'s"},
                                    {" 've", "'ve"},
                                    {" 're", "'re"}})
                t = replace_all(t, from, to);
        }
    };
}

// Metaspace: the replacement character back to a space; in the first token (when a
// space was prepended) it goes entirely, as in the library.
Decoder metaspace(const Node& n) {
    const std::string rep = n.str_or("replacement", "\xE2\x96\x81");
    std::string scheme = n.str_or("prepend_scheme", "");
    if (scheme.empty()) scheme = n.bool_or("add_prefix_space", true) ? "always" : "never";
    return [=](Tokens& tokens) {
        for (std::size_t i = 0; i < tokens.size(); ++i)
            tokens[i] = replace_all(tokens[i], rep, i == 0 && scheme != "never" ? "" : " ");
    };
}

// Up to `start` leading and `stop` trailing copies of one character removed from each token.
Decoder strip(const Node& n) {
    const std::string c = n.at("content").str();
    const std::uint64_t start = n.find("start") ? n.at("start").count() : 0,
                        stop = n.find("stop") ? n.at("stop").count() : 0;
    return [=](Tokens& tokens) {
        if (c.empty()) return;
        for (std::string& t : tokens) {
            std::size_t b = 0, e = t.size();
            for (std::uint64_t i = 0; i < start && t.compare(b, c.size(), c) == 0 && b < e; ++i) b += c.size();
            for (std::uint64_t i = 0; i < stop && e >= b + c.size() && t.compare(e - c.size(), c.size(), c) == 0; ++i)
                e -= c.size();
            t = t.substr(b, e - b);
        }
    };
}

Decoder replace(const Node& n) {
    std::shared_ptr<const Regex> re = pattern_of(n.at("pattern"));
    const std::string content = n.at("content").str();
    return [re, content](Tokens& tokens) {
        for (std::string& t : tokens) {
            std::string out;
            std::size_t at = 0;
            for (const auto& [b, e] : re->find_all(t)) {
                out.append(t, at, b - at);
                out += content;
                at = e;
            }
            out.append(t, at);
            t = std::move(out);
        }
    };
}

Decoder sequence(const Node& n) {
    const Node list = n.at("decoders");
    list.expect_array();
    std::vector<Decoder> steps;
    for (std::size_t i = 0; i < list.size(); ++i) steps.push_back(make_decoder(list.at(i)));
    return [steps](Tokens& tokens) {
        for (const auto& s : steps) s(tokens);
    };
}

}  // namespace

std::string clean_up_tokenization(std::string s) {
    for (auto [from, to] : {std::pair{" .", "."},
                            {" ?", "?"},
                            {" !", "!"},
                            {" ,", ","},
                            {" ' ", "'"},
                            {" n't", "n't"},
                            {" 'm", "'m"},
                            {" 's", "'s"},
                            {" 've", "'ve"},
                            {" 're", "'re"}})
        s = replace_all(std::move(s), from, to);
    return s;
}

Decoder make_decoder(const Node& n) {
    const std::string type = n.at("type").str();
    if (type == "ByteLevel") return byte_level;
    if (type == "ByteFallback") return byte_fallback;
    if (type == "Fuse") return fuse;
    if (type == "WordPiece") return wordpiece(n);
    if (type == "Metaspace") return metaspace(n);
    if (type == "Strip") return strip(n);
    if (type == "Replace") return replace(n);
    if (type == "Sequence") return sequence(n);
    if (type == "BPEDecoder") {
        const std::string suffix = n.str_or("suffix", "</w>");
        return [suffix](Tokens& tokens) {
            for (std::size_t i = 0; i < tokens.size(); ++i)
                tokens[i] = replace_all(tokens[i], suffix, i + 1 == tokens.size() ? "" : " ");
        };
    }
    n.at("type").fail("the decoder \"" + type +
                      "\" is not supported (attnscope reads ByteLevel, Metaspace, WordPiece, ByteFallback, Fuse, "
                      "Strip, Replace, BPEDecoder, Sequence)");
}

}  // namespace attnscope::tok
