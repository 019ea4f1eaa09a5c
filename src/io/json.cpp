// JSON inputs: a bundle object of named nested lists, or a single nested list; and the
// choice of reader by file name. Non-finite numbers, which JSON cannot spell, are read
// from the strings "inf", "-inf" and "nan" — the form attnscope's own --json writes.
//
// The parser is our own, streaming straight into the arrays (no document tree, no
// object per number: large weight files read at well over 100 MB/s), strict RFC 8259
// (numbers by std::from_chars after a grammar check, UTF-8 checked in strings), and
// it reports ragged or non-numeric data with the element's path, e.g. W_Q[3][1].
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "attnscope/base/errors.hpp"
#include "attnscope/io/json_tree.hpp"
#include "attnscope/io/read.hpp"
#include "bytes.hpp"
#include "grow.hpp"

namespace attnscope {
namespace {

using io_detail::GrowBuffer;
using io_detail::shown;
using io_detail::shown_path;

constexpr std::size_t kMaxDims = 32;

bool nonfinite_from_string(const std::string& s, double& out) {
    if (s == "inf" || s == "+inf" || s == "Infinity" || s == "+Infinity")
        out = std::numeric_limits<double>::infinity();
    else if (s == "-inf" || s == "-Infinity")
        out = -std::numeric_limits<double>::infinity();
    else if (s == "nan" || s == "NaN")
        out = std::numeric_limits<double>::quiet_NaN();
    else
        return false;
    return true;
}

bool is_token_name(const std::string& name) { return name.size() > 7 && ends_with(name, "_tokens"); }

class JsonReader {
   public:
    // A leading UTF-8 byte-order mark (EF BB BF) is skipped, as RFC 8259 section 8.1 lets a
    // parser do (editors on Windows write one); byte offsets in messages still count it,
    // columns do not. The text itself counts against the memory limit: it is in memory
    // (mapped, or read from a pipe) while the values are read.
    JsonReader(std::string_view text, const std::string& source, std::size_t max_bytes)
        : begin_(text.data()),
          p_(text.data()),
          end_(text.data() + text.size()),
          source_(source),
          max_bytes_(max_bytes),
          held_(text.size()) {
        if (text.substr(0, 3) == "\xEF\xBB\xBF") p_ += 3;
    }

    // "FILE: invalid JSON at line 3, column 7 (byte 45): WHAT". Lines and columns count
    // from 1; a column counts characters (UTF-8 sequences, each byte that is not part of
    // one as a character), as an editor shows them; the byte offset counts from 0.
    [[noreturn]] void syntax(const std::string& what) const {
        throw InputError(shown_path(source_) + ": invalid JSON at " + position() + ": " + what);
    }
    std::string position() const {
        const std::string_view text(begin_, std::size_t(end_ - begin_));
        const std::size_t at = std::size_t(p_ - begin_);
        std::size_t line = 1, start = text.substr(0, 3) == "\xEF\xBB\xBF" ? 3 : 0;
        for (std::size_t k = text.find('\n'); k < at; k = text.find('\n', k + 1)) ++line, start = k + 1;
        std::size_t column = 1;
        for (std::size_t k = start; k < at; ++column) {
            const std::size_t n = utf8_sequence_length(text, k);
            k += n ? n : 1;
        }
        return "line " + std::to_string(line) + ", column " + std::to_string(column) + " (byte " + std::to_string(at) +
               ")";
    }

