// .npy reading and writing (NEP 1: format versions 1.0, 2.0, 3.0).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "attnscope/base/errors.hpp"
#include "attnscope/io/read.hpp"
#include "attnscope/io/write.hpp"
#include "bytes.hpp"

namespace attnscope {

std::size_t data_bytes(const OutArray& a) {
    return element_count(a.shape) * (a.text_width ? 4 * a.text_width : dtype_size(a.dtype));
}

// ---- .npy header ----------------------------------------------------------------------
namespace {

// The header is a Python dict literal: {'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }
struct NpyHeader {
    std::string descr;
    bool fortran_order = false;
    std::vector<std::size_t> shape;
};

class HeaderParser {
   public:
    HeaderParser(std::string_view text, const std::string& origin) : s_(text), origin_(origin) {}

    NpyHeader parse() {
        NpyHeader h;
        bool have_descr = false, have_order = false, have_shape = false;
        expect('{');
        for (;;) {
            skip_ws();
            if (peek() == '}') break;
            std::string key = parse_string();
            expect(':');
            skip_ws();
            if (key == "descr") {
                if (peek() == '[')
                    fail("structured (record) dtypes are not supported; expected a plain numeric dtype such as '<f8'");
                h.descr = parse_string();
                have_descr = true;
            } else if (key == "fortran_order") {
                h.fortran_order = parse_bool();
                have_order = true;
            } else if (key == "shape") {
                h.shape = parse_shape();
                have_shape = true;
            } else {
                fail("unexpected header key '" + io_detail::shown(key) + "'");
            }
            skip_ws();
            if (peek() == ',') {
                ++i_;
                continue;
            }
            if (peek() == '}') break;
            fail("expected ',' or '}' in the header");
        }
        ++i_;  // '}'
        if (!have_descr || !have_order || !have_shape) fail("header lacks one of 'descr', 'fortran_order', 'shape'");
        check_trailing();
        return h;
    }

   private:
    [[noreturn]] void fail(const std::string& what) const {
        throw InputError(origin_ + ": not a valid .npy header: " + what);
    }
    // After the dict, numpy (ast.literal_eval of the whole header) takes only what Python
    // ignores: blanks (space, tab, form feed, newlines), '#' comments to the end of a line,
    // and a backslash ending a line. np.save writes spaces and one newline. Anything else
    // numpy refuses ("Cannot parse header"), and so do we, naming what was found.
    void check_trailing() const {
        for (std::size_t i = i_; i < s_.size();) {
            const char c = s_[i];
            if (c == ' ' || c == '\t' || c == '\f' || c == '\n' || c == '\r') {
                ++i;
            } else if (c == '#') {
                while (i < s_.size() && s_[i] != '\n' && s_[i] != '\r' && s_[i] != '\0') ++i;
            } else if (c == '\\' && i + 1 < s_.size() && (s_[i + 1] == '\n' || s_[i + 1] == '\r')) {
                i += 2;
            } else {
                fail("expected only spaces and a newline after the closing '}', found " + excerpt(s_.substr(i)));
            }
        }
    }
    // What was found, for the message: the rest of its line (up to 20 bytes, trailing
    // blanks dropped), quoted, with control and non-ASCII bytes escaped; "..." when more
    // than blanks follows.
    static std::string excerpt(std::string_view t) {
        static constexpr char kHex[] = "0123456789abcdef";
        std::size_t n = std::min({t.find('\n'), t.size(), std::size_t{20}});
        while (n > 1 && (t[n - 1] == ' ' || t[n - 1] == '\t')) --n;
        std::string out = "\"";
        for (std::size_t k = 0; k < n; ++k) {
            const auto c = static_cast<unsigned char>(t[k]);
            if (c == '"' || c == '\\')
                out += '\\', out += char(c);
            else if (c >= 0x20 && c < 0x7f)
                out += char(c);
            else
                out += "\\x", out += kHex[c >> 4], out += kHex[c & 15];
        }
        const bool more = t.find_first_not_of(" \t\f\r\n", n) != std::string_view::npos;
        return out + (more ? "\"..." : "\"");
    }
    char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
    void skip_ws() {
        while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n')) ++i_;
    }
    void expect(char c) {
        skip_ws();
        if (peek() != c) fail(std::string("expected '") + c + "'");
        ++i_;
    }
    std::string parse_string() {
        skip_ws();
        char q = peek();
        if (q != '\'' && q != '"') fail("expected a quoted string");
        std::size_t end = s_.find(q, i_ + 1);
        if (end == std::string_view::npos) fail("unterminated string");
        std::string out(s_.substr(i_ + 1, end - i_ - 1));
        i_ = end + 1;
        return out;
    }
    bool parse_bool() {
        if (s_.substr(i_, 4) == "True") {
            i_ += 4;
            return true;
        }
        if (s_.substr(i_, 5) == "False") {
            i_ += 5;
            return false;
        }
        fail("'fortran_order' must be True or False");
    }
    std::vector<std::size_t> parse_shape() {
        std::vector<std::size_t> shape;
        expect('(');
        for (;;) {
            skip_ws();
            if (peek() == ')') {
                ++i_;
                break;
            }
            if (peek() < '0' || peek() > '9') fail("shape must be a tuple of non-negative integers");
            std::size_t v = 0;
            while (peek() >= '0' && peek() <= '9') {
                if (__builtin_mul_overflow(v, std::size_t{10}, &v) ||
                    __builtin_add_overflow(v, std::size_t(peek() - '0'), &v))
                    fail("a shape entry is too large");
                ++i_;
            }
            if (peek() == 'L') ++i_;  // Python 2 long suffix
            shape.push_back(v);
            skip_ws();
            if (peek() == ',') {
                ++i_;
                continue;
            }
            if (peek() == ')') {
                ++i_;
                break;
            }
            fail("shape must be a tuple of non-negative integers");
        }
        if (shape.size() > 32) fail("more than 32 dimensions");
        return shape;
    }

