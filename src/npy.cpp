// .npy reading and writing (NEP 1: format versions 1.0, 2.0, 3.0), shape helpers,
// and the atomic output file every writer goes through.
#include "attnscope/errors.hpp"
#include "attnscope/io.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <type_traits>

namespace attnscope {

std::string shape_str(const std::vector<std::size_t>& shape) {
    std::string s = "(";
    for (std::size_t i = 0; i < shape.size(); ++i) {
        if (i) s += ", ";
        s += std::to_string(shape[i]);
    }
    if (shape.size() == 1) s += ",";
    return s + ")";
}

std::size_t element_count(const std::vector<std::size_t>& shape) {
    std::size_t n = 1;
    for (std::size_t d : shape) n *= d;
    return n;
}

std::size_t dtype_size(DType dtype) {
    switch (dtype) {
        case DType::float32: return 4;
        case DType::float64: return 8;
        case DType::boolean: return 1;
    }
    return 0;
}

std::string format_bytes(std::size_t bytes) {
    const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    double v = double(bytes);
    int u = 0;
    while (v >= 1024 && u < 6) v /= 1024, ++u;
    char buf[48];
    if (u == 0) std::snprintf(buf, sizeof buf, "%zu bytes", bytes);
    else std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
    return buf;
}

namespace {

struct Fd {
    int fd;
    ~Fd() { ::close(fd); }
};

// Opens `path` for reading and checks it: a file, not a directory; a regular file no
// larger than the memory limit.
struct stat open_checked(const std::string& path, std::size_t max_bytes, int& fd) {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw InputError(path + ": cannot open file: " + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        const int e = errno;
        ::close(fd);
        throw InputError(path + ": cannot read file: " + std::strerror(e));
    }
    if (S_ISDIR(st.st_mode)) {
        ::close(fd);
        throw InputError(path + ": is a directory, expected a file");
    }
    if (S_ISREG(st.st_mode) && std::size_t(st.st_size) > max_bytes) {
        ::close(fd);
        throw MemoryLimitError(path + ": the file holds " + format_bytes(std::size_t(st.st_size)) +
                               ", over the memory limit of " + format_bytes(max_bytes) + " (--max-memory)");
    }
    return st;
}

// Reads an open file to its end: straight into a string of the file's size when it is a
// regular file, else (a pipe, a device) in growing steps up to the memory limit.
std::string read_all(int fd, const struct stat& st, const std::string& path, std::size_t max_bytes) {
    const bool sized = S_ISREG(st.st_mode);
    std::string bytes;
    std::size_t have = 0;
    bytes.resize(sized ? std::size_t(st.st_size) : std::size_t{1} << 16);
    for (;;) {
        if (have == bytes.size()) {
            if (sized) break;
            if (bytes.size() > max_bytes)
                throw MemoryLimitError(path + ": the file holds more than the memory limit of " +
                                       format_bytes(max_bytes) + " (--max-memory)");
            bytes.resize(bytes.size() * 2);
        }
        const ssize_t n = ::read(fd, bytes.data() + have, bytes.size() - have);
        if (n < 0) {
            if (errno == EINTR) continue;
            throw InputError(path + ": cannot read file: " + std::strerror(errno));
        }
        if (n == 0) break;
        have += std::size_t(n);
    }
    bytes.resize(have);
    return bytes;
}

}  // namespace

std::string read_file(const std::string& path, std::size_t max_bytes) {
    // One open, one fstat, reads straight into a string of the file's size (a special
    // file whose size is unknown, e.g. a pipe, is read until its end).
    int fd = -1;
    const struct stat st = open_checked(path, max_bytes, fd);
    Fd closer{fd};
    return read_all(fd, st, path, max_bytes);
}

FileBytes map_file(const std::string& path, std::size_t max_bytes) {
    // Mapping hands the page cache's pages to the readers directly: no copy, and none of
    // the fresh zero-filled pages a buffer of the file's size would fault in. Every page
    // is mapped at once (MAP_POPULATE): the readers go through all of them anyway.
    int fd = -1;
    const struct stat st = open_checked(path, max_bytes, fd);
    Fd closer{fd};
    if (S_ISREG(st.st_mode) && st.st_size > 0) {
        const std::size_t size = std::size_t(st.st_size);
        void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
        if (p != MAP_FAILED) {
            std::shared_ptr<const void> keep(p, [size](const void* q) { ::munmap(const_cast<void*>(q), size); });
            return {std::string_view(static_cast<const char*>(p), size), std::move(keep)};
        }
    }
    auto bytes = std::make_shared<const std::string>(read_all(fd, st, path, max_bytes));
    return {std::string_view(*bytes), bytes};
}

// ---- numbers of an Array ----------------------------------------------------------------
namespace {

template <typename S>
S load_at(const char* p, std::size_t k) {
    S v;
    std::memcpy(&v, p + k * sizeof(S), sizeof(S));
    return v;
}

// Counts the numbers in src[0, m) that are NaN or beyond `largest` in magnitude; `base`
// is the array index of src[0]. A vectorisable test first: most chunks hold none.
template <typename S>
void scan(const S* src, std::size_t m, std::size_t base, S largest, NonFinite& nf) {
    unsigned any = 0;
    for (std::size_t k = 0; k < m; ++k) any |= !(std::fabs(src[k]) <= largest);
    if (!any) return;
    for (std::size_t k = 0; k < m; ++k)
        if (!(std::fabs(src[k]) <= largest) && nf.count++ == 0) {
            nf.first = base + k;
            nf.first_value = double(src[k]);
        }
}

// Copies m stored numbers of type S (unaligned bytes at p) to out[b, b + m) as T, and
// scans them for values NaN, infinite or beyond `largest`.
constexpr std::size_t kChunk = 2048;  // numbers per step: a chunk is scanned while in cache
template <typename S, typename T>
void copy_stored(const char* p, T* out, std::size_t m, std::size_t b, S largest, NonFinite& nf) {
    if constexpr (std::is_same_v<S, T>) {
        std::memcpy(out + b, p, m * sizeof(S));
        scan(out + b, m, b, largest, nf);
    } else {
        S buf[kChunk];
        std::memcpy(buf, p, m * sizeof(S));
        for (std::size_t k = 0; k < m; ++k) out[b + k] = static_cast<T>(buf[k]);
        scan(buf, m, b, largest, nf);
    }
}

}  // namespace

double Array::value(std::size_t k) const {
    switch (held) {
        case Held::float32: return double(load_at<float>(stored.data(), k));
        case Held::float64: return load_at<double>(stored.data(), k);
        default: return values[k];
    }
}

std::vector<double> Array::doubles() const {
    std::vector<double> out(count());
    copy_numbers<double>(*this, out.data());
    return out;
}

template <typename T>
NonFinite copy_numbers(const Array& a, T* out) {
    // Chunk by chunk, so each chunk is scanned while it is still in cache. Stored bytes
    // need not be aligned (an .npz member starts anywhere): they are only memcpy'd.
    const std::size_t n = a.count();
    const T largest = std::numeric_limits<T>::max();
    NonFinite nf;
    for (std::size_t b = 0; b < n; b += kChunk) {
        const std::size_t m = std::min(kChunk, n - b);
        switch (a.held) {
            case Array::Held::doubles: {
                const double* v = a.values.data() + b;
                for (std::size_t k = 0; k < m; ++k) out[b + k] = static_cast<T>(v[k]);
                scan(v, m, b, double(largest), nf);
                break;
            }
            case Array::Held::float32:
                // A float within float's range is within T's: the test is float's own.
                copy_stored<float>(a.stored.data() + b * sizeof(float), out, m, b, std::numeric_limits<float>::max(),
                                   nf);
                break;
            case Array::Held::float64:
                copy_stored<double>(a.stored.data() + b * sizeof(double), out, m, b, double(largest), nf);
                break;
        }
    }
    return nf;
}

template NonFinite copy_numbers<float>(const Array&, float*);
template NonFinite copy_numbers<double>(const Array&, double*);

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
                if (peek() == '[') fail("structured (record) dtypes are not supported; expected a plain numeric dtype such as '<f8'");
                h.descr = parse_string();
                have_descr = true;
            } else if (key == "fortran_order") {
                h.fortran_order = parse_bool();
                have_order = true;
            } else if (key == "shape") {
                h.shape = parse_shape();
                have_shape = true;
            } else {
                fail("unexpected header key '" + key + "'");
            }
            skip_ws();
            if (peek() == ',') { ++i_; continue; }
            if (peek() == '}') break;
            fail("expected ',' or '}' in the header");
        }
        ++i_;  // '}'
        if (!have_descr || !have_order || !have_shape)
            fail("header lacks one of 'descr', 'fortran_order', 'shape'");
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
            if (c == '"' || c == '\\') out += '\\', out += char(c);
            else if (c >= 0x20 && c < 0x7f) out += char(c);
            else out += "\\x", out += kHex[c >> 4], out += kHex[c & 15];
        }
        const bool more = t.find_first_not_of(" \t\f\r\n", n) != std::string_view::npos;
        return out + (more ? "\"..." : "\"");
    }
    char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
    void skip_ws() { while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n')) ++i_; }
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
        if (s_.substr(i_, 4) == "True") { i_ += 4; return true; }
        if (s_.substr(i_, 5) == "False") { i_ += 5; return false; }
        fail("'fortran_order' must be True or False");
    }
    std::vector<std::size_t> parse_shape() {
        std::vector<std::size_t> shape;
        expect('(');
        for (;;) {
            skip_ws();
            if (peek() == ')') { ++i_; break; }
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
            if (peek() == ',') { ++i_; continue; }
            if (peek() == ')') { ++i_; break; }
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
    char kind;          // 'f' float, 'i' signed, 'u' unsigned, 'b' bool, 'U' unicode
    std::size_t size;   // bytes per element
    bool swap;          // stored big-endian on this little-endian host
};

ElementType parse_descr(const std::string& descr, const std::string& origin) {
    auto bad = [&](const std::string& why) -> InputError {
        return InputError(origin + ": unsupported dtype '" + descr + "' (" + why +
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
    if (!ok) throw bad("not a numeric, bool or text type");
    if (kind == 'U') size *= 4;  // UCS-4 code units
    bool big = order == '>';
    return {kind, size, big && std::endian::native == std::endian::little};
}

double half_to_double(std::uint16_t h) {
    int sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    double v;
    if (exp == 0) v = std::ldexp(double(mant), -24);
    else if (exp == 31) v = mant ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
    else v = std::ldexp(double(mant | 0x400), exp - 25);
    return sign ? -v : v;
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
            if (t.size == 2) return half_to_double(load_raw<std::uint16_t>(p, t.swap));
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

void append_utf8(std::string& out, std::uint32_t cp) {
    if (cp < 0x80) out += char(cp);
    else if (cp < 0x800) { out += char(0xC0 | (cp >> 6)); out += char(0x80 | (cp & 0x3F)); }
    else if (cp < 0x10000) {
        out += char(0xE0 | (cp >> 12)); out += char(0x80 | ((cp >> 6) & 0x3F)); out += char(0x80 | (cp & 0x3F));
    } else {
        out += char(0xF0 | (cp >> 18)); out += char(0x80 | ((cp >> 12) & 0x3F));
        out += char(0x80 | ((cp >> 6) & 0x3F)); out += char(0x80 | (cp & 0x3F));
    }
}

std::string dtype_name(const ElementType& t) {
    switch (t.kind) {
        case 'f': return "float" + std::to_string(t.size * 8);
        case 'i': return "int" + std::to_string(t.size * 8);
        case 'u': return "uint" + std::to_string(t.size * 8);
        case 'b': return "bool";
        default: return "text";
    }
}

}  // namespace

Array parse_npy(std::string_view bytes, const std::string& origin, std::size_t max_bytes,
                std::shared_ptr<const void> keep) {
    static constexpr char kMagic[] = "\x93NUMPY";
    if (bytes.size() < 10 || bytes.substr(0, 6) != std::string_view(kMagic, 6))
        throw InputError(origin + ": not a .npy file (no \\x93NUMPY magic at the start)");
    unsigned major = static_cast<unsigned char>(bytes[6]);
    std::size_t header_len, header_start;
    if (major == 1) {
        header_len = std::size_t(static_cast<unsigned char>(bytes[8])) |
                     std::size_t(static_cast<unsigned char>(bytes[9])) << 8;
        header_start = 10;
    } else if (major == 2 || major == 3) {
        if (bytes.size() < 12) throw InputError(origin + ": truncated .npy header");
        header_len = 0;
        for (int k = 3; k >= 0; --k) header_len = header_len << 8 | static_cast<unsigned char>(bytes[8 + std::size_t(k)]);
        header_start = 12;
    } else {
        throw InputError(origin + ": unsupported .npy format version " + std::to_string(major) + " (expected 1, 2 or 3)");
    }
    if (header_len > bytes.size() - header_start)
        throw InputError(origin + ": truncated .npy file: header claims " + std::to_string(header_len) +
                         " bytes, file has " + std::to_string(bytes.size() - header_start) + " after the preamble");
    NpyHeader h = HeaderParser(bytes.substr(header_start, header_len), origin).parse();
    ElementType t = parse_descr(h.descr, origin);

    std::size_t count = 1, nbytes = 0;
    for (std::size_t d : h.shape)
        if (__builtin_mul_overflow(count, d, &count))
            throw InputError(origin + ": shape " + shape_str(h.shape) + " has more elements than can be addressed");
    if (__builtin_mul_overflow(count, t.size, &nbytes))
        throw InputError(origin + ": shape " + shape_str(h.shape) + " is too large to address");
    std::string_view data = bytes.substr(header_start + header_len);
    if (data.size() != nbytes)
        throw InputError(origin + ": shape " + shape_str(h.shape) + " of " + dtype_name(t) + " needs " +
                         std::to_string(nbytes) + " data bytes, file has " + std::to_string(data.size()) +
                         (data.size() < nbytes ? " (truncated)" : " (trailing bytes)"));

    // Limit: the values as if widened to double (text: about a string per element), what a
    // float64 run holds of them, whether or not they are kept as stored.
    std::size_t widened = 0;
    if (__builtin_mul_overflow(count, t.kind == 'U' ? sizeof(std::string) + t.size : sizeof(double), &widened) ||
        widened > max_bytes)
        throw MemoryLimitError(origin + ": shape " + shape_str(h.shape) + " needs " +
                               (widened ? format_bytes(widened) : std::string("more than can be addressed")) +
                               " in memory, over the memory limit of " + format_bytes(max_bytes) + " (--max-memory)");

    Array a;
    a.shape = h.shape;
    a.origin = origin;
    a.dtype = dtype_name(t);

    // Position of the k-th stored element in C order (Fortran order stores axis 0 fastest).
    std::vector<std::size_t> c_stride(h.shape.size(), 1);
    for (std::size_t i = h.shape.size(); i-- > 1;) c_stride[i - 1] = c_stride[i] * h.shape[i];
    std::vector<std::size_t> idx(h.shape.size(), 0);
    auto next_c_position = [&](std::size_t k) -> std::size_t {
        if (!h.fortran_order) return k;
        std::size_t pos = 0;
        for (std::size_t i = 0; i < idx.size(); ++i) pos += idx[i] * c_stride[i];
        for (std::size_t i = 0; i < idx.size(); ++i) {  // advance, axis 0 fastest
            if (++idx[i] < h.shape[i]) break;
            idx[i] = 0;
        }
        return pos;
    };

    if (t.kind == 'U') {
        a.strings.resize(count);
        std::size_t chars = t.size / 4;
        for (std::size_t k = 0; k < count; ++k) {
            std::string s;
            for (std::size_t c = 0; c < chars; ++c) {
                auto cp = load_raw<std::uint32_t>(data.data() + k * t.size + c * 4, t.swap);
                if (cp == 0) break;
                if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) throw InputError(origin + ": text element " + std::to_string(k) + " is not valid Unicode");
                append_utf8(s, cp);
            }
            a.strings[next_c_position(k)] = std::move(s);
        }
        return a;
    }
    if (t.kind == 'f' && (t.size == 4 || t.size == 8) && !t.swap && !h.fortran_order) {
        // Kept as stored: in place when the caller keeps the bytes alive, else one copy.
        a.held = t.size == 4 ? Array::Held::float32 : Array::Held::float64;
        if (keep) {
            a.stored = data;
            a.keep = std::move(keep);
        } else {
            auto copy = std::make_shared<const std::string>(data);
            a.stored = *copy;
            a.keep = std::move(copy);
        }
        return a;
    }
    a.values.resize(count);
    for (std::size_t k = 0; k < count; ++k) a.values[next_c_position(k)] = load_number(data.data() + k * t.size, t);
    return a;
}

std::string npy_header(const OutArray& a, std::size_t align) {
    const char* descr = a.dtype == DType::float32 ? "<f4" : a.dtype == DType::float64 ? "<f8" : "|b1";
    std::string dict = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': " +
                       shape_str(a.shape) + ", }";
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
    if (pre == 10) {
        out += '\x01'; out += '\x00';
        out += char(hl & 0xff); out += char(hl >> 8 & 0xff);
    } else {
        out += '\x02'; out += '\x00';
        for (int k = 0; k < 4; ++k) out += char(hl >> (8 * k) & 0xff);
    }
    return out + dict;
}

void write_npy(AtomicFile& file, const OutArray& a) {
    file.write(npy_header(a));
    file.write(a.data, element_count(a.shape) * dtype_size(a.dtype));
}

// ---- AtomicFile -----------------------------------------------------------------------

AtomicFile::AtomicFile(std::string target) : target_(std::move(target)) {
    temp_ = target_ + ".tmp-XXXXXX";
    fd_ = ::mkstemp(temp_.data());
    if (fd_ < 0) throw RuntimeFailure(target_ + ": cannot create output file: " + std::strerror(errno));
    slot_ = register_unfinished(temp_, false);
}

AtomicFile::AtomicFile(AtomicFile&& o) noexcept
    : target_(std::move(o.target_)), temp_(std::move(o.temp_)), fd_(o.fd_), slot_(o.slot_), written_(o.written_),
      committed_(o.committed_) {
    o.fd_ = -1;
    o.slot_ = -1;
    o.committed_ = true;  // the moved-from object owns nothing
}

AtomicFile::~AtomicFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(temp_.c_str());
    unregister_unfinished(slot_);
}

void AtomicFile::write(const void* data, std::size_t n) {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
        ssize_t w = ::write(fd_, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            throw RuntimeFailure(target_ + ": cannot write: " + std::strerror(errno));
        }
        p += w;
        n -= std::size_t(w);
        written_ += std::uint64_t(w);
    }
}

