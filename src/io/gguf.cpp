// The GGUF reader (io/gguf.hpp): llama.cpp's container, versions 2 and 3.
//
// The format (the GGUF specification, ggml's docs/gguf.md), little-endian throughout:
//   magic "GGUF", version (uint32), tensor count (uint64), metadata count (uint64);
//   each metadata key/value: key (string), value type (uint32), value;
//   each tensor info: name (string), n_dims (uint32), dims (n_dims uint64, innermost
//   first), ggml type (uint32), offset (uint64, into the data section);
//   padding to `general.alignment` (a uint32, 32 when absent), then the data section.
// A string is a uint64 length and that many bytes; an array an item type (uint32), a count
// (uint64) and the items. ggml reads at most 4 dims, and a row (dims[0]) must be whole
// blocks of its type.
//
// Everything is checked before it is used, against the bytes that are left: a count,
// length or array size that cannot fit the file is refused before anything is allocated
// for it, and the directory's size is counted against the memory limit. Tensors must lie
// in the data section, at offsets that are multiples of the alignment (as llama.cpp
// requires), and may not overlap (gaps are padding).
#include "attnscope/io/gguf.hpp"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "attnscope/base/errors.hpp"
#include "attnscope/io/read.hpp"
#include "bytes.hpp"

namespace attnscope {
namespace {

using io_detail::shown;
using io_detail::shown_path;

constexpr std::uint32_t kMaxDims = 4;  // ggml's GGML_MAX_DIMS
constexpr int kMaxNesting = 8;         // arrays of arrays of ...: real files have none
constexpr std::uint64_t kMaxElements = std::uint64_t(std::numeric_limits<std::int64_t>::max());

std::string quoted(std::string_view s) { return "'" + shown(s, 160) + "'"; }

// The bytes of one item of a fixed-size metadata type; 0 for strings and arrays.
std::size_t item_bytes(GgufType t) {
    switch (t) {
        case GgufType::u8:
        case GgufType::i8:
        case GgufType::boolean:
            return 1;
        case GgufType::u16:
        case GgufType::i16:
            return 2;
        case GgufType::u32:
        case GgufType::i32:
        case GgufType::f32:
            return 4;
        case GgufType::u64:
        case GgufType::i64:
        case GgufType::f64:
            return 8;
        case GgufType::string:
        case GgufType::array:
            return 0;
    }
    return 0;
}

bool known_type(std::uint64_t t) { return t <= std::uint64_t(GgufType::f64); }

// The scalar at p of fixed-size type t, into v.
void scalar_at(const char* p, GgufType t, GgufValue& v) {
    const std::size_t n = item_bytes(t);
    const std::uint64_t raw = io_detail::load_le(std::string_view(p, n), 0, int(n));
    switch (t) {
        case GgufType::u8:
        case GgufType::u16:
        case GgufType::u32:
        case GgufType::u64:
            v.u = raw;
            break;
        case GgufType::boolean:
            v.u = raw != 0;
            break;
        case GgufType::i8:
            v.i = std::int8_t(raw);
            break;
        case GgufType::i16:
            v.i = std::int16_t(raw);
            break;
        case GgufType::i32:
            v.i = std::int32_t(raw);
            break;
        case GgufType::i64:
            v.i = std::int64_t(raw);
            break;
        case GgufType::f32:
            v.f = std::bit_cast<float>(std::uint32_t(raw));
            break;
        case GgufType::f64:
            v.f = std::bit_cast<double>(raw);
            break;
        case GgufType::string:
        case GgufType::array:
            break;
    }
}

// Reads the header, metadata and tensor infos of a GGUF file, each check one line.
class Parser {
   public:
    Parser(std::string_view b, const std::string& src, std::size_t budget) : b_(b), src_(src), budget_(budget) {}

    std::uint64_t left() const { return b_.size() - at_; }
    std::size_t at() const { return at_; }

