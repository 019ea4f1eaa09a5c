// The .safetensors reader: single files and sharded checkpoints (an index and its shards).
//
// The format (huggingface/safetensors): an 8-byte little-endian header length N; N bytes
// of UTF-8 JSON, an object mapping each tensor name to {"dtype", "shape",
// "data_offsets": [begin, end]} (offsets into the data buffer), plus an optional
// "__metadata__" object of strings; then the data buffer, to the end of the file. The
// header may be padded with spaces. Data are little-endian and in C order.
//
// Opening maps the file without reading it and parses only the header: every entry is
// checked before anything is used. A tensor's pages are touched only when it is read.
//
// tensors() lists a file's tensors in data order (the order of their bytes in the file,
// which the checks establish anyway), and a sharded checkpoint's in its index's
// weight_map order.
//
// As the reference implementation (huggingface/safetensors, tensor.rs: serde_json reads
// the header into a struct whose TensorInfo has no deny_unknown_fields) does: a key other
// than dtype, shape and data_offsets in an entry is ignored, whatever its value; the
// header is one JSON value with nothing but JSON whitespace around it (a NUL byte, a
// byte-order mark or anything after the object is refused).
// Where we are stricter, on purpose: a key repeated in the header (its JSON reader keeps
// the last tensor of a name; a struct field named twice it refuses, as we do) is refused,
// and "__metadata__" must be an object (null too is refused).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "attnscope/base/errors.hpp"
#include "attnscope/base/text.hpp"
#include "attnscope/io/checkpoint.hpp"
#include "attnscope/io/read.hpp"
#include "bytes.hpp"
#include "json_doc.hpp"

