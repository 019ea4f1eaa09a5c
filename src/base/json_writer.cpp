// The JSON writer (json_writer.hpp).
#include "attnscope/base/json_writer.hpp"

#include <charconv>
#include <cstdio>

#include "attnscope/base/text.hpp"

namespace attnscope {

void put_json_string(std::ostream& out, std::string_view s, bool in_script) {
    out << '"';
    for (std::size_t k = 0; k < s.size();) {
        char32_t cp = 0;
        const std::size_t n = decode_utf8(s, k, cp);
        const bool script_char = in_script && (cp == '<' || cp == '>' || cp == '&' || cp == 0x2028 || cp == 0x2029);
        if (n == 0) {
            out << "\xEF\xBF\xBD";  // U+FFFD REPLACEMENT CHARACTER
        } else if (cp == '"' || cp == '\\') {
            out << '\\' << char(cp);
        } else if (cp == '\n' || cp == '\t' || cp == '\r') {
            out << (cp == '\n' ? "\\n" : cp == '\t' ? "\\t" : "\\r");
        } else if (cp < 0x20 || script_char) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\u%04x", unsigned(cp));
            out << buf;
        } else {
            out.write(s.data() + k, std::streamsize(n));
        }
        k += n ? n : 1;
    }
    out << '"';
}

namespace {

template <typename T>
void put_number(std::ostream& out, T x, JsonNonFinite nf) {
    if (std::isnan(x)) {
        out << (nf == JsonNonFinite::nan_null ? "null" : "\"nan\"");
    } else if (std::isinf(x)) {
        out << (x < 0 ? "\"-inf\"" : "\"inf\"");
    } else {
        char buf[40];
        const auto r = std::to_chars(buf, buf + sizeof buf, x);  // the shortest that reads back to x
        out.write(buf, r.ptr - buf);
    }
}

}  // namespace

JsonWriter& JsonWriter::value(double x, JsonNonFinite nf) {
    separate();
    put_number(out_, x, nf);
    return *this;
}

JsonWriter& JsonWriter::value(float x, JsonNonFinite nf) {
    separate();
    put_number(out_, x, nf);
    return *this;
}

JsonWriter& JsonWriter::value(std::string_view s) {
    separate();
    put_json_string(out_, s, style_.in_script);
    return *this;
}

JsonWriter& JsonWriter::raw(std::string_view json) {
    separate();
    out_ << json;
    return *this;
}

JsonWriter& JsonWriter::key(std::string_view name) {
    separate();
    put_json_string(out_, name, style_.in_script);
    out_ << (style_.indent ? ": " : ":");
    after_key_ = true;
    return *this;
}

void JsonWriter::indent(std::size_t levels) {
    for (std::size_t k = 0; k < levels * std::size_t(style_.indent); ++k) out_ << ' ';
}

void JsonWriter::separate() {
    if (after_key_) {  // a member's value: after its name, on its line
        after_key_ = false;
        return;
    }
    if (!first_.empty()) {
        if (!first_.back()) out_ << ',';
        first_.back() = false;
    }
    if (style_.indent && !first_.empty()) {
        out_ << '\n';
        indent(first_.size());
    } else if (newline_) {
        out_ << '\n';
    }
    newline_ = false;
}

JsonWriter& JsonWriter::open(char bracket) {
    separate();
    out_ << bracket;
    first_.push_back(true);
    return *this;
}

JsonWriter& JsonWriter::close(char bracket) {
    const bool empty = first_.back();
    first_.pop_back();
    if (style_.indent && !empty) {
        out_ << '\n';
        indent(first_.size());
    } else if (newline_ && !style_.indent) {
        out_ << '\n';
    }
    newline_ = false;
    out_ << bracket;
    return *this;
}

}  // namespace attnscope