    // `n` bytes for `what`, or a refusal saying where the file ends.
    std::string_view take(std::uint64_t n, const std::string& what) {
        if (n > left())
            throw InputError(src_ + ": " + what + " at byte " + std::to_string(at_) + " needs " + std::to_string(n) +
                             " bytes, but the file ends at byte " + std::to_string(b_.size()));
        const std::string_view s = b_.substr(at_, std::size_t(n));
        at_ += std::size_t(n);
        return s;
    }
    std::uint64_t u32(const std::string& what) { return io_detail::load_le(take(4, what), 0, 4); }
    std::uint64_t u64(const std::string& what) { return io_detail::load_le(take(8, what), 0, 8); }
    std::string_view str(const std::string& what) {
        const std::uint64_t n = u64(what + "'s length");
        if (n > left())
            throw InputError(src_ + ": " + what + " is " + std::to_string(n) + " bytes long, but only " +
                             std::to_string(left()) + " bytes are left in the file");
        return take(n, what);
    }
    // Counts `bytes` more of the directory against the memory limit.
    void spend(std::uint64_t bytes, const std::string& what) {
        if (bytes > budget_ - used_)
            throw MemoryLimitError(src_ + ": " + what + " needs more than " + io_detail::memory_limit_of(budget_));
        used_ += std::size_t(bytes);
    }

    GgufValue value(GgufType t, const std::string& what, int depth);

   private:
    GgufValue array(const std::string& what, int depth);