namespace attnscope {
namespace {

using io_detail::shown;
using io_detail::shown_path;

// The reference implementation refuses a header longer than this (its MAX_HEADER_SIZE).
constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;
// The largest index file (model.safetensors.index.json) read; real ones are a few MiB.
constexpr std::size_t kMaxIndexBytes = 100'000'000;

// ---- dtypes ------------------------------------------------------------------------------

enum class Kind : unsigned char { f64, f32, f16, bf16, i64, i32, i16, i8, u64, u32, u16, u8, boolean, unsupported };

struct Dtype {
    std::string_view name;   // as the header spells it: "F32"
    std::string_view numpy;  // TensorInfo::dtype, Array::dtype: "float32" (unsupported: the header's name)
    std::size_t bits;        // per element
    Kind kind;
    const char* what;  // unsupported only: what it is, for the message
};

// Every dtype of the reference implementation. The 8-, 6- and 4-bit floats and complex
// numbers are checked like the others (their bytes must be where the header says) and
// listed by tensors(), but read() refuses them by name.
constexpr Dtype kDtypes[] = {
    {"F64", "float64", 64, Kind::f64, nullptr},
    {"F32", "float32", 32, Kind::f32, nullptr},
    {"F16", "float16", 16, Kind::f16, nullptr},
    {"BF16", "bfloat16", 16, Kind::bf16, nullptr},
    {"I64", "int64", 64, Kind::i64, nullptr},
    {"I32", "int32", 32, Kind::i32, nullptr},
    {"I16", "int16", 16, Kind::i16, nullptr},
    {"I8", "int8", 8, Kind::i8, nullptr},
    {"U64", "uint64", 64, Kind::u64, nullptr},
    {"U32", "uint32", 32, Kind::u32, nullptr},
    {"U16", "uint16", 16, Kind::u16, nullptr},
    {"U8", "uint8", 8, Kind::u8, nullptr},
    {"BOOL", "bool", 8, Kind::boolean, nullptr},
    {"F8_E4M3", "F8_E4M3", 8, Kind::unsupported, "8-bit float"},
    {"F8_E5M2", "F8_E5M2", 8, Kind::unsupported, "8-bit float"},
    {"F8_E8M0", "F8_E8M0", 8, Kind::unsupported, "8-bit float"},
    {"F8_E4M3FNUZ", "F8_E4M3FNUZ", 8, Kind::unsupported, "8-bit float"},
    {"F8_E5M2FNUZ", "F8_E5M2FNUZ", 8, Kind::unsupported, "8-bit float"},
    {"F6_E2M3", "F6_E2M3", 6, Kind::unsupported, "6-bit float"},
    {"F6_E3M2", "F6_E3M2", 6, Kind::unsupported, "6-bit float"},
    {"F4", "F4", 4, Kind::unsupported, "4-bit float"},
    {"C64", "C64", 64, Kind::unsupported, "complex"},
};
constexpr const char* kSupported = "F64, F32, F16, BF16, I64, I32, I16, I8, U64, U32, U16, U8 or BOOL";

const Dtype* find_dtype(std::string_view name) {
    for (const Dtype& d : kDtypes)
        if (d.name == name) return &d;
    return nullptr;
}

// How an Array holds the floats of this kind in place as stored; none for those widened.
std::optional<Array::Held> held_of(Kind kind) {
    switch (kind) {
        case Kind::f64:
            return Array::Held::float64;
        case Kind::f32:
            return Array::Held::float32;
        case Kind::f16:
            return Array::Held::float16;
        case Kind::bf16:
            return Array::Held::bfloat16;
        case Kind::i64:
        case Kind::i32:
        case Kind::i16:
        case Kind::i8:
        case Kind::u64:
        case Kind::u32:
        case Kind::u16:
        case Kind::u8:
        case Kind::boolean:
        case Kind::unsupported:
            break;
    }
    return std::nullopt;
}

// The little-endian n-byte unsigned integer at p.
template <int n>
std::uint64_t le_at(const char* p) {
    return io_detail::load_le(std::string_view(p, n), 0, n);
}

// `count` integers or bools of little-endian data at p (floats are held as stored), widened to double in out: exactly,
// except 64-bit integers beyond 2^53, rounded to the nearest double (as numpy's astype does).
void widen(const char* p, Kind kind, std::size_t count, double* out) {
    const auto each = [&](std::size_t size, auto f) {
        for (std::size_t k = 0; k < count; ++k) out[k] = f(p + k * size);
    };
    switch (kind) {
        case Kind::i64:
            return each(8, [](const char* q) { return double(std::int64_t(le_at<8>(q))); });
        case Kind::i32:
            return each(4, [](const char* q) { return double(std::int32_t(std::uint32_t(le_at<4>(q)))); });
        case Kind::i16:
            return each(2, [](const char* q) { return double(std::int16_t(std::uint16_t(le_at<2>(q)))); });
        case Kind::i8:
            return each(1, [](const char* q) { return double(std::int8_t(std::uint8_t(*q))); });
        case Kind::u64:
            return each(8, [](const char* q) { return double(le_at<8>(q)); });
        case Kind::u32:
            return each(4, [](const char* q) { return double(le_at<4>(q)); });
        case Kind::u16:
            return each(2, [](const char* q) { return double(le_at<2>(q)); });
        case Kind::u8:
            return each(1, [](const char* q) { return double(std::uint8_t(*q)); });
        case Kind::boolean:
            return each(1, [](const char* q) { return *q != 0 ? 1.0 : 0.0; });
        case Kind::f64:  // the floats are kept as stored; the unsupported ones are refused
        case Kind::f32:
        case Kind::f16:
        case Kind::bf16:
        case Kind::unsupported:
            return;
    }
}

std::string tname(std::string_view name) { return "'" + shown(name, 160) + "'"; }

// ---- the header, parsed as a stream of JSON events ---------------------------------------

// One tensor of the header, as found.
struct Entry {
    std::string name;
    const Dtype* dtype = nullptr;
    std::vector<std::size_t> shape;
    std::uint64_t begin = 0, end = 0;
    std::size_t bytes = 0;
};

// Reads the header object with nlohmann's SAX interface: entries are built as they are
// read, with no JSON document in memory, and everything is checked on the way (JSON
// objects keep the last of duplicate keys silently; here a repeated name is refused).
// Every check throws InputError with one line: the file, the tensor, what was expected
// and what was found. `budget` is what the directory may hold (the memory limit).
class HeaderReader : public nlohmann::json_sax<nlohmann::json> {
   public:
    HeaderReader(const std::string& src, std::size_t budget) : src_(src), budget_(budget) {}

    std::vector<Entry> entries;

