// Normalizers: each rewrites a Text and keeps, for every byte it writes, the bytes of the
// input it came from (a character's replacement takes that character's place; a
// prepended string takes the first character's).
#include <utf8proc.h>

#include "attnscope/base/errors.hpp"
#include "internal.hpp"

namespace attnscope::tok {

Text text_of(std::string_view s, std::uint32_t base) {
    Text t;
    t.text.assign(s);
    t.align.resize(s.size());
    for (std::size_t k = 0; k < s.size();) {
        std::size_t n = 0;
        decode_at(s, k, n);
        const Span sp{base + std::uint32_t(k), base + std::uint32_t(k + n)};
        for (std::size_t i = 0; i < n; ++i) t.align[k + i] = sp;
        k += n;
    }
    return t;
}

Text Text::slice(std::size_t b, std::size_t e) const {
    Text t;
    t.text = text.substr(b, e - b);
    t.align.assign(align.begin() + std::ptrdiff_t(b), align.begin() + std::ptrdiff_t(e));
    return t;
}

namespace {

using Step = std::function<void(Text&)>;  // a normalizer's step that never grows the text without bound

bool is_ascii(std::string_view s) {
    for (char c : s)
        if (static_cast<unsigned char>(c) >= 0x80) return false;
    return true;
}

// A character that starts a new stretch for normalization: combining class 0 and not a
// Hangul vowel or trailing consonant (which compose with what precedes them).
bool starts_segment(char32_t c) {
    if (c >= 0x1160 && c <= 0x11FF) return false;
    return utf8proc_get_property(static_cast<utf8proc_int32_t>(c))->combining_class == 0;
}

// NFC, NFD, NFKC or NFKD, stretch by stretch (a starter and the marks after it), so that
// each output stretch takes the place of the input stretch it came from.
void normalize_form(Text& t, const std::string& form) {
    if (is_ascii(t.text)) return;  // every form leaves ASCII as it is
    Text out;
    for (std::size_t k = 0; k < t.text.size();) {
        std::size_t e = k, n = 0;
        decode_at(t.text, e, n);
        for (e += n; e < t.text.size(); e += n)
            if (starts_segment(decode_at(t.text, e, n))) break;
        const std::string_view stretch = std::string_view(t.text).substr(k, e - k);
        out.text += is_ascii(stretch) ? std::string(stretch) : unicode_normalize(stretch, form);
        out.align.resize(out.text.size(), t.original(k, e));
        k = e;
    }
    t = std::move(out);
}

}  // namespace

void prepend(Text& t, const std::string& s) {
    if (t.text.empty() || s.empty()) return;
    std::size_t n = 0;
    decode_at(t.text, 0, n);
    const Span first = t.original(0, n);
    t.text.insert(0, s);
    t.align.insert(t.align.begin(), s.size(), first);
}

namespace {

// The text grown from `from` to `to` bytes: what encoding it costs more, charged.
void charge_growth(Budget& budget, std::size_t from, std::size_t to, const std::string& where) {
    if (to > from)
        budget.add((to - from) * kEncodeBytesPerByte, where + ": the normalized text grows from " +
                                                          std::to_string(from) + " to " + std::to_string(to) +
                                                          " bytes,");
}

void replace(Text& t, const Regex& re, const std::string& content, Budget& budget, const std::string& where) {
    const auto matches = re.find_all(t.text);
    if (matches.empty()) return;
    std::size_t size = t.text.size();
    for (const auto& [b, e] : matches) size += content.size() - (e - b);  // (wraps back: e - b <= size)
    charge_growth(budget, t.text.size(), size, where);                    // before the bytes are made
    Text out;
    out.text.reserve(size);
    out.align.reserve(size);
    std::size_t at = 0;
    for (const auto& [b, e] : matches) {
        out.text.append(t.text, at, b - at);
        out.align.insert(out.align.end(), t.align.begin() + std::ptrdiff_t(at), t.align.begin() + std::ptrdiff_t(b));
        out.text += content;
        out.align.resize(out.text.size(), t.original(b, e));
        at = e;
    }
    out.text.append(t.text, at);
    out.align.insert(out.align.end(), t.align.begin() + std::ptrdiff_t(at), t.align.end());
    t = std::move(out);
}

void strip(Text& t, bool left, bool right) {
    std::size_t b = 0, e = t.text.size(), n = 0;
    while (left && b < e && is_whitespace(decode_at(t.text, b, n))) b += n;
    while (right && e > b) {
        std::size_t k = e - 1;
        while (k > b && (static_cast<unsigned char>(t.text[k]) & 0xC0) == 0x80) --k;
        if (!is_whitespace(decode_at(t.text, k, n))) break;
        e = k;
    }
    if (b != 0 || e != t.text.size()) t = t.slice(b, e);
}

void strip_accents(Text& t) {
    map_chars(t, [](char32_t c, std::string& out) {
        if (!is_mark_nonspacing(c)) append_utf8(out, c);
    });
}

void lowercase_text(Text& t) {
    map_chars(t, [](char32_t c, std::string& out) {
        if (c < 0x80)
            out += char(c >= 'A' && c <= 'Z' ? c + 32 : c);
        else
            out += lowercase(c);
    });
}

// BERT's: control characters removed and whitespace made a space (clean_text); CJK
// characters padded with spaces; accents stripped after NFD; lower case.
Step bert_normalizer(const Node& n) {
    const bool clean = n.bool_or("clean_text", true), chinese = n.bool_or("handle_chinese_chars", true);
    const bool lower = n.bool_or("lowercase", true), accents = n.bool_or("strip_accents", lower);
    return [=](Text& t) {
        if (clean)
            map_chars(t, [](char32_t c, std::string& out) {
                if (c == 0 || c == 0xFFFD || is_control(c)) return;
                if (c == '\t' || c == '\n' || c == '\r' || is_whitespace(c))
                    out += ' ';
                else
                    append_utf8(out, c);
            });
        if (chinese)
            map_chars(t, [](char32_t c, std::string& out) {
                if (!is_chinese(c)) return append_utf8(out, c);
                out += ' ';
                append_utf8(out, c);
                out += ' ';
            });
        if (accents) {
            normalize_form(t, "NFD");
            strip_accents(t);
        }
        if (lower) lowercase_text(t);
    };
}

// A step that grows the text by a bounded factor at most, its growth charged after it.
Normalizer charged(Step step, std::string where) {
    return [step = std::move(step), where = std::move(where)](Text& t, Budget& budget) {
        const std::size_t before = t.text.size();
        step(t);
        charge_growth(budget, before, t.text.size(), where);
    };
}

Normalizer sequence(const Node& n) {
    const Node list = n.at("normalizers");
    list.expect_array();
    std::vector<Normalizer> steps;
    for (std::size_t i = 0; i < list.size(); ++i) steps.push_back(make_normalizer(list.at(i)));
    return [steps](Text& t, Budget& budget) {
        for (const auto& s : steps) s(t, budget);
    };
}

void byte_level(Text& t) {
    Text out;
    for (std::size_t k = 0; k < t.text.size(); ++k) {
        append_utf8(out.text, byte_char(static_cast<unsigned char>(t.text[k])));
        out.align.resize(out.text.size(), t.align[k]);
    }
    t = std::move(out);
}

// The steps other than Sequence and Replace: each grows the text by a bounded factor.
Step make_step(const Node& n, const std::string& type) {
    if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD")
        return [type](Text& t) { normalize_form(t, type); };
    if (type == "Lowercase") return lowercase_text;
    if (type == "StripAccents") return strip_accents;
    if (type == "BertNormalizer") return bert_normalizer(n);
    if (type == "Prepend") {
        const std::string s = n.at("prepend").str();
        return [s](Text& t) { prepend(t, s); };
    }
    if (type == "Strip") {
        const bool left = n.bool_or("strip_left", true), right = n.bool_or("strip_right", true);
        return [=](Text& t) { strip(t, left, right); };
    }
    if (type == "ByteLevel") return byte_level;
    n.at("type").fail("the normalizer \"" + type +
                      "\" is not supported (attnscope reads NFC, NFD, NFKC, NFKD, Lowercase, StripAccents, "
                      "BertNormalizer, Prepend, Replace, Strip, ByteLevel, Sequence)");
}

}  // namespace

Normalizer make_normalizer(const Node& n) {
    if (n.is_null()) return [](Text&, Budget&) {};
    const std::string type = n.at("type").str();
    std::string where = escape_control(n.file()) + ": " + escape_control(n.path());
    if (type == "Sequence") return sequence(n);
    if (type == "Replace") {
        std::shared_ptr<const Regex> re = pattern_of(n.at("pattern"));
        const std::string content = n.at("content").str();
        return [re, content, where](Text& t, Budget& budget) { replace(t, *re, content, budget, where); };
    }
    return charged(make_step(n, type), std::move(where));
}

}  // namespace attnscope::tok