    std::string_view b_;
    const std::string& src_;
    std::size_t at_ = 0;
    std::size_t budget_, used_ = 0;
};

GgufValue Parser::value(GgufType t, const std::string& what, int depth) {
    GgufValue v;
    v.type = t;
    if (t == GgufType::string) {
        v.text = str(what);
    } else if (t == GgufType::array) {
        v = array(what, depth);
    } else {
        scalar_at(take(item_bytes(t), what).data(), t, v);
    }
    return v;
}

// An array: its item type and count, checked against what is left before its items are
// walked (strings) or spanned (fixed-size items); nested arrays parsed, to a bounded depth.
GgufValue Parser::array(const std::string& what, int depth) {
    GgufValue v;
    v.type = GgufType::array;
    const std::uint64_t item = u32(what + "'s item type");
    if (!known_type(item))
        throw InputError(src_ + ": " + what + ": array item type " + std::to_string(item) +
                         " is not a GGUF type (expected 0 to 12)");
    v.item = GgufType(item);
    v.count = u64(what + "'s item count");
    const std::size_t each = item_bytes(v.item);
    const std::uint64_t least = each ? each : v.item == GgufType::string ? 8 : 12;  // the smallest item
    if (v.count > left() / least)
        throw InputError(src_ + ": " + what + ": an array of " + std::to_string(v.count) + " " +
                         std::string(gguf_type_name(v.item)) + " items cannot fit in the " + std::to_string(left()) +
                         " bytes left in the file");
    if (each) {
        v.raw = take(v.count * each, what);
    } else if (v.item == GgufType::string) {
        const std::size_t start = at();
        for (std::uint64_t k = 0; k < v.count; ++k) {
            const std::uint64_t n = left() >= 8 ? io_detail::load_le(b_, at_, 8) : 0;
            if (left() < 8 || n > left() - 8) str(what + "[" + std::to_string(k) + "]");  // refuses, naming it
            at_ += 8 + std::size_t(n);
        }
        v.raw = std::string_view(b_.data() + start, at() - start);
    } else {
        if (depth + 1 >= kMaxNesting)
            throw InputError(src_ + ": " + what + ": arrays nested more than " + std::to_string(kMaxNesting) + " deep");
        spend(v.count * sizeof(GgufValue), what);
        v.items.reserve(std::size_t(v.count));
        for (std::uint64_t k = 0; k < v.count; ++k)
            v.items.push_back(array(what + "[" + std::to_string(k) + "]", depth + 1));
    }
    return v;
}

// One tensor as its info describes it.
struct Entry {
    TensorInfo info;
    const GgmlType* type = nullptr;
    std::uint64_t offset = 0;  // into the data section
};

std::string numpy_name(const GgmlType& t) {
    switch (t.id) {
        case 0:
            return "float32";
        case 1:
            return "float16";
        case 30:
            return "bfloat16";
        case 28:
            return "float64";
        case 24:
            return "int8";
        case 25:
            return "int16";
        case 26:
            return "int32";
        case 27:
            return "int64";
        default:
            return std::string(t.name);
    }
}

// A tensor info: name, dims, type, offset; its shape (outermost first, as numpy has it)
// and byte count checked for overflow, its row for whole blocks.
Entry read_entry(Parser& p, std::uint64_t k, const std::string& src) {
    Entry e;
    const std::string which = "tensor info " + std::to_string(k);
    e.info.name = std::string(p.str(which + "'s name"));
    const std::string what = src + ": tensor " + quoted(e.info.name);
    const std::uint64_t n_dims = p.u32(which + "'s n_dims");
    if (n_dims > kMaxDims) throw InputError(what + " has " + std::to_string(n_dims) + " dims; ggml allows at most 4");
    std::vector<std::uint64_t> ne(n_dims);
    for (auto& d : ne) d = p.u64(which + "'s dims");
    const std::uint64_t type = p.u32(which + "'s type");
    e.offset = p.u64(which + "'s offset");
    e.type = ggml_type(std::uint32_t(type));
    if (!e.type) throw InputError(what + ": type " + std::to_string(type) + " is not a ggml tensor type");
    std::uint64_t count = 1;
    for (const std::uint64_t d : ne)
        if (d > kMaxElements || __builtin_mul_overflow(count, d, &count) || count > kMaxElements)
            throw InputError(what + ": its dims overflow (more than 2^63 elements)");
    const std::uint64_t row = ne.empty() ? 1 : ne[0];
    if (row % e.type->block != 0)
        throw InputError(what + ": its rows of " + std::to_string(row) + " " + std::string(e.type->name) +
                         " elements are not whole blocks of " + std::to_string(e.type->block));
    std::uint64_t bytes = 0;
    if (__builtin_mul_overflow(count / e.type->block, e.type->block_bytes, &bytes))
        throw InputError(what + ": its size overflows");
    e.info.dtype = numpy_name(*e.type);
    e.info.shape.assign(ne.rbegin(), ne.rend());
    e.info.bytes = std::size_t(bytes);
    return e;
}

}  // namespace

std::string_view gguf_type_name(GgufType t) {
    switch (t) {
        case GgufType::u8:
            return "uint8";
        case GgufType::i8:
            return "int8";
        case GgufType::u16:
            return "uint16";
        case GgufType::i16:
            return "int16";
        case GgufType::u32:
            return "uint32";
        case GgufType::i32:
            return "int32";
        case GgufType::f32:
            return "float32";
        case GgufType::boolean:
            return "bool";
        case GgufType::string:
            return "string";
        case GgufType::array:
            return "array";
        case GgufType::u64:
            return "uint64";
        case GgufType::i64:
            return "int64";
        case GgufType::f64:
            return "float64";
    }
    return "?";
}

std::vector<std::string_view> GgufValue::strings(std::size_t first) const {
    std::vector<std::string_view> out;
    if (type != GgufType::array || item != GgufType::string) return out;
    const std::size_t n_out = std::size_t(std::min<std::uint64_t>(count, first));
    out.reserve(n_out);
    std::size_t at = 0;
    for (std::size_t k = 0; k < n_out; ++k) {  // checked when parsed
        const auto n = std::size_t(io_detail::load_le(raw, at, 8));
        out.push_back(raw.substr(at + 8, n));
        at += 8 + n;
    }
    return out;
}

std::vector<double> GgufValue::numbers(std::size_t first) const {
    std::vector<double> out;
    const std::size_t each = item_bytes(item);
    if (type != GgufType::array || !each) return out;
    const std::size_t n_out = std::size_t(std::min<std::uint64_t>(count, first));
    out.reserve(n_out);
    for (std::size_t k = 0; k < n_out; ++k) {
        GgufValue v;
        v.type = item;
        scalar_at(raw.data() + k * each, item, v);
        out.push_back(v.number());
    }
    return out;
}

double GgufValue::number() const {
    switch (type) {
        case GgufType::u8:
        case GgufType::u16:
        case GgufType::u32:
        case GgufType::u64:
        case GgufType::boolean:
            return double(u);
        case GgufType::i8:
        case GgufType::i16:
        case GgufType::i32:
        case GgufType::i64:
            return double(i);
        case GgufType::f32:
        case GgufType::f64:
            return f;
        case GgufType::string:
        case GgufType::array:
            return 0;
    }
    return 0;
}

const GgufValue* GgufInfo::find(std::string_view key) const {
    for (const auto& kv : metadata)
        if (kv.key == key) return &kv.value;
    return nullptr;
}

namespace {

class GgufFile : public TensorSource {
   public:
    GgufFile(std::string_view bytes, const std::string& source, std::size_t max_bytes, std::shared_ptr<const void> keep,
             bool mapped)
        : src_(shown_path(source)), keep_(std::move(keep)), mapped_(mapped && keep_) {
        Parser p(bytes, src_, max_bytes);
        read_header(p);
        read_metadata(p);
        std::vector<Entry> entries = read_infos(p, source);
        const std::uint64_t start = (p.at() + info_.alignment - 1) / info_.alignment * info_.alignment;
        info_.data_offset = start;
        data_ = start < bytes.size() ? bytes.substr(std::size_t(start)) : std::string_view();
        check_placement(entries);
        for (Entry& e : entries) {
            e.info.offset = start + e.offset;
            index_.emplace(e.info.name, infos_.size());
            where_.push_back(Where{e.type, std::size_t(e.offset)});
            infos_.push_back(std::move(e.info));
        }
        info_.keep = keep_;
    }