    bool null() override { return value("null"); }
    bool boolean(bool) override { return value("a boolean"); }
    bool number_integer(number_integer_t v) override { return value("the negative number " + std::to_string(v)); }
    bool number_unsigned(number_unsigned_t v) override {
        if (skipped()) return true;
        if (state_ == State::shape) {
            charge(sizeof(std::size_t));
            cur_.shape.push_back(std::size_t(v));
            return true;
        }
        if (state_ == State::offsets) {
            if (offsets_seen_ == 2) fail_entry("data_offsets must be [begin, end], found more than 2 numbers");
            (offsets_seen_++ == 0 ? cur_.begin : cur_.end) = v;
            return true;
        }
        return value("a number");
    }
    bool number_float(number_float_t, const string_t& s) override {
        if (skipped()) return true;
        if (state_ == State::shape || state_ == State::offsets) {
            const char* field = state_ == State::shape ? "shape" : "data_offsets";
            fail_entry(std::string(field) + " must hold non-negative integers, found " + shown(s));
        }
        return value("a number");
    }
    bool string(string_t& s) override {
        if (skipped()) return true;
        if (state_ == State::metadata_value) {
            state_ = State::metadata;
            return true;
        }
        if (state_ == State::entry && field_ == Field::dtype) {
            cur_.dtype = find_dtype(s);
            if (!cur_.dtype)
                fail_entry("unknown dtype '" + shown(s) + "' (expected " + kSupported +
                           "; 8-bit floats and complex numbers are listed but not read)");
            field_ = Field::none;
            return true;
        }
        return value("a string");
    }
    bool binary(binary_t&) override { return value("binary data"); }

    bool start_object(std::size_t) override {
        if (skip_opened()) return true;
        switch (state_) {
            case State::start:
                state_ = State::top;
                return true;
            case State::top_value:
                if (is_metadata_) {
                    state_ = State::metadata;
                    seen_.clear();
                } else {
                    state_ = State::entry;
                    have_ = 0;
                    field_ = Field::none;
                }
                return true;
            case State::top:
            case State::metadata:
            case State::metadata_value:
            case State::entry:
            case State::shape:
            case State::offsets:
            case State::skip:
            case State::done:
                break;
        }
        return value("an object");
    }
    bool key(string_t& k) override {
        if (state_ == State::skip) return true;
        if (state_ == State::top) {
            if (!names_.insert(k).second)
                fail("tensor " + tname(k) + " appears twice in the header (JSON would keep only the last)");
            is_metadata_ = k == "__metadata__";
            if (!is_metadata_) {
                charge(2 * k.size() + sizeof(Entry) + sizeof(TensorInfo) + 128);  // entry, info, index nodes
                cur_ = Entry{};
                cur_.name = k;
            }
            state_ = State::top_value;
            return true;
        }
        if (state_ == State::metadata) {
            charge(k.size() + 64);  // the set of keys seen
            if (!seen_.insert(k).second) fail("__metadata__ key " + tname(k) + " appears twice");
            meta_key_ = k;
            state_ = State::metadata_value;
            return true;
        }
        // State::entry
        unsigned bit = 0;
        if (k == "dtype") {
            field_ = Field::dtype, bit = 1;
        } else if (k == "shape") {
            field_ = Field::shape, bit = 2;
        } else if (k == "data_offsets") {
            field_ = Field::offsets, bit = 4;
        } else {
            field_ = Field::unknown;  // its value is skipped, as the reference ignores it
            return true;
        }
        if (have_ & bit) fail_entry("key '" + shown(k) + "' appears twice");
        have_ |= bit;
        return true;
    }
    bool end_object() override {
        if (skip_closed()) return true;
        switch (state_) {
            case State::metadata:
                state_ = State::top;
                return true;
            case State::entry:
                finish_entry();
                state_ = State::top;
                return true;
            case State::top:  // the header's end
            case State::start:
            case State::top_value:
            case State::metadata_value:
            case State::shape:
            case State::offsets:
            case State::skip:
            case State::done:
                break;
        }
        state_ = State::done;
        return true;
    }
    bool start_array(std::size_t) override {
        if (skip_opened()) return true;
        if (state_ == State::entry && field_ == Field::shape) {
            state_ = State::shape;
            cur_.shape.clear();
            return true;
        }
        if (state_ == State::entry && field_ == Field::offsets) {
            state_ = State::offsets;
            offsets_seen_ = 0;
            return true;
        }
        return value("an array");
    }
    bool end_array() override {
        if (skip_closed()) return true;
        if (state_ == State::offsets && offsets_seen_ != 2)
            fail_entry("data_offsets must be [begin, end], found " + std::to_string(offsets_seen_) + " number" +
                       (offsets_seen_ == 1 ? "" : "s"));
        state_ = State::entry;
        field_ = Field::none;
        return true;
    }
    bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
        fail("the header is not valid JSON: " + shown(e.what(), 200));
    }

