// Terminal-safe text (see text.hpp).
#include "attnscope/base/text.hpp"

#include <cstdio>

namespace attnscope {

std::size_t invalid_utf8_at(std::string_view s) {
    for (std::size_t k = 0; k < s.size();) {
        const std::size_t n = static_cast<unsigned char>(s[k]) < 0x80 ? 1 : utf8_sequence_length(s, k);
        if (n == 0) return k;
        k += n;
    }
    return std::string_view::npos;
}

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

namespace attnscope {

namespace {

struct Range {
    char32_t first, last;
};

// Combining marks and other code points that take no column (Unicode 15: Mn, Me, Cf).
constexpr Range kZeroWidth[] = {
    {0x0300, 0x036F},   {0x0483, 0x0489},   {0x0591, 0x05BD}, {0x05BF, 0x05BF}, {0x05C1, 0x05C2}, {0x05C4, 0x05C5},
    {0x05C7, 0x05C7},   {0x0610, 0x061A},   {0x064B, 0x065F}, {0x0670, 0x0670}, {0x06D6, 0x06DC}, {0x06DF, 0x06E4},
    {0x06E7, 0x06E8},   {0x06EA, 0x06ED},   {0x0900, 0x0902}, {0x093A, 0x093A}, {0x093C, 0x093C}, {0x0941, 0x0948},
    {0x094D, 0x094D},   {0x0951, 0x0957},   {0x0E31, 0x0E31}, {0x0E34, 0x0E3A}, {0x0E47, 0x0E4E}, {0x1160, 0x11FF},
    {0x1AB0, 0x1AFF},   {0x1DC0, 0x1DFF},   {0x200B, 0x200F}, {0x202A, 0x202E}, {0x2060, 0x2064}, {0x20D0, 0x20FF},
    {0x302A, 0x302D},   {0x3099, 0x309A},   {0xFE00, 0xFE0F}, {0xFE20, 0xFE2F}, {0xFEFF, 0xFEFF}, {0x1F3FB, 0x1F3FF},
    {0xE0000, 0xE007F}, {0xE0100, 0xE01EF},
};

// East Asian Wide (W) and Fullwidth (F) code points (Unicode 15 EastAsianWidth.txt),
// emoji with a picture by default among them.
constexpr Range kWide[] = {
    {0x1100, 0x115F},   {0x231A, 0x231B},   {0x2329, 0x232A},   {0x23E9, 0x23EC},   {0x23F0, 0x23F0},
    {0x23F3, 0x23F3},   {0x25FD, 0x25FE},   {0x2614, 0x2615},   {0x2648, 0x2653},   {0x267F, 0x267F},
    {0x2693, 0x2693},   {0x26A1, 0x26A1},   {0x26AA, 0x26AB},   {0x26BD, 0x26BE},   {0x26C4, 0x26C5},
    {0x26CE, 0x26CE},   {0x26D4, 0x26D4},   {0x26EA, 0x26EA},   {0x26F2, 0x26F3},   {0x26F5, 0x26F5},
    {0x26FA, 0x26FA},   {0x26FD, 0x26FD},   {0x2705, 0x2705},   {0x270A, 0x270B},   {0x2728, 0x2728},
    {0x274C, 0x274C},   {0x274E, 0x274E},   {0x2753, 0x2755},   {0x2757, 0x2757},   {0x2795, 0x2797},
    {0x27B0, 0x27B0},   {0x27BF, 0x27BF},   {0x2B1B, 0x2B1C},   {0x2B50, 0x2B50},   {0x2B55, 0x2B55},
    {0x2E80, 0x303E},   {0x3041, 0x33FF},   {0x3400, 0x4DBF},   {0x4E00, 0x9FFF},   {0xA000, 0xA4CF},
    {0xA960, 0xA97F},   {0xAC00, 0xD7A3},   {0xF900, 0xFAFF},   {0xFE10, 0xFE19},   {0xFE30, 0xFE6F},
    {0xFF00, 0xFF60},   {0xFFE0, 0xFFE6},   {0x16FE0, 0x16FE4}, {0x17000, 0x18CFF}, {0x1B000, 0x1B2FF},
    {0x1F004, 0x1F004}, {0x1F0CF, 0x1F0CF}, {0x1F18E, 0x1F18E}, {0x1F191, 0x1F19A}, {0x1F200, 0x1F251},
    {0x1F300, 0x1F320}, {0x1F32D, 0x1F335}, {0x1F337, 0x1F37C}, {0x1F37E, 0x1F393}, {0x1F3A0, 0x1F3CA},
    {0x1F3CF, 0x1F3D3}, {0x1F3E0, 0x1F3F0}, {0x1F3F4, 0x1F3F4}, {0x1F3F8, 0x1F43E}, {0x1F440, 0x1F440},
    {0x1F442, 0x1F4FC}, {0x1F4FF, 0x1F53D}, {0x1F54B, 0x1F54E}, {0x1F550, 0x1F567}, {0x1F57A, 0x1F57A},
    {0x1F595, 0x1F596}, {0x1F5A4, 0x1F5A4}, {0x1F5FB, 0x1F64F}, {0x1F680, 0x1F6C5}, {0x1F6CC, 0x1F6CC},
    {0x1F6D0, 0x1F6D2}, {0x1F6D5, 0x1F6D7}, {0x1F6DC, 0x1F6DF}, {0x1F6EB, 0x1F6EC}, {0x1F6F4, 0x1F6FC},
    {0x1F7E0, 0x1F7EB}, {0x1F7F0, 0x1F7F0}, {0x1F90C, 0x1F93A}, {0x1F93C, 0x1F945}, {0x1F947, 0x1F9FF},
    {0x1FA70, 0x1FAFF}, {0x20000, 0x2FFFD}, {0x30000, 0x3FFFD},
};

template <std::size_t N>
bool in(const Range (&table)[N], char32_t cp) {
    std::size_t lo = 0, hi = N;  // binary search over sorted, disjoint ranges
    while (lo < hi) {
        const std::size_t mid = (lo + hi) / 2;
        if (cp < table[mid].first)
            hi = mid;
        else if (cp > table[mid].last)
            lo = mid + 1;
        else
            return true;
    }
    return false;
}

}  // namespace

std::size_t column_width(char32_t cp) {
    if (cp < 0x300) return 1;
    if (in(kZeroWidth, cp)) return 0;
    return in(kWide, cp) ? 2 : 1;
}

std::size_t decode_utf8(std::string_view s, std::size_t k, char32_t& cp) {
    const std::size_t n = utf8_sequence_length(s, k);
    if (n == 0) return 0;
    const auto at = [&](std::size_t i) { return char32_t(static_cast<unsigned char>(s[k + i])); };
    cp = n == 1 ? at(0) : n == 2 ? at(0) & 0x1F : n == 3 ? at(0) & 0x0F : at(0) & 0x07;
    for (std::size_t i = 1; i < n; ++i) cp = (cp << 6) | (at(i) & 0x3F);
    return n;
}

std::size_t next_code_point(std::string_view s, std::size_t k, char32_t& cp) {
    const std::size_t n = decode_utf8(s, k, cp);
    if (n == 0) cp = 0xFFFD;
    return n ? n : 1;
}

void append_utf8(std::string& out, char32_t cp) {
    if (cp < 0x80) {
        out += char(cp);
    } else if (cp < 0x800) {
        out += char(0xC0 | (cp >> 6));
        out += char(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += char(0xE0 | (cp >> 12));
        out += char(0x80 | ((cp >> 6) & 0x3F));
        out += char(0x80 | (cp & 0x3F));
    } else {
        out += char(0xF0 | (cp >> 18));
        out += char(0x80 | ((cp >> 12) & 0x3F));
        out += char(0x80 | ((cp >> 6) & 0x3F));
        out += char(0x80 | (cp & 0x3F));
    }
}

std::size_t display_width(std::string_view s) {
    std::size_t w = 0;
    for (std::size_t k = 0; k < s.size();) {
        char32_t cp = 0;
        k += next_code_point(s, k, cp);
        w += column_width(cp);
    }
    return w;
}

}  // namespace attnscope
