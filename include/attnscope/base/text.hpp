// attnscope — base: text that is safe to show on a terminal or put in one line.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace attnscope {

// `s` with everything a terminal would act on made visible: C0 control characters
// (newline, escape, bell, NUL, ...), DEL and the C1 controls U+0080..U+009F become
// "\n", "\t", "\x1b"..., and each byte that is not part of well-formed UTF-8 becomes
// "\xNN". Printable text, UTF-8 included, is kept as it is. Never longer than 4x `s`.
std::string escape_control(std::string_view s);

// Length in bytes of the well-formed UTF-8 sequence starting at s[k] (RFC 3629: no
// overlong forms, no surrogates, nothing past U+10FFFF), or 0 when there is none.
std::size_t utf8_sequence_length(std::string_view s, std::size_t k);

// The offset of the first byte of `s` that does not start a well-formed UTF-8 sequence,
// or npos when all of `s` is UTF-8.
std::size_t invalid_utf8_at(std::string_view s);

// Whether `s` ends with `tail` (a file name with its extension, a tensor name with its role).
inline bool ends_with(std::string_view s, std::string_view tail) {
    return s.size() >= tail.size() && s.substr(s.size() - tail.size()) == tail;
}

// `s` cut to at most `max_bytes` (on a UTF-8 character boundary), with
// "... (N bytes in all)" after it when it was longer: for echoing a fragment of input.
std::string clip_fragment(std::string_view s, std::size_t max_bytes = 80);

// The terminal columns code point `cp` takes, as wcwidth() in a UTF-8 locale does (but
// without a locale): 0 for combining marks, zero-width joiners and variation selectors;
// 2 for East Asian Wide and Fullwidth characters (CJK, Hangul, kana, fullwidth forms) and
// emoji shown as pictures; 1 for everything else printable.
std::size_t column_width(char32_t cp);

// The terminal columns `s` takes: column_width of each code point (a byte that is not
// well-formed UTF-8 counts 1).
std::size_t display_width(std::string_view s);

// The code point at s[k] and its length in bytes, or 0 (cp unset) when the bytes there
// are not well-formed UTF-8: the one UTF-8 decoder.
std::size_t decode_utf8(std::string_view s, std::size_t k, char32_t& cp);

// The code point at s[k] and its length in bytes (U+FFFD and 1 for a byte that is not
// well-formed UTF-8).
std::size_t next_code_point(std::string_view s, std::size_t k, char32_t& cp);

// Appends code point `cp` (at most U+10FFFF, not a surrogate: the callers check) as UTF-8.
void append_utf8(std::string& out, char32_t cp);

}  // namespace attnscope