   private:
    enum class State { start, top, top_value, metadata, metadata_value, entry, shape, offsets, skip, done };
    enum class Field { none, dtype, shape, offsets, unknown };

    // The value of an unknown key of an entry: a scalar is passed over at once; an object
    // or array in State::skip until its own end (skip_depth_ counts the open ones).
    bool skipped() {
        if (state_ == State::skip) return true;
        if (state_ != State::entry || field_ != Field::unknown) return false;
        field_ = Field::none;
        return true;
    }
    bool skip_opened() {
        if (state_ == State::skip) return ++skip_depth_, true;
        if (state_ != State::entry || field_ != Field::unknown) return false;
        state_ = State::skip;
        skip_depth_ = 1;
        return true;
    }
    bool skip_closed() {
        if (state_ != State::skip) return false;
        if (--skip_depth_ == 0) {
            state_ = State::entry;
            field_ = Field::none;
        }
        return true;
    }

    [[noreturn]] void fail(const std::string& what) const { throw InputError(src_ + ": " + what); }
    [[noreturn]] void fail_entry(const std::string& what) const { fail("tensor " + tname(cur_.name) + ": " + what); }

    // A value where something else was expected.
    bool value(const std::string& found) {
        if (skipped()) return true;
        switch (state_) {
            case State::start:
                fail(std::string("the header is ") + found + ", expected a JSON object of tensors");
            case State::top_value:
                if (is_metadata_) fail(std::string("__metadata__ must be an object of strings, found ") + found);
                fail_entry(std::string("expected an object of dtype, shape and data_offsets, found ") + found);
            case State::metadata_value:
                fail("__metadata__ " + tname(meta_key_) + " is " + found + ", expected a string");
            case State::entry:
                if (field_ == Field::dtype) fail_entry(std::string("dtype must be a string, found ") + found);
                if (field_ == Field::shape)
                    fail_entry(std::string("shape must be a list of non-negative integers, found ") + found);
                fail_entry(std::string("data_offsets must be [begin, end], found ") + found);
            case State::shape:
                fail_entry(std::string("shape must hold non-negative integers, found ") + found);
            case State::offsets:
                fail_entry(std::string("data_offsets must hold non-negative integers, found ") + found);
            case State::top:
            case State::metadata:
            case State::skip:
            case State::done:
                break;
        }
        fail(std::string("unexpected ") + found + " in the header");
    }

    // The entry's own checks: all three keys; a shape whose byte count can be computed
    // and is a whole number of bytes; data_offsets in order and as long as that count.
    void finish_entry() {
        if ((have_ & 7) != 7)
            fail_entry(std::string("lacks ") +
                       (!(have_ & 1)   ? "dtype"
                        : !(have_ & 2) ? "shape"
                                       : "data_offsets") +
                       " (expected dtype, shape and data_offsets)");
        std::size_t count = 1, bits = 0;
        for (std::size_t d : cur_.shape)
            if (__builtin_mul_overflow(count, d, &count))
                fail_entry("shape " + shape_str(cur_.shape) + " has more elements than can be addressed");
        if (__builtin_mul_overflow(count, cur_.dtype->bits, &bits))
            fail_entry("shape " + shape_str(cur_.shape) + " of " + std::string(cur_.dtype->name) +
                       " has more bytes than can be addressed");
        if (bits % 8 != 0)
            fail_entry("shape " + shape_str(cur_.shape) + " of " + std::string(cur_.dtype->name) + " is " +
                       std::to_string(bits) + " bits, not a whole number of bytes");
        cur_.bytes = bits / 8;
        const std::string offsets =
            "data_offsets [" + std::to_string(cur_.begin) + ", " + std::to_string(cur_.end) + "]";
        if (cur_.end < cur_.begin) fail_entry(offsets + " end before they begin");
        if (cur_.end - cur_.begin != cur_.bytes)
            fail_entry("shape " + shape_str(cur_.shape) + " of " + std::string(cur_.dtype->name) + " needs " +
                       std::to_string(cur_.bytes) + " bytes, " + offsets + " hold " +
                       std::to_string(cur_.end - cur_.begin));
        entries.push_back(std::move(cur_));
    }