    void skip_ws() {
        while (p_ < end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\t' || *p_ == '\r')) ++p_;
    }
    char peek() {
        skip_ws();
        return p_ < end_ ? *p_ : '\0';
    }
    bool at_end() {
        skip_ws();
        return p_ == end_;
    }
    void expect(char c, const char* what) {
        if (peek() != c) syntax(std::string("expected ") + what + (p_ < end_ ? "" : ", found the end of the input"));
        ++p_;
    }

    // A string token (p at the opening quote), escapes decoded, UTF-8 checked.
    std::string string() {
        expect('"', "'\"'");
        std::string out;
        for (;;) {
            if (p_ >= end_) syntax("unterminated string");
            unsigned char c = static_cast<unsigned char>(*p_++);
            if (c == '"') return out;
            if (c < 0x20) syntax("control character in a string");
            if (c == '\\')
                escape(out);
            else if (c < 0x80)
                out += char(c);
            else
                utf8_sequence(out, c);
        }
    }

    // A number token checked against JSON's grammar; its text goes to `text`.
    double number(std::string_view& text) {
        const char* s = p_;
        if (p_ < end_ && *p_ == '-') ++p_;
        if (p_ < end_ && *p_ == '0')
            ++p_;
        else if (p_ < end_ && *p_ >= '1' && *p_ <= '9')
            while (p_ < end_ && std::isdigit(static_cast<unsigned char>(*p_))) ++p_;
        else
            syntax("invalid number");
        if (p_ < end_ && *p_ == '.') {
            ++p_;
            if (p_ >= end_ || !std::isdigit(static_cast<unsigned char>(*p_)))
                syntax("invalid number: no digit after '.'");
            while (p_ < end_ && std::isdigit(static_cast<unsigned char>(*p_))) ++p_;
        }
        if (p_ < end_ && (*p_ == 'e' || *p_ == 'E')) {
            ++p_;
            if (p_ < end_ && (*p_ == '+' || *p_ == '-')) ++p_;
            if (p_ >= end_ || !std::isdigit(static_cast<unsigned char>(*p_)))
                syntax("invalid number: no digit in the exponent");
            while (p_ < end_ && std::isdigit(static_cast<unsigned char>(*p_))) ++p_;
        }
        text = std::string_view(s, std::size_t(p_ - s));
        double v = 0;
        auto r = std::from_chars(s, p_, v);
        if (r.ec == std::errc::result_out_of_range) {
            // from_chars reports underflow and overflow alike; strtod tells them apart. A
            // number too small for a double is (signed) zero, as numpy reads it; one too
            // large is not a finite number and is refused.
            const std::string token(text);
            const double d = std::strtod(token.c_str(), nullptr);
            if (std::fabs(d) < 1.0) return d;
            p_ = s;
            syntax("number " + shown(token) + " is out of range");
        }
        if (r.ec != std::errc() || r.ptr != p_) syntax("invalid number");
        return v;
    }

    bool literal(const char* word) {
        std::size_t n = std::strlen(word);
        if (std::size_t(end_ - p_) >= n && std::memcmp(p_, word, n) == 0) {
            p_ += n;
            return true;
        }
        return false;
    }

    // One named value (a nested list or a scalar) into an Array. `origin` labels the array
    // ("data.json: x"); `where` is what an element's indices follow in messages, usually
    // the origin itself ("data.json: x[1]: ...").
    Array array(const std::string& origin, const std::string& where, bool text) {
        Value v{origin, where, text};
        Array& a = v.a;
        a.origin = origin;
        a.dtype = text ? "text" : "json";
        if (peek() == '[') {
            list(v, 0);
            a.shape.assign(v.shape.begin(), v.shape.begin() + long(v.leaf));
        } else {
            v.leaf = 0;
            scalar(v);
        }
        account(v);
        if (!text) {  // the numbers, kept as float64 where they were written
            a.held = Array::Held::float64;
            a.stored = v.numbers.view();
            a.keep = v.numbers.release();
        }
        held_ += io_detail::held_bytes(a);
        return std::move(a);
    }

    // The top-level value's kind, for "expected an object, found ..." messages.
    std::string describe_top() {
        char c = peek();
        if (c == '[') return "a list";
        if (c == '{') return "an object";
        std::string d;
        return describe_scalar(d);
    }

    // A bundle's `config` record (p at its value): a flat object of at most kMaxConfigKeys
    // scalars, each kept as written; `origin` ("b.json: config") names it in messages.
    std::map<std::string, ConfigValue> config(const std::string& origin) {
        if (peek() != '{')
            throw InputError(origin + ": expected an object of run options ({\"heads\": 2, \"causal\": true}), found " +
                             (at_end() ? std::string("nothing") : describe_top()));
        std::map<std::string, ConfigValue> out;
        object_begin();
        std::string key;
        for (bool first = true; object_next(first, key); first = false) {
            const std::string where = origin + ": " + shown(key);
            if (out.count(key)) throw InputError(where + ": appears twice in the record");
            if (out.size() == kMaxConfigKeys)
                throw InputError(origin + ": more than " + std::to_string(kMaxConfigKeys) + " options");
            out[key] = config_value(where);
        }
        return out;
    }

    void object_begin() { expect('{', "'{'"); }
    bool object_next(bool first, std::string& key) {
        char c = peek();
        if (c == '}') {
            ++p_;
            return false;
        }
        if (!first) {
            expect(',', "',' or '}'");
            peek();
        }
        if (peek() != '"') syntax("expected a string key");
        key = string();
        expect(':', "':'");
        return true;
    }

   private:
    static constexpr std::size_t kMaxConfigKeys = 64;

    // One option of a `config` record: a number, true/false or a string; nothing nested.
    ConfigValue config_value(const std::string& where) {
        const char c = peek();
        if (c == '"') return {ConfigValue::Kind::string, string()};
        if (literal("true")) return {ConfigValue::Kind::boolean, "true"};
        if (literal("false")) return {ConfigValue::Kind::boolean, "false"};
        if (c == '-' || (c >= '0' && c <= '9')) {
            std::string_view t;
            number(t);
            return {ConfigValue::Kind::number, std::string(t)};
        }
        std::string str;
        throw InputError(where + ": expected a number, true, false or a string, found " +
                         (c == '[' ? std::string("a list") : describe_scalar(str)));
    }

    struct Value {
        Value(const std::string& o, const std::string& w, bool t) : origin(o), where(w), text(t) {}
        const std::string& origin;
        const std::string& where;
        bool text;
        Array a;
        std::vector<std::size_t> shape;  // lengths of the lists at each depth (first list)
        std::vector<bool> known;         // whether that length is known yet
        std::size_t leaf = kNoLeaf;      // depth at which scalars sit (= ndim)
        std::vector<std::size_t> index;  // where we are, for messages
        GrowBuffer numbers;              // the numbers read, as doubles (grown without copying)
        static constexpr std::size_t kNoLeaf = std::size_t(-1);
    };

    // After a backslash in a string: one of JSON's escapes, decoded onto `out`; a \u
    // escape of a high surrogate must be followed by one of a low surrogate.
    void escape(std::string& out) {
        if (p_ >= end_) syntax("unterminated string");
        char e = *p_++;
        switch (e) {
            case '"':
                out += '"';
                break;
            case '\\':
                out += '\\';
                break;
            case '/':
                out += '/';
                break;
            case 'b':
                out += '\b';
                break;
            case 'f':
                out += '\f';
                break;
            case 'n':
                out += '\n';
                break;
            case 'r':
                out += '\r';
                break;
            case 't':
                out += '\t';
                break;
            case 'u': {
                std::uint32_t cp = hex4();
                if (cp >= 0xD800 && cp < 0xDC00) {  // a surrogate pair
                    if (end_ - p_ < 6 || p_[0] != '\\' || p_[1] != 'u') syntax("unpaired surrogate in \\u escape");
                    p_ += 2;
                    std::uint32_t lo = hex4();
                    if (lo < 0xDC00 || lo > 0xDFFF) syntax("unpaired surrogate in \\u escape");
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                    syntax("unpaired surrogate in \\u escape");
                }
                io_detail::append_utf8(out, cp);
                break;
            }
            default:
                syntax("invalid escape \\" + shown(std::string(1, e)));
        }
    }

    // After lead byte c (>= 0x80) in a string: a whole UTF-8 sequence, its continuation
    // bytes present, no overlong form, no surrogate, nothing past 0x10FFFF; copied to `out`.
    void utf8_sequence(std::string& out, unsigned char c) {
        int n = c >= 0xF0 && c <= 0xF4 ? 3 : c >= 0xE0 ? 2 : c >= 0xC2 && c < 0xE0 ? 1 : -1;
        if (c >= 0xF5 || n < 0 || end_ - p_ < n) syntax("invalid UTF-8 in a string");
        std::uint32_t cp = c & (0x3F >> n);
        for (int k = 0; k < n; ++k) {
            unsigned char cc = static_cast<unsigned char>(p_[k]);
            if ((cc & 0xC0) != 0x80) syntax("invalid UTF-8 in a string");
            cp = cp << 6 | (cc & 0x3F);
        }
        if ((n == 2 && cp < 0x800) || (n == 3 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF))
            syntax("invalid UTF-8 in a string");
        out += char(c);
        out.append(p_, std::size_t(n));
        p_ += n;
    }

    std::uint32_t hex4() {
        if (end_ - p_ < 4) syntax("short \\u escape");
        std::uint32_t v = 0;
        for (int k = 0; k < 4; ++k) {
            char c = *p_++;
            v <<= 4;
            if (c >= '0' && c <= '9')
                v |= std::uint32_t(c - '0');
            else if (c >= 'a' && c <= 'f')
                v |= std::uint32_t(c - 'a' + 10);
            else if (c >= 'A' && c <= 'F')
                v |= std::uint32_t(c - 'A' + 10);
            else
                syntax("invalid \\u escape");
        }
        return v;
    }

    // "data.json: W_Q[3][1]": the array, then the element's indices down `levels` lists.
    std::string path(const Value& v, std::size_t levels) const {
        std::string s = v.where;
        for (std::size_t k = 0; k < levels && k < v.index.size(); ++k) s += "[" + std::to_string(v.index[k]) + "]";
        return s;
    }
    [[noreturn]] void fail(const Value& v, std::size_t levels, const std::string& what) const {
        throw InputError(path(v, levels) + ": " + what);
    }

    // Consumes a scalar and returns how to name it in a message ("number 2", "null", ...).
    std::string describe_scalar(std::string& str) {
        char c = peek();
        if (c == '"') {
            str = string();
            return "string \"" + shown(str, 20) + "\"";
        }
        if (c == '{') return "an object";
        if (literal("true")) return "true";
        if (literal("false")) return "false";
        if (literal("null")) return "null";
        std::string_view t;
        number(t);
        return "number " + shown(t);
    }

    void scalar(Value& v) {
        const std::size_t levels = v.index.size();
        char c = peek();
        if (!v.text) {
            if (c == '-' || (c >= '0' && c <= '9')) {
                std::string_view t;
                return push(v, number(t));
            }
            if (literal("true")) return push(v, 1.0);
            if (literal("false")) return push(v, 0.0);
            std::string str;
            std::string what = describe_scalar(str);
            double nf;
            if (c == '"' && nonfinite_from_string(str, nf)) return push(v, nf);
            fail(v, levels,
                 "expected a number, found " + what +
                     (what == "null" ? " (write non-finite values as \"nan\", \"inf\" or \"-inf\")" : ""));
        }
        if (c == '"') {
            v.a.strings.push_back(string());
            return;
        }
        std::string str;
        fail(v, levels, "expected a string (token label), found " + describe_scalar(str));
    }

    // A list at depth d (p at '['): every list at one depth has the first one's length.
    void list(Value& v, std::size_t d) {
        if (d >= kMaxDims)
            throw InputError(json_too_deep(v.origin, kMaxDims) + " (an array has at most " + std::to_string(kMaxDims) +
                             " dimensions)");
        ++p_;  // '['
        if (v.shape.size() <= d) v.shape.resize(d + 1), v.known.resize(d + 1);
        v.index.push_back(0);
        std::size_t count = 0;
        if (peek() != ']') {
            for (;;) {
                v.index.back() = count;
                element(v, d + 1);
                ++count;
                char c = peek();
                if (c == ',') {
                    ++p_;
                    continue;
                }
                if (c == ']') break;
                syntax("expected ',' or ']'");
            }
        }
        ++p_;  // ']'
        v.index.pop_back();
        account(v);
        if (count == 0 && v.leaf == Value::kNoLeaf) v.leaf = d + 1;
        check_length(v, d, count);
    }

    // One element at depth e of a list: a list above the depth where scalars sit (the
    // first scalar found fixes that depth), a scalar at it; anything else is ragged.
    void element(Value& v, std::size_t e) {
        if (peek() == '[') {
            if (v.leaf != Value::kNoLeaf && e >= v.leaf)
                fail(v, e, "ragged array: expected a number at this depth, found a list");
            list(v, e);
            return;
        }
        if (v.leaf == Value::kNoLeaf) v.leaf = e;
        if (e < v.leaf) {
            std::string str;
            const char* at = p_;
            std::string what = describe_scalar(str);
            p_ = at;
            fail(v, e, "ragged array: expected a list of " + std::to_string(v.shape[e]) + " elements, found " + what);
        }
        scalar(v);
    }

    // The first list closed at depth d fixes the length there; every later one must match it.
    void check_length(Value& v, std::size_t d, std::size_t count) {
        if (!v.known[d]) {
            v.shape[d] = count;
            v.known[d] = true;
        } else if (v.shape[d] != count) {
            fail(v, d,
                 "ragged array: expected " + std::to_string(v.shape[d]) +
                     " elements (as in the first list at this depth), found " + std::to_string(count));
        }
    }

    // One number more, checked against the limit before it is held: a list of any length
    // stops at the limit, not at the end of the list.
    void push(Value& v, double x) {
        if (held_ + v.numbers.size() + sizeof x > max_bytes_) over_limit(v, v.numbers.size() + sizeof x);
        v.numbers.append(&x, sizeof x);
    }
    // Values are held as doubles (text: about a string each), beside the JSON text: all
    // arrays together and the text within the limit.
    void account(const Value& v) {
        const std::size_t now = v.numbers.size() + v.a.strings.size() * sizeof(std::string);
        if (held_ + now > max_bytes_) over_limit(v, now);
    }
    [[noreturn]] void over_limit(const Value& v, std::size_t now) const {
        const std::size_t text = std::size_t(end_ - begin_);
        throw MemoryLimitError(v.origin + ": the values read so far need " + format_bytes(held_ - text + now) +
                               " beside the " + format_bytes(text) + " of JSON text, over " +
                               io_detail::memory_limit_of(max_bytes_));
    }

    const char* begin_;
    const char* p_;
    const char* end_;
    const std::string& source_;
    std::size_t max_bytes_;
    std::size_t held_;  // bytes held: the text, and the arrays read so far
};

}  // namespace

Bundle parse_json_bundle(std::string_view text, const std::string& source, std::size_t max_bytes,
                         const NameCheck& check_name) {
    JsonReader r(text, source, max_bytes);
    if (r.peek() != '{')
        throw InputError(shown_path(source) +
                         ": expected a JSON object of named arrays ({\"x\": [[...]], \"W_Q\": ...}), found " +
                         (r.at_end() ? std::string("nothing") : r.describe_top()));
    Bundle b;
    b.source = source;
    r.object_begin();
    std::string key;
    bool have_config = false;
    for (bool first = true; r.object_next(first, key); first = false) {
        if (b.arrays.count(key))
            throw InputError(shown_path(source) + ": '" + shown(key) + "' appears twice in the object");
        const std::string origin = shown_path(source) + ": " + shown(key);
        if (key == "config") {  // the run options the bundle carries: an object, not an array
            if (have_config) throw InputError(shown_path(source) + ": 'config' appears twice in the object");
            b.config = r.config(origin);
            have_config = true;
            continue;
        }
        if (check_name) check_name(shown_path(source), key);
        b.arrays[key] = r.array(origin, origin, is_token_name(key));
    }
    if (!r.at_end()) r.syntax("unexpected data after the object");
    return b;
}

std::map<std::string, ConfigValue> parse_bundle_config(std::string_view text, const std::string& origin,
                                                       std::size_t max_bytes) {
    JsonReader r(text, origin, max_bytes);
    std::map<std::string, ConfigValue> config = r.config(origin);
    if (!r.at_end()) r.syntax("unexpected data after the object");
    return config;
}

namespace {

// An object given where one array is expected holds `n` entries, not one.
[[noreturn]] void not_one_entry(const std::string& origin, std::size_t n) {
    throw InputError(origin + ": expected a nested list, or an object with one entry; found an object with " +
                     std::to_string(n) + " entries");
}

}  // namespace

Array parse_json_array(std::string_view text, const std::string& given_origin, std::size_t max_bytes) {
    const std::string origin = shown_path(given_origin);  // as load_array gives it: already shown
    JsonReader r(text, origin, max_bytes);
    if (r.at_end()) r.syntax("empty input");
    if (r.peek() == '{') {
        r.object_begin();
        std::string key;
        std::optional<Array> a;
        for (bool first = true; r.object_next(first, key); first = false) {
            if (a) not_one_entry(origin, 2);
            // The entry's key is named too when it is not the array's own name ("w.json: W_O: W[1]").
            const std::string name = shown(key);
            const bool same = origin.size() > name.size() + 2 && ends_with(origin, ": " + name);
            const std::string where = same ? origin : origin + ": " + name;
            a = r.array(origin, where, false);
        }
        if (!a) not_one_entry(origin, 0);
        if (!r.at_end()) r.syntax("unexpected data after the object");
        return std::move(*a);
    }
    Array a = r.array(origin, origin, false);
    if (!r.at_end()) r.syntax("unexpected data after the value");
    return a;
}

}  // namespace attnscope