void AtomicFile::close() {
    if (fd_ < 0) return;
    mode_t mask = ::umask(0);
    ::umask(mask);
    ::fchmod(fd_, 0666 & ~mask);
    int rc = ::close(fd_);
    fd_ = -1;
    if (rc != 0) throw RuntimeFailure(target_ + ": cannot write: " + std::strerror(errno));
}

void AtomicFile::commit() {
    close();
    if (::rename(temp_.c_str(), target_.c_str()) != 0)
        throw RuntimeFailure(target_ + ": cannot move output into place: " + std::strerror(errno));
    committed_ = true;
    unregister_unfinished(slot_);
    slot_ = -1;
}

AtomicTextFile::AtomicTextFile(std::string target) : std::ostream(nullptr), file_(std::move(target)), buf_(file_) {
    rdbuf(&buf_);
}

AtomicTextFile::Buf::int_type AtomicTextFile::Buf::overflow(int_type c) {
    sync();
    if (c != traits_type::eof()) {
        *pptr() = char(c);
        pbump(1);
    }
    return traits_type::not_eof(c);
}

int AtomicTextFile::Buf::sync() {
    file.write(pbase(), std::size_t(pptr() - pbase()));  // throws RuntimeFailure on error
    setp(data, data + sizeof data);
    return 0;
}

void AtomicTextFile::commit() {
    flush();
    buf_.sync();
    file_.commit();
}

}  // namespace attnscope