    void charge(std::size_t n) {
        if (__builtin_add_overflow(used_, n, &used_) || used_ > budget_)
            throw MemoryLimitError(src_ + ": the header's list of tensors needs more than " +
                                   io_detail::memory_limit_of(budget_));
    }

    const std::string& src_;
    std::size_t budget_, used_ = 0;
    State state_ = State::start;
    Field field_ = Field::none;
    bool is_metadata_ = false;
    unsigned have_ = 0;  // dtype 1, shape 2, data_offsets 4
    int offsets_seen_ = 0;
    std::size_t skip_depth_ = 0;
    Entry cur_;
    std::string meta_key_;
    std::unordered_set<std::string> names_, seen_;
};

// The header's bytes are UTF-8 (the reference implementation checks the whole header,
// padding included, before parsing it).
void check_utf8(std::string_view header, const std::string& src) {
    for (std::size_t k = 0; k < header.size();) {
        if (static_cast<unsigned char>(header[k]) < 0x80) {
            ++k;
            continue;
        }
        const std::size_t n = utf8_sequence_length(header, k);
        if (n == 0) {
            static constexpr char kHex[] = "0123456789abcdef";
            const auto c = static_cast<unsigned char>(header[k]);
            throw InputError(src + ": the header is not valid UTF-8 (byte 0x" + kHex[c >> 4] + kHex[c & 15] +
                             " at header offset " + std::to_string(k) + ")");
        }
        k += n;
    }
}

// The header is one JSON object with only JSON whitespace around it, as the reference's
// serde_json::from_str requires: no NUL byte (nlohmann's reader would take the first for
// the end of the text and accept `{}\0garbage`), no byte-order mark (nlohmann's reader
// skips one). Writers pad with trailing spaces.
void check_framing(std::string_view header, const std::string& src) {
    if (const auto nul = header.find('\0'); nul != std::string_view::npos)
        throw InputError(src + ": the header holds a NUL byte at header offset " + std::to_string(nul) +
                         " (a header may be padded only with spaces)");
    const auto start = header.find_first_not_of(" \t\n\r");
    if (start != std::string_view::npos && header.substr(start, 3) == "\xEF\xBB\xBF")
        throw InputError(src + ": the header starts with a UTF-8 byte-order mark, expected '{'");
}

// The data buffer must be covered exactly, as the reference implementation requires
// (huggingface/safetensors, Metadata::validate and SafeTensors::read_metadata): taken in
// order of data_offsets, each tensor begins where the one before it ended (the first at
// 0), and the last ends at the end of the file. So no two tensors share a byte, no byte
// lies between them, and nothing trails the last one. (The header itself may list them
// in any order: the reference sorts them first, and so do we.) Returns the entries'
// indices in data order.
std::vector<std::size_t> check_coverage(const std::vector<Entry>& entries, std::size_t data_size,
                                        const std::string& src) {
    std::vector<std::size_t> order(entries.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
        return std::pair(entries[a].begin, entries[a].end) < std::pair(entries[b].begin, entries[b].end);
    });
    const auto where = [](const Entry& e) {
        return tname(e.name) + " (data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) + "])";
    };
    for (const std::size_t i : order)
        if (entries[i].end > data_size)
            throw InputError(src + ": tensor " + where(entries[i]) + " runs past the end of the data: the file holds " +
                             std::to_string(data_size) + " data bytes after the header");
    std::uint64_t at = 0;
    const Entry* before = nullptr;
    for (const std::size_t i : order) {
        const Entry& e = entries[i];
        if (e.begin < at) throw InputError(src + ": tensors " + where(*before) + " and " + where(e) + " overlap");
        if (e.begin > at)
            throw InputError(src + ": data bytes [" + std::to_string(at) + ", " + std::to_string(e.begin) +
                             ") belong to no tensor (" + (before ? "after " + tname(before->name) + ", " : "") +
                             "before " + tname(e.name) + "); the tensors must cover the data exactly");
        at = e.end;
        before = &e;
    }
    if (at != data_size)
        throw InputError(src + ": data bytes [" + std::to_string(at) + ", " + std::to_string(data_size) +
                         ") belong to no tensor (" +
                         (before ? "after the last one, " + tname(before->name) : std::string("there are none")) +
                         "); the tensors must cover the data exactly");
    return order;
}

