// The JSON writer (json_writer.hpp).
#include "attnscope/base/json_writer.hpp"

#include <charconv>
#include <cstdio>
#include <string>

#include "attnscope/base/text.hpp"

namespace attnscope {

namespace {

// Which bytes go out as they are: printable ASCII but '"' and '\' (and, in a <script>,
// '<', '>' and '&'). Index [in_script][byte].
struct PlainBytes {
    bool plain[2][256] = {};
    constexpr PlainBytes() {
        for (int b = 0x20; b < 0x7F; ++b) {
            plain[0][b] = b != '"' && b != '\\';
            plain[1][b] = plain[0][b] && b != '<' && b != '>' && b != '&';
        }
    }
};
constexpr PlainBytes kPlain;

// The character at s[k] (not a plain byte) escaped, appended to `out`; the bytes it took.
std::size_t append_escaped(std::string& out, std::string_view s, std::size_t k, bool in_script) {
    char32_t cp = 0;
    const std::size_t n = decode_utf8(s, k, cp);
    const bool script_char = in_script && (cp == '<' || cp == '>' || cp == '&' || cp == 0x2028 || cp == 0x2029);
    if (n == 0) {
        out += "\xEF\xBF\xBD";  // U+FFFD REPLACEMENT CHARACTER
    } else if (cp == '"' || cp == '\\') {
        out += '\\';
        out += char(cp);
    } else if (cp == '\n' || cp == '\t' || cp == '\r') {
        out += cp == '\n' ? "\\n" : cp == '\t' ? "\\t" : "\\r";
    } else if (cp < 0x20 || script_char) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\u%04x", unsigned(cp));
        out += buf;
    } else {
        out.append(s.data() + k, n);
    }
    return n ? n : 1;
}

// `s` escaped as a JSON string, with its quotes, appended to `out` (put_json_string's rules).
// Each run of plain bytes (the common case: ASCII names and words) is appended in one go.
void append_json_string(std::string& out, std::string_view s, bool in_script) {
    const bool* plain = kPlain.plain[in_script ? 1 : 0];
    out += '"';
    for (std::size_t k = 0; k < s.size();) {
        std::size_t end = k;
        while (end < s.size() && plain[static_cast<unsigned char>(s[end])]) ++end;
        out.append(s.data() + k, end - k);
        k = end < s.size() ? end + append_escaped(out, s, end, in_script) : end;
    }
    out += '"';
}

// The text of a JSON string or member name, built in one string and written in one piece
// (a writer of a large document makes millions of them).
std::string& scratch() {
    thread_local std::string s;
    s.clear();
    return s;
}

}  // namespace

void put_json_string(std::ostream& out, std::string_view s, bool in_script) {
    std::string& text = scratch();
    append_json_string(text, s, in_script);
    out.write(text.data(), std::streamsize(text.size()));
}

namespace {

// `x` as JSON: the shortest text that reads back to x, or what stands for a NaN or infinity.
template <typename T>
std::string_view number_text(T x, JsonNonFinite nf, char (&buf)[40]) {
    if (std::isnan(x)) return nf == JsonNonFinite::nan_null ? "null" : "\"nan\"";
    if (std::isinf(x)) return x < 0 ? "\"-inf\"" : "\"inf\"";
    const auto r = std::to_chars(buf, buf + sizeof buf, x);
    return {buf, std::size_t(r.ptr - buf)};
}

}  // namespace

JsonWriter& JsonWriter::value(double x, JsonNonFinite nf) {
    separate();
    char buf[40];
    put(number_text(x, nf, buf));
    return *this;
}

JsonWriter& JsonWriter::value(float x, JsonNonFinite nf) {
    separate();
    char buf[40];
    put(number_text(x, nf, buf));
    return *this;
}

JsonWriter& JsonWriter::value(std::string_view s) {
    separate();
    if (text_) {
        append_json_string(*text_, s, style_.in_script);
    } else {
        std::string& text = scratch();
        append_json_string(text, s, style_.in_script);
        put(text);
    }
    return *this;
}

JsonWriter& JsonWriter::raw(std::string_view json) {
    separate();
    put(json);
    return *this;
}

JsonWriter& JsonWriter::key(std::string_view name) {
    separate();
    std::string& text = text_ ? *text_ : scratch();
    append_json_string(text, name, style_.in_script);
    text += style_.indent ? ": " : ":";
    if (!text_) put(text);
    after_key_ = true;
    return *this;
}

void JsonWriter::integer(long long n) {
    char buf[24];
    const auto r = std::to_chars(buf, buf + sizeof buf, n);
    put(std::string_view(buf, std::size_t(r.ptr - buf)));
}

void JsonWriter::integer(unsigned long long n) {
    char buf[24];
    const auto r = std::to_chars(buf, buf + sizeof buf, n);
    put(std::string_view(buf, std::size_t(r.ptr - buf)));
}

void JsonWriter::indent(std::size_t levels) {
    for (std::size_t k = 0; k < levels * std::size_t(style_.indent); ++k) put(' ');
}

void JsonWriter::break_line() {
    if (style_.indent && !first_.empty()) {
        put('\n');
        indent(first_.size());
    } else if (newline_) {
        put('\n');
    }
    newline_ = false;
}

JsonWriter& JsonWriter::open(char bracket) {
    separate();
    put(bracket);
    first_.push_back(true);
    return *this;
}

JsonWriter& JsonWriter::close(char bracket) {
    const bool empty = first_.back();
    first_.pop_back();
    if (style_.indent && !empty) {
        put('\n');
        indent(first_.size());
    } else if (newline_ && !style_.indent) {
        put('\n');
    }
    newline_ = false;
    put(bracket);
    return *this;
}

}  // namespace attnscope