    std::string_view s_;
    const std::string& origin_;
    std::size_t i_ = 0;
};

struct ElementType {
    char kind;         // 'f' float, 'i' signed, 'u' unsigned, 'b' bool, 'U' unicode
    std::size_t size;  // bytes per element
    bool swap;         // stored big-endian on this little-endian host
};

ElementType parse_descr(const std::string& descr, const std::string& origin) {
    auto bad = [&](const std::string& why) -> InputError {
        return InputError(origin + ": unsupported dtype '" + io_detail::shown(descr) + "' (" + why +
                          "); expected float16/32/64, integer, bool or unicode text");
    };
    if (descr.find('O') != std::string::npos && descr.size() <= 2)
        throw bad("object arrays hold Python objects, not numbers");
    if (descr.size() < 2) throw bad("too short");
    std::size_t i = 0;
    char order = '|';
    if (descr[0] == '<' || descr[0] == '>' || descr[0] == '|' || descr[0] == '=') order = descr[i++];
    if (i >= descr.size()) throw bad("no type");
    char kind = descr[i++];
    std::size_t size = 0;
    if (i >= descr.size()) throw bad("no size");
    for (; i < descr.size(); ++i) {
        if (descr[i] < '0' || descr[i] > '9' || size > 1000000) throw bad("bad size");
        size = size * 10 + std::size_t(descr[i] - '0');
    }
    bool ok = (kind == 'f' && (size == 2 || size == 4 || size == 8)) ||
              ((kind == 'i' || kind == 'u') && (size == 1 || size == 2 || size == 4 || size == 8)) ||
              (kind == 'b' && size == 1) || (kind == 'U' && size >= 1);
    if (!ok && (kind == 'f' || kind == 'i' || kind == 'u' || kind == 'b'))
        throw bad(std::to_string(size * 8) + "-bit " +
                  (kind == 'f'   ? "floats"
                   : kind == 'b' ? "bools"
                                 : "integers") +
                  " are not supported");
    if (!ok) throw bad("not a numeric, bool or text type");
    if (kind == 'U') size *= 4;  // UCS-4 code units
    bool big = order == '>';
    return {kind, size, big && std::endian::native == std::endian::little};
}

template <typename U>
U load_raw(const char* p, bool swap) {
    unsigned char b[sizeof(U)];
    std::memcpy(b, p, sizeof(U));
    if (swap) std::reverse(b, b + sizeof(U));
    U v;
    std::memcpy(&v, b, sizeof(U));
    return v;
}

double load_number(const char* p, const ElementType& t) {
    switch (t.kind) {
        case 'f':
            if (t.size == 2) return io_detail::half_to_double(load_raw<std::uint16_t>(p, t.swap));
            if (t.size == 4) return double(load_raw<float>(p, t.swap));
            return load_raw<double>(p, t.swap);
        case 'i':
            if (t.size == 1) return load_raw<std::int8_t>(p, false);
            if (t.size == 2) return load_raw<std::int16_t>(p, t.swap);
            if (t.size == 4) return load_raw<std::int32_t>(p, t.swap);
            return double(load_raw<std::int64_t>(p, t.swap));
        case 'u':
            if (t.size == 1) return load_raw<std::uint8_t>(p, false);
            if (t.size == 2) return load_raw<std::uint16_t>(p, t.swap);
            if (t.size == 4) return load_raw<std::uint32_t>(p, t.swap);
            return double(load_raw<std::uint64_t>(p, t.swap));
        default:  // 'b'
            return *p != 0 ? 1.0 : 0.0;
    }
}

std::string dtype_name(const ElementType& t) {
    switch (t.kind) {
        case 'f':
            return "float" + std::to_string(t.size * 8);
        case 'i':
            return "int" + std::to_string(t.size * 8);
        case 'u':
            return "uint" + std::to_string(t.size * 8);
        case 'b':
            return "bool";
        default:
            return "text";
    }
}

// ---- .npy reading, step by step ---------------------------------------------------------

// Where the header dict lies: after the magic, the version and the header length.
struct Preamble {
    std::size_t header_start, header_len;
};

// 1. The preamble: the magic "\x93NUMPY", a format version of 1.0 (2-byte header length)
//    or 2.0 or 3.0 (4-byte; numpy refuses any other, (1, 1) and (2, 2) too), and a header
//    that ends within the file.
Preamble read_preamble(std::string_view bytes, const std::string& origin) {
    static constexpr char kMagic[] = "\x93NUMPY";
    if (bytes.size() < 8 || bytes.substr(0, 6) != std::string_view(kMagic, 6))
        throw InputError(origin + ": not a .npy file (no \\x93NUMPY magic at the start)");
    const unsigned major = static_cast<unsigned char>(bytes[6]), minor = static_cast<unsigned char>(bytes[7]);
    if (major < 1 || major > 3 || minor != 0)
        throw InputError(origin + ": unsupported .npy format version " + std::to_string(major) + "." +
                         std::to_string(minor) + " (expected 1.0, 2.0 or 3.0)");
    Preamble p{};
    p.header_start = major == 1 ? 10 : 12;
    if (bytes.size() < p.header_start) throw InputError(origin + ": truncated .npy header");
    p.header_len = std::size_t(io_detail::load_le(bytes, 8, major == 1 ? 2 : 4));
    if (p.header_len > bytes.size() - p.header_start)
        throw InputError(origin + ": truncated .npy file: header claims " + std::to_string(p.header_len) +
                         " bytes, file has " + std::to_string(bytes.size() - p.header_start) + " after the preamble");
    return p;
}

// 3. The data: the shape's element count and byte count must be addressable, and the
//    bytes after the header exactly that many (neither truncated nor trailing). Returns
//    the element count.
std::size_t check_data_size(const NpyHeader& h, const ElementType& t, std::string_view data,
                            const std::string& origin) {
    std::size_t count = 1, nbytes = 0;
    for (std::size_t d : h.shape)
        if (__builtin_mul_overflow(count, d, &count))
            throw InputError(origin + ": shape " + shape_str(h.shape) + " has more elements than can be addressed");
    if (__builtin_mul_overflow(count, t.size, &nbytes))
        throw InputError(origin + ": shape " + shape_str(h.shape) + " is too large to address");
    if (data.size() != nbytes)
        throw InputError(origin + ": shape " + shape_str(h.shape) + " of " + dtype_name(t) + " needs " +
                         std::to_string(nbytes) + " data bytes, file has " + std::to_string(data.size()) +
                         (data.size() < nbytes ? " (truncated)" : " (trailing bytes)"));
    return count;
}

// 4. The memory limit: the values as if widened to double (text: about a string per
//    element), what a float64 run holds of them, whether or not they are kept as stored.
void check_memory(std::size_t count, const ElementType& t, const NpyHeader& h, const std::string& origin,
                  std::size_t max_bytes) {
    std::size_t widened = 0;
    if (__builtin_mul_overflow(count, t.kind == 'U' ? sizeof(std::string) + t.size : sizeof(double), &widened) ||
        widened > max_bytes)
        throw MemoryLimitError(origin + ": shape " + shape_str(h.shape) + " needs " +
                               (widened ? format_bytes(widened) : std::string("more than can be addressed")) +
                               " in memory, over " + io_detail::memory_limit_of(max_bytes));
}

// The position in C order of each stored element, taken in file order: the element's own
// index for C-order data; for Fortran order (axis 0 fastest) the C-order offset of a
// multi-index that advances one step per call.
class COrderPositions {
   public:
    COrderPositions(const std::vector<std::size_t>& shape, bool fortran)
        : shape_(shape), fortran_(fortran), c_stride_(shape.size(), 1), idx_(shape.size(), 0) {
        for (std::size_t i = shape.size(); i-- > 1;) c_stride_[i - 1] = c_stride_[i] * shape[i];
    }
    std::size_t next(std::size_t k) {
        if (!fortran_) return k;
        std::size_t pos = 0;
        for (std::size_t i = 0; i < idx_.size(); ++i) pos += idx_[i] * c_stride_[i];
        for (std::size_t i = 0; i < idx_.size(); ++i) {  // advance, axis 0 fastest
            if (++idx_[i] < shape_[i]) break;
            idx_[i] = 0;
        }
        return pos;
    }