// ---- one file ----------------------------------------------------------------------------

class SafetensorsFile : public TensorSource {
   public:
    // `bytes`: the whole file; `keep` holds them (may be empty: then reads copy). `mapped`:
    // they are a read-only mapping of the file, whose pages a read gives back once done.
    SafetensorsFile(std::string_view bytes, const std::string& source, std::size_t max_bytes,
                    std::shared_ptr<const void> keep, bool mapped = false)
        : src_(shown_path(source)), keep_(std::move(keep)), mapped_(mapped && keep_) {
        // 1. The header length: 8 bytes, little-endian, at most 100 MB, within the file.
        if (bytes.size() < 8)
            throw InputError(src_ + ": not a .safetensors file: " + std::to_string(bytes.size()) +
                             " bytes, too short for the 8-byte header length");
        const std::uint64_t n = io_detail::load_le(bytes, 0, 8);
        if (n > kMaxHeaderBytes)
            throw InputError(src_ + ": header length " + std::to_string(n) + " is over the format's limit of " +
                             std::to_string(kMaxHeaderBytes) + " bytes (not a .safetensors file?)");
        if (n > bytes.size() - 8)
            throw InputError(src_ + ": header length " + std::to_string(n) + " runs past the end of the file (" +
                             std::to_string(bytes.size() - 8) + " bytes follow the length)");
        const std::string_view header = bytes.substr(8, std::size_t(n));
        data_ = bytes.substr(8 + std::size_t(n));

        // 2. The header: UTF-8, a JSON object, each entry checked as it is read.
        check_utf8(header, src_);
        check_framing(header, src_);
        HeaderReader reader(src_, max_bytes);
        nlohmann::json::sax_parse(header.begin(), header.end(), &reader);

        // 3. The data buffer covered exactly, in data order; tensors() lists them so.
        const std::vector<std::size_t> order = check_coverage(reader.entries, data_.size(), src_);
        infos_.reserve(order.size());
        where_.reserve(order.size());
        const SharedText file(source);  // one string for every tensor
        for (const std::size_t i : order) {
            Entry& e = reader.entries[i];
            index_.emplace(e.name, infos_.size());
            infos_.push_back(
                TensorInfo{std::move(e.name), std::string(e.dtype->numpy), std::move(e.shape), e.bytes, file});
            where_.push_back(Where{e.dtype, std::size_t(e.begin)});
        }
    }

    const std::vector<TensorInfo>& tensors() const override { return infos_; }

    Array read(const std::string& name, std::size_t max_bytes) const override {
        const auto it = index_.find(name);
        if (it == index_.end())
            throw InputError(src_ + ": no tensor " + tname(name) + " (the file holds " + std::to_string(infos_.size()) +
                             " tensor" + (infos_.size() == 1 ? "" : "s") + ")");
        return read_at(it->second, max_bytes);
    }

    // The tensor called `name`, or null.
    const TensorInfo* find(const std::string& name) const {
        const auto it = index_.find(name);
        return it == index_.end() ? nullptr : &infos_[it->second];
    }

    // The number of the tensor's elements (the header's check: no overflow).
    static std::size_t count_of(const TensorInfo& t) {
        std::size_t n = 1;
        for (std::size_t d : t.shape) n *= d;
        return n;
    }

   private:
    struct Where {
        const Dtype* dtype;
        std::size_t begin;  // in data_
    };