    const std::vector<TensorInfo>& tensors() const override { return infos_; }
    const GgufInfo* gguf() const override { return &info_; }

    Array read(const std::string& name, std::size_t max_bytes) const override {
        const auto it = index_.find(name);
        if (it == index_.end())
            throw InputError(src_ + ": no tensor " + quoted(name) + " (the file holds " +
                             std::to_string(infos_.size()) + " tensor" + (infos_.size() == 1 ? "" : "s") + ")");
        return read_at(it->second, max_bytes);
    }

   private:
    struct Where {
        const GgmlType* type;
        std::size_t begin;  // in data_
    };

    void read_header(Parser& p) {
        if (p.left() < 4 || p.take(4, "the magic") != "GGUF")
            throw InputError(src_ + ": not a GGUF file (its first 4 bytes are not \"GGUF\")");
        const std::uint64_t v = p.u32("the version");
        if (v != 2 && v != 3)
            throw InputError(src_ + ": GGUF version " + std::to_string(v) + " is not supported (expected 2 or 3" +
                             (v == 1 ? "; version 1 is llama.cpp's first, re-convert the model" : "") +
                             (v > 0xffff ? "; a big-endian file?" : "") + ")");
        info_.version = std::uint32_t(v);
        tensor_count_ = p.u64("the tensor count");
        kv_count_ = p.u64("the metadata count");
        // Each key/value takes at least 13 bytes (a key's length, a type, a bool), each
        // tensor info 24 (a name's length, n_dims, type, offset).
        if (kv_count_ > p.left() / 13)
            throw InputError(src_ + ": " + std::to_string(kv_count_) + " metadata key/values cannot fit in the " +
                             std::to_string(p.left()) + " bytes left in the file");
        if (tensor_count_ > p.left() / 24)
            throw InputError(src_ + ": " + std::to_string(tensor_count_) + " tensor infos cannot fit in the " +
                             std::to_string(p.left()) + " bytes left in the file");
    }