   private:
    const std::vector<std::size_t>& shape_;
    bool fortran_;
    std::vector<std::size_t> c_stride_, idx_;
};

// 5a. Text ('<U'): each element's UCS-4 code units up to the first NUL, each a Unicode
//     scalar value (no surrogates, at most 0x10FFFF), as UTF-8.
void read_text(Array& a, std::string_view data, const ElementType& t, std::size_t count, COrderPositions& pos,
               const std::string& origin) {
    a.strings.resize(count);
    std::size_t chars = t.size / 4;
    for (std::size_t k = 0; k < count; ++k) {
        std::string s;
        for (std::size_t c = 0; c < chars; ++c) {
            auto cp = load_raw<std::uint32_t>(data.data() + k * t.size + c * 4, t.swap);
            if (cp == 0) break;
            if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
                throw InputError(origin + ": text element " + std::to_string(k) + " is not valid Unicode");
            io_detail::append_utf8(s, cp);
        }
        a.strings[pos.next(k)] = std::move(s);
    }
}

// 5b. Little-endian, C-order float32/float64: kept as stored, in place when the caller
//     keeps the bytes alive, else one copy.
void keep_stored(Array& a, std::string_view data, const ElementType& t, std::shared_ptr<const void> keep) {
    a.held = t.size == 4 ? Array::Held::float32 : Array::Held::float64;
    if (keep) {
        a.stored = data;
        a.keep = std::move(keep);
    } else {
        auto copy = std::make_shared<const std::string>(data);
        a.stored = *copy;
        a.keep = std::move(copy);
    }
}

// 5c. Every other numeric dtype: widened to double, element by element, into C order.
void widen(Array& a, std::string_view data, const ElementType& t, std::size_t count, COrderPositions& pos) {
    a.values.resize(count);
    for (std::size_t k = 0; k < count; ++k) a.values[pos.next(k)] = load_number(data.data() + k * t.size, t);
}

}  // namespace

Array parse_npy(std::string_view bytes, const std::string& given_origin, std::size_t max_bytes,
                std::shared_ptr<const void> keep) {
    const std::string origin = io_detail::shown_path(given_origin);  // as load_array gives it: already shown
    // 1. Preamble; 2. the header dict and its dtype; 3. the data's size; 4. the memory limit.
    const Preamble p = read_preamble(bytes, origin);
    NpyHeader h = HeaderParser(bytes.substr(p.header_start, p.header_len), origin).parse();
    ElementType t = parse_descr(h.descr, origin);
    std::string_view data = bytes.substr(p.header_start + p.header_len);
    const std::size_t count = check_data_size(h, t, data, origin);
    check_memory(count, t, h, origin, max_bytes);

    // 5. The elements: text, kept as stored, or widened to double.
    Array a;
    a.shape = h.shape;
    a.origin = origin;
    a.dtype = dtype_name(t);
    COrderPositions pos(a.shape, h.fortran_order);
    const bool as_stored = t.kind == 'f' && (t.size == 4 || t.size == 8) && !t.swap && !h.fortran_order;
    if (t.kind == 'U')
        read_text(a, data, t, count, pos, origin);
    else if (as_stored)
        keep_stored(a, data, t, std::move(keep));
    else
        widen(a, data, t, count, pos);
    return a;
}

std::string npy_header(const OutArray& a, std::size_t align) {
    const std::string descr = a.text_width                ? "<U" + std::to_string(a.text_width)
                              : a.dtype == DType::float32 ? "<f4"
                              : a.dtype == DType::float64 ? "<f8"
                              : a.dtype == DType::int64   ? "<i8"
                                                          : "|b1";
    std::string dict =
        std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': " + shape_str(a.shape) + ", }";
    // Pad with spaces and a final newline so the data starts on an `align`-byte boundary.
    std::size_t pre = 10;
    std::size_t total = pre + dict.size() + 1;
    if (total > 65535 + pre) pre = 12;  // version 2.0: 4-byte header length
    total = pre + dict.size() + 1;
    std::size_t pad = (align - total % align) % align;
    dict.append(pad, ' ');
    dict += '\n';
    std::string out("\x93NUMPY", 6);
    std::size_t hl = dict.size();
    out += pre == 10 ? '\x01' : '\x02';  // format version 1.0 or 2.0
    out += '\x00';
    io_detail::put_le(out, hl, pre == 10 ? 2 : 4);
    return out + dict;
}

void write_npy(AtomicFile& file, const OutArray& a) {
    file.write(npy_header(a));
    file.write(a.data, data_bytes(a));
}

}  // namespace attnscope