    Array read_at(std::size_t i, std::size_t max_bytes) const {
        const TensorInfo& t = infos_[i];
        const Dtype& d = *where_[i].dtype;
        const std::string origin = src_ + ": " + shown(t.name, 160);
        if (d.kind == Kind::unsupported)
            throw InputError(src_ + ": tensor " + tname(t.name) + ": dtype " + std::string(d.name) + " (" + d.what +
                             ") is not supported (expected " + kSupported + ")");
        // The memory limit: the numbers as doubles (what a float64 run holds of them),
        // whether widened or kept as stored, as every reader counts them.
        const std::size_t count = count_of(t);
        std::size_t widened = 0;
        if (__builtin_mul_overflow(count, sizeof(double), &widened) || widened > max_bytes)
            throw MemoryLimitError(src_ + ": tensor " + tname(t.name) + " of shape " + shape_str(t.shape) + " needs " +
                                   (widened ? format_bytes(widened) : std::string("more than can be addressed")) +
                                   " in memory, over " + io_detail::memory_limit_of(max_bytes));
        const std::string_view bytes = data_.substr(where_[i].begin, t.bytes);

        Array a;
        a.shape = t.shape;
        a.dtype = t.dtype;
        a.origin = origin;
        if (const auto held = held_of(d.kind)) {
            // In place in the mapping (the rest of the code only memcpy's stored numbers,
            // so they need no alignment; halves are widened as they are read out); copied
            // when nothing keeps the bytes alive.
            a.held = *held;
            if (keep_) {
                a.stored = bytes;
                // once its last copy is gone, the tensor's pages leave the process's memory
                // (a forward pass holds one layer's at a time)
                a.keep = mapped_ ? keep_until_dropped(keep_, bytes) : keep_;
            } else {
                auto copy = std::make_shared<const std::string>(bytes);
                a.stored = *copy;
                a.keep = std::move(copy);
            }
            return a;
        }
        a.values.resize(count);
        widen(bytes.data(), d.kind, count, a.values.data());
        if (mapped_) drop_mapped_pages(bytes);  // converted: the file's pages are no longer needed
        return a;
    }

    std::string src_;  // the file, as shown in messages
    std::string_view data_;
    std::shared_ptr<const void> keep_;
    bool mapped_ = false;
    std::vector<TensorInfo> infos_;
    std::vector<Where> where_;
    std::unordered_map<std::string, std::size_t> index_;
};

// A file mapped, not read: only a tensor's pages are touched when it is read. A shard
// (`regular_only`) must be a regular file: a FIFO would block, a device never end.
std::unique_ptr<SafetensorsFile> open_file(const std::string& path, std::size_t max_bytes, bool regular_only) {
    FileBytes f = map_file_lazily(path, max_bytes, regular_only);
    return std::make_unique<SafetensorsFile>(f.bytes, path, max_bytes, std::move(f.keep), f.mapped);
}

// ---- sharded checkpoints -----------------------------------------------------------------

// "a number", "an object"...: what a JSON value is, for messages.
std::string a_type(const nlohmann::ordered_json& j) {
    const std::string t = j.type_name();
    return t == "null" ? t : (t == "array" || t == "object" ? "an " : "a ") + t;
}

// A shard's name as the index gives it: a file in the index's own directory.
void check_shard_name(const std::string& shard, const std::string& tensor, const std::string& src) {
    const bool bad = shard.empty() || shard == "." || shard == ".." || shard.find('/') != std::string::npos ||
                     shard.find('\0') != std::string::npos;
    if (bad)
        throw InputError(src + ": weight_map puts tensor " + tname(tensor) + " in '" + shown(shard, 160) +
                         "', expected the name of a file beside the index (no '/', not '.' or '..')");
}