    void read_metadata(Parser& p) {
        p.spend(kv_count_ * sizeof(GgufKeyValue), "the metadata");
        info_.metadata.reserve(std::size_t(kv_count_));
        std::unordered_set<std::string_view> seen;
        for (std::uint64_t k = 0; k < kv_count_; ++k) {
            const std::string_view key = p.str("metadata key " + std::to_string(k));
            const std::string what = "key " + quoted(key);
            p.spend(key.size(), "the metadata keys");
            if (!seen.insert(key).second) throw InputError(src_ + ": " + what + " appears twice");
            const std::uint64_t type = p.u32(what + "'s value type");
            if (!known_type(type))
                throw InputError(src_ + ": " + what + ": value type " + std::to_string(type) +
                                 " is not a GGUF type (expected 0 to 12)");
            info_.metadata.push_back(GgufKeyValue{std::string(key), p.value(GgufType(type), what, 0)});
        }
        if (const GgufValue* a = info_.find("general.alignment")) {
            if (a->type != GgufType::u32)
                throw InputError(src_ + ": key 'general.alignment' is a " + std::string(gguf_type_name(a->type)) +
                                 ", expected a uint32");
            if (a->u == 0 || (a->u & (a->u - 1)) != 0)
                throw InputError(src_ + ": key 'general.alignment' is " + std::to_string(a->u) +
                                 ", expected a power of two");
            info_.alignment = a->u;
        }
    }

    std::vector<Entry> read_infos(Parser& p, const std::string& source) {
        p.spend(tensor_count_ * (sizeof(Entry) + sizeof(Where) + 64), "the tensor infos");
        std::vector<Entry> entries;
        entries.reserve(std::size_t(tensor_count_));
        std::unordered_set<std::string> names;
        const SharedText file(source);
        for (std::uint64_t k = 0; k < tensor_count_; ++k) {
            entries.push_back(read_entry(p, k, src_));
            Entry& e = entries.back();
            p.spend(e.info.name.size(), "the tensor names");
            if (!names.insert(e.info.name).second)
                throw InputError(src_ + ": tensor " + quoted(e.info.name) + " appears twice");
            e.info.file = file;
        }
        return entries;
    }

    // Each tensor inside the data section, at a multiple of the alignment, none overlapping.
    void check_placement(const std::vector<Entry>& entries) const {
        std::vector<const Entry*> order;
        for (const Entry& e : entries) {
            const std::string what = src_ + ": tensor " + quoted(e.info.name) + " (offset " + std::to_string(e.offset);
            if (e.offset % info_.alignment != 0)
                throw InputError(what + ") is not at a multiple of the alignment " + std::to_string(info_.alignment));
            if (e.offset > data_.size() || e.info.bytes > data_.size() - e.offset)
                throw InputError(what + ", " + std::to_string(e.info.bytes) +
                                 " bytes) runs past the end of the data section (" + std::to_string(data_.size()) +
                                 " bytes from byte " + std::to_string(info_.data_offset) + ")");
            if (e.info.bytes) order.push_back(&e);
        }
        std::sort(order.begin(), order.end(), [](const Entry* a, const Entry* b) { return a->offset < b->offset; });
        for (std::size_t k = 1; k < order.size(); ++k)
            if (order[k]->offset < order[k - 1]->offset + order[k - 1]->info.bytes)
                throw InputError(src_ + ": tensors " + quoted(order[k - 1]->info.name) + " (bytes " +
                                 std::to_string(order[k - 1]->offset) + " to " +
                                 std::to_string(order[k - 1]->offset + order[k - 1]->info.bytes) + ") and " +
                                 quoted(order[k]->info.name) + " (from " + std::to_string(order[k]->offset) +
                                 ") overlap");
    }

    Array read_at(std::size_t i, std::size_t max_bytes) const;

