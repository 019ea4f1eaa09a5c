// attnscope — base: the one JSON writer of every JSON document, JSONL line and HTML data
// block (docs/json.md lists them). It streams: each value goes to the stream as it is
// given, no document is built in memory, and an array of a million numbers costs nothing
// beyond its text.
//
//     JsonWriter w(out);
//     w.begin_object().key("schema").value("attnscope.run/1").key("dims").begin_object();
//     w.key("B").value(2).end_object().end_object();      // {"schema":"attnscope.run/1","dims":{"B":2}}
//
// Numbers: the shortest text that reads back to the same float/double; what JSON cannot
// spell (NaN, ±infinity) is the string "nan", "inf" or "-inf", or null for a NaN where the
// document says so (JsonNonFinite::nan_null).
#pragma once

#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace attnscope {

// `s` as a JSON string with its quotes: '"' and '\' escaped, \n \t \r, other control
// characters as \u00XX, each byte that is not well-formed UTF-8 as U+FFFD (a file name
// may hold any bytes: the document stays valid JSON). With `in_script` (JSON inside an
// HTML <script> element) also <, >, &, U+2028 and U+2029 as \u escapes, so that no
// "</script" ends the element. The one JSON escaper.
void put_json_string(std::ostream& out, std::string_view s, bool in_script = false);

// How a NaN or infinite number is written.
enum class JsonNonFinite {
    strings,   // "nan", "inf", "-inf"
    nan_null,  // null for NaN, "inf" / "-inf" for infinities
};

class JsonWriter {
   public:
    struct Style {
        int indent = 0;          // 0: one line (newline() breaks it where asked); n: n spaces a level
        bool in_script = false;  // strings escaped for an HTML <script> (put_json_string)
    };

    explicit JsonWriter(std::ostream& out) : out_(&out) {}
    JsonWriter(std::ostream& out, Style style) : out_(&out), style_(style) {}
    // Appending to `text` instead of a stream: no stream call per value, for a document
    // of millions of values (the caller writes `text` out, and may empty it, as it goes).
    explicit JsonWriter(std::string& text) : text_(&text) {}

    JsonWriter& begin_object() { return open('{'); }
    JsonWriter& end_object() { return close('}'); }
    JsonWriter& begin_array() { return open('['); }
    JsonWriter& end_array() { return close(']'); }

    // A member's name; its value comes next.
    JsonWriter& key(std::string_view name);

    JsonWriter& value(std::string_view s);
    JsonWriter& value(const std::string& s) { return value(std::string_view(s)); }
    JsonWriter& value(const char* s) { return value(std::string_view(s)); }
    JsonWriter& value(bool b) { return raw(b ? "true" : "false"); }
    JsonWriter& value(std::nullptr_t) { return raw("null"); }
    template <std::integral I>
    requires(!std::same_as<I, bool> && !std::same_as<I, char> && !std::same_as<I, char32_t>) JsonWriter& value(I n) {
        separate();
        if constexpr (std::is_signed_v<I>)
            integer(static_cast<long long>(n));  // a number, even of a char type
        else
            integer(static_cast<unsigned long long>(n));
        return *this;
    }
    JsonWriter& value(double x, JsonNonFinite nf = JsonNonFinite::strings);
    JsonWriter& value(float x, JsonNonFinite nf = JsonNonFinite::strings);

    // Text that is already JSON (a number as a file wrote it, true, null): written as it is.
    JsonWriter& raw(std::string_view json);
    // Members of the open object already written as JSON, without braces (`"id":464,"piece":"the"`,
    // as another JsonWriter wrote them): a document of a million objects that share parts
    // writes each distinct part once. The next key() puts its comma after them.
    JsonWriter& members(std::string_view json) { return raw(json); }

    // The next member, element or closing bracket starts a new line (a line per row, per
    // stage: the documents stay readable and diff well).
    JsonWriter& newline() {
        newline_ = true;
        return *this;
    }

    // Nested lists in C order over `shape`, element k (flat, row-major) written by
    // put(*this, k). A shape with no element writes its brackets alone: [[]] for (2, 0).
    template <typename F>
    JsonWriter& nested(const std::vector<std::size_t>& shape, F&& put);

    // A list of the `n` values of `data`; a list of numbers, strings or bools.
    template <typename T>
    JsonWriter& list(const T* data, std::size_t n) {
        begin_array();
        for (std::size_t k = 0; k < n; ++k) value(data[k]);
        return end_array();
    }
    template <typename C>
    JsonWriter& list(const C& items) {
        begin_array();
        for (const auto& x : items) value(x);
        return end_array();
    }

    // Depth of the open containers (0: the document is whole).
    std::size_t depth() const { return first_.size(); }

   private:
    JsonWriter& open(char bracket);
    JsonWriter& close(char bracket);
    // The comma, new line and indentation before a value or member. Inline, as put() is:
    // a document of a million tokens calls them ten million times.
    void separate() {
        if (after_key_) {  // a member's value: after its name, on its line
            after_key_ = false;
            return;
        }
        if (!first_.empty()) {
            if (!first_.back()) put(',');
            first_.back() = false;
        }
        if (style_.indent || newline_) break_line();
    }
    void break_line();  // separate()'s new line and indentation
    void indent(std::size_t levels);
    void integer(long long n);
    void integer(unsigned long long n);
    void put(std::string_view s) {  // to the text or the stream
        if (text_)
            text_->append(s);
        else
            out_->write(s.data(), std::streamsize(s.size()));
    }
    void put(char c) {
        if (text_)
            *text_ += c;
        else
            out_->put(c);
    }

    std::ostream* out_ = nullptr;
    std::string* text_ = nullptr;  // instead of out_
    Style style_;
    std::vector<unsigned char> first_;  // per open container: nothing in it yet (bytes: no bit packing)
    bool after_key_ = false, newline_ = false;
};

template <typename F>
JsonWriter& JsonWriter::nested(const std::vector<std::size_t>& shape, F&& put) {
    const std::size_t nd = shape.size();
    std::size_t n = 1;
    for (std::size_t s : shape) n *= s;
    if (n == 0) {
        for (std::size_t a = 0; a < nd; ++a) begin_array();
        for (std::size_t a = 0; a < nd; ++a) end_array();
        return *this;
    }
    std::vector<std::size_t> idx(nd, 0);
    for (std::size_t k = 0; k < n; ++k) {
        // Open a list for every axis whose index restarts, from the innermost moving axis out.
        for (std::size_t a = nd; a-- > 0 && idx[a] == 0;) begin_array();
        put(*this, k);
        // Advance, closing a list for every axis that wraps.
        for (std::size_t a = nd; a-- > 0;) {
            if (++idx[a] < shape[a]) break;
            idx[a] = 0;
            end_array();
        }
    }
    return *this;
}

}  // namespace attnscope