class ShardedSafetensors : public TensorSource {
   public:
    ShardedSafetensors(const std::string& index_path, std::size_t max_bytes) : src_(shown_path(index_path)) {
        const std::string& src = src_;
        // 1. The index: a JSON object whose weight_map maps each tensor to its shard.
        const FileBytes file = map_file(index_path, max_bytes);
        if (file.bytes.size() > kMaxIndexBytes)
            throw InputError(src + ": " + std::to_string(file.bytes.size()) +
                             " bytes, over the limit of 100000000 bytes for an index");
        // Its text and tree counted against the limit; nesting bounded.
        const nlohmann::ordered_json j =
            io_detail::parse_json_document<nlohmann::ordered_json>(file.bytes, src, max_bytes, true);
        if (!j.is_object()) throw InputError(src + ": expected a JSON object with a weight_map, found " + a_type(j));
        const auto wm = j.find("weight_map");
        if (wm == j.end()) throw InputError(src + ": lacks weight_map (the tensors' shards)");
        if (!wm->is_object())
            throw InputError(src + ": weight_map must be an object of tensor names to shard files, found " +
                             a_type(*wm));

        // 2. Each shard named once, checked, opened once.
        const auto slash = index_path.find_last_of('/');
        const std::string dir = slash == std::string::npos ? "" : index_path.substr(0, slash + 1);
        std::vector<std::pair<std::string, std::size_t>> listed;  // tensor, shard number
        std::unordered_map<std::string, std::size_t> shard_number;
        for (const auto& [tensor, shard] : wm->items()) {
            if (!shard.is_string())
                throw InputError(src + ": weight_map gives tensor " + tname(tensor) + " " + a_type(shard) +
                                 ", expected a shard's file name");
            const std::string name = shard.get<std::string>();
            check_shard_name(name, tensor, src);
            const auto [it, added] = shard_number.emplace(name, shards_.size());
            if (added) {
                struct stat st {};
                if (::stat((dir + name).c_str(), &st) != 0 && errno == ENOENT)
                    throw InputError(src + ": weight_map puts tensor " + tname(tensor) + " in " + tname(name) +
                                     ", which does not exist beside the index");
                shard_names_.push_back(name);
                shards_.push_back(open_file(dir + name, max_bytes, true));
            }
            listed.emplace_back(tensor, it->second);
        }

        // 3. The map and the shards agree: each listed tensor is in its shard, and each
        //    shard's tensor is listed, for that shard. tensors() follows weight_map order.
        for (const auto& [tensor, s] : listed) {
            if (!shards_[s]->find(tensor))
                throw InputError(src + ": weight_map puts tensor " + tname(tensor) + " in " + tname(shard_names_[s]) +
                                 ", which does not hold it");
            where_.emplace(tensor, s);
        }
        for (std::size_t s = 0; s < shards_.size(); ++s)
            for (const TensorInfo& t : shards_[s]->tensors()) {
                const auto it = where_.find(t.name);
                if (it == where_.end())
                    throw InputError(src + ": shard " + tname(shard_names_[s]) + " holds tensor " + tname(t.name) +
                                     ", which weight_map does not list");
                if (it->second != s)
                    throw InputError(src + ": shard " + tname(shard_names_[s]) + " holds tensor " + tname(t.name) +
                                     ", which weight_map puts in " + tname(shard_names_[it->second]));
            }
        infos_.reserve(listed.size());
        for (const auto& [tensor, s] : listed) infos_.push_back(*shards_[s]->find(tensor));
    }

    const std::vector<TensorInfo>& tensors() const override { return infos_; }

    Array read(const std::string& name, std::size_t max_bytes) const override {
        const auto it = where_.find(name);
        if (it == where_.end())
            throw InputError(src_ + ": no tensor " + tname(name) + " in weight_map (" + std::to_string(infos_.size()) +
                             " tensors)");
        return shards_[it->second]->read(name, max_bytes);
    }

   private:
    std::string src_;
    std::vector<std::unique_ptr<SafetensorsFile>> shards_;
    std::vector<std::string> shard_names_;
    std::unordered_map<std::string, std::size_t> where_;  // tensor -> shard number
    std::vector<TensorInfo> infos_;
};

}  // namespace

std::unique_ptr<TensorSource> open_safetensors(const std::string& path, std::size_t max_bytes) {
    return open_file(path, max_bytes, false);
}

std::unique_ptr<TensorSource> parse_safetensors(std::string_view bytes, const std::string& source,
                                                std::size_t max_bytes, std::shared_ptr<const void> keep) {
    return std::make_unique<SafetensorsFile>(bytes, source, max_bytes, std::move(keep));
}

std::unique_ptr<TensorSource> open_safetensors_index(const std::string& index_path, std::size_t max_bytes) {
    return std::make_unique<ShardedSafetensors>(index_path, max_bytes);
}

}  // namespace attnscope