    std::string src_;
    std::shared_ptr<const void> keep_;
    bool mapped_ = false;
    std::uint64_t tensor_count_ = 0, kv_count_ = 0;
    GgufInfo info_;
    std::string_view data_;
    std::vector<TensorInfo> infos_;
    std::vector<Where> where_;
    std::unordered_map<std::string, std::size_t> index_;
};

// How an Array holds a plain float type in place; doubles for the others.
Array::Held held_of(std::uint32_t id) {
    switch (id) {
        case 0:
            return Array::Held::float32;
        case 1:
            return Array::Held::float16;
        case 30:
            return Array::Held::bfloat16;
        case 28:
            return Array::Held::float64;
        default:
            return Array::Held::doubles;
    }
}

// The integer types (I8..I64), widened exactly to double (I64 beyond 2^53 rounded).
void widen_ints(std::string_view bytes, std::uint32_t id, std::vector<double>& out) {
    const int n = id == 24 ? 1 : id == 25 ? 2 : id == 26 ? 4 : 8;
    for (std::size_t k = 0; k < out.size(); ++k) {
        const std::uint64_t raw = io_detail::load_le(bytes, k * std::size_t(n), n);
        const int shift = 64 - 8 * n;
        out[k] = double(std::int64_t(raw << shift) >> shift);
    }
}

Array GgufFile::read_at(std::size_t i, std::size_t max_bytes) const {
    const TensorInfo& t = infos_[i];
    const GgmlType& type = *where_[i].type;
    if (!type.readable)
        throw InputError(src_ + ": tensor " + quoted(t.name) + ": ggml type " + std::string(type.name) +
                         " is not supported (expected " + std::string(ggml_readable_types()) + ")");
    std::size_t count = 1;
    for (const std::size_t d : t.shape) count *= d;  // checked when listed
    const Array::Held held = held_of(type.id);
    const bool quantized = held == Array::Held::doubles && type.block > 1;
    // As every reader counts: the numbers as doubles; and the float32 a quantized tensor
    // is dequantized into.
    const std::size_t per = sizeof(double) + (quantized ? sizeof(float) : 0);
    if (count > max_bytes / per)
        throw MemoryLimitError(
            src_ + ": tensor " + quoted(t.name) + " of shape " + shape_str(t.shape) + " needs " +
            (count > kNoLimit / per ? std::string("more than can be addressed") : format_bytes(count * per)) +
            " in memory, over " + io_detail::memory_limit_of(max_bytes));
    const std::string_view bytes = data_.substr(where_[i].begin, t.bytes);
    Array a;
    a.shape = t.shape;
    a.dtype = t.dtype;
    a.origin = src_ + ": " + shown(t.name, 160);
    if (held != Array::Held::doubles) {  // in place, widened as read out
        a.held = held;
        if (keep_) {
            a.stored = bytes;
            a.keep = mapped_ ? keep_until_dropped(keep_, bytes) : keep_;
        } else {
            auto copy = std::make_shared<const std::string>(bytes);
            a.stored = *copy;
            a.keep = std::move(copy);
        }
        return a;
    }
    if (quantized) {
        auto out = std::make_shared<std::vector<float>>(count);
        ggml_dequantize(type, bytes.data(), count, out->data());
        a.held = Array::Held::float32;
        a.stored = std::string_view(reinterpret_cast<const char*>(out->data()), count * sizeof(float));
        a.keep = std::move(out);
    } else {
        a.values.resize(count);
        widen_ints(bytes, type.id, a.values);
    }
    if (mapped_) drop_mapped_pages(bytes);
    return a;
}

}  // namespace

std::unique_ptr<TensorSource> open_gguf(const std::string& path, std::size_t max_bytes) {
    FileBytes f = map_file_lazily(path, max_bytes);
    return std::make_unique<GgufFile>(f.bytes, path, max_bytes, std::move(f.keep), f.mapped);
}

std::unique_ptr<TensorSource> parse_gguf(std::string_view bytes, const std::string& source, std::size_t max_bytes,
                                         std::shared_ptr<const void> keep) {
    return std::make_unique<GgufFile>(bytes, source, max_bytes, std::move(keep), false);
}

}  // namespace attnscope
