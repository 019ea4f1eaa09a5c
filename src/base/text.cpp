// Terminal-safe text (see text.hpp).
#include "attnscope/base/text.hpp"

#include <cstdio>

namespace attnscope {

std::size_t utf8_sequence_length(std::string_view s, std::size_t k) {
    const auto at = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
    const unsigned char c = at(k);
    std::size_t n = c < 0x80                 ? 1
                    : c >= 0xc2 && c <= 0xdf ? 2
                    : c >= 0xe0 && c <= 0xef ? 3
                    : c >= 0xf0 && c <= 0xf4 ? 4
                                             : 0;
    if (n == 0 || k + n > s.size()) return 0;
    for (std::size_t i = 1; i < n; ++i)
        if ((at(k + i) & 0xc0) != 0x80) return 0;
    if (n == 3 && ((c == 0xe0 && at(k + 1) < 0xa0) || (c == 0xed && at(k + 1) >= 0xa0)))
        return 0;  // overlong, surrogate
    if (n == 4 && ((c == 0xf0 && at(k + 1) < 0x90) || (c == 0xf4 && at(k + 1) >= 0x90)))
        return 0;  // overlong, > U+10FFFF
    return n;
}

namespace {

void put_hex(std::string& out, unsigned char c) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "\\x%02x", c);
    out += buf;
}

}  // namespace

std::string escape_control(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (std::size_t k = 0; k < s.size();) {
        const unsigned char c = static_cast<unsigned char>(s[k]);
        const std::size_t n = utf8_sequence_length(s, k);
        if (n == 1 && c >= 0x20 && c != 0x7f) {
            out += char(c);
        } else if (n == 1) {
            if (c == '\n')
                out += "\\n";
            else if (c == '\t')
                out += "\\t";
            else if (c == '\r')
                out += "\\r";
            else
                put_hex(out, c);
        } else if (n == 2 && c == 0xc2 && static_cast<unsigned char>(s[k + 1]) < 0xa0) {
            put_hex(out, c), put_hex(out, static_cast<unsigned char>(s[k + 1]));  // a C1 control
        } else if (n > 1) {
            out.append(s.substr(k, n));
        } else {
            put_hex(out, c);
        }
        k += n ? n : 1;
    }
    return out;
}

std::string clip_fragment(std::string_view s, std::size_t max_bytes) {
    if (s.size() <= max_bytes) return std::string(s);
    std::size_t cut = max_bytes;
    while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xc0) == 0x80) --cut;  // not inside a character
    return std::string(s.substr(0, cut)) + "... (" + std::to_string(s.size()) + " bytes in all)";
}

}  // namespace attnscope
