// libFuzzer target: the .safetensors reader (attnscope::parse_safetensors) on arbitrary
// bytes: the header length, the UTF-8 and JSON checks, every entry's dtype, shape and
// data_offsets, the coverage of the data buffer, and reading each tensor.
//
// Oracles, besides the sanitizers:
//  - an accepted file's header is a JSON object with only JSON whitespace around it (no NUL
//    padding, no byte-order mark, nothing after a NUL), as the reference reads it;
//  - an accepted file's tensors have distinct names, and each one's byte count is its
//    shape's product times its dtype's size;
//  - together they cover the data buffer exactly (the bytes after the header), as the
//    reference implementation requires: the sum of their sizes is its size;
//  - each tensor reads as an array of its listed shape and dtype holding shape-product
//    numbers; float32/float64 kept as stored point into the input at distinct places;
//    only unsupported dtypes (8-bit floats...) are refused on read, and only more than
//    the memory limit is a MemoryLimitError;
//  - read again from a copy of the bytes (no `keep`), every number is bit for bit the same;
//  - an unknown name is refused.
//
// The custom mutator keeps the 8-byte header length true to the header most of the time
// (a plain byte mutation of the JSON would almost always break it first, and the entries
// would never be reached), mutating the header's text or the data buffer; one mutation
// in four is a plain byte-level one, so the length itself keeps being fuzzed too.
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "attnscope/io/checkpoint.hpp"
#include "fuzz_common.hpp"

using namespace attnscope;

namespace {

// Bytes per element of each dtype read() reads (numpy's spelling, as TensorInfo gives it).
const std::map<std::string, std::size_t> kReadable = {
    {"float64", 8}, {"float32", 4}, {"float16", 2}, {"bfloat16", 2}, {"int64", 8}, {"int32", 4}, {"int16", 2},
    {"int8", 1},    {"uint64", 8},  {"uint32", 4},  {"uint16", 2},   {"uint8", 1}, {"bool", 1}};

bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
    return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0);
}

}  // namespace

// libFuzzer's own mutator, for bytes without structure.
extern "C" std::size_t LLVMFuzzerMutate(std::uint8_t* data, std::size_t size, std::size_t max_size);

extern "C" std::size_t LLVMFuzzerCustomMutator(std::uint8_t* data, std::size_t size, std::size_t max_size,
                                               unsigned int seed) {
    std::minstd_rand rng(seed);
    std::uint64_t n = 0;
    for (int k = 7; size >= 8 && k >= 0; --k) n = n << 8 | data[k];
    if (size < 8 || n > size - 8 || rng() % 4 == 0) return LLVMFuzzerMutate(data, size, max_size);
    std::string header(reinterpret_cast<const char*>(data) + 8, std::size_t(n));
    std::string body(reinterpret_cast<const char*>(data) + 8 + n, size - 8 - std::size_t(n));
    std::string& part = rng() % 3 != 0 ? header : body;
    const std::size_t other = 8 + header.size() + body.size() - part.size();
    if (part.empty() || other >= max_size) return LLVMFuzzerMutate(data, size, max_size);
    const std::size_t old = part.size();
    part.resize(max_size - other);
    part.resize(LLVMFuzzerMutate(reinterpret_cast<std::uint8_t*>(part.data()), old, part.size()));
    std::string out;
    for (int k = 0; k < 8; ++k) out += char(header.size() >> (8 * k) & 0xff);
    out += header;
    out += body;
    if (out.size() > max_size) return LLVMFuzzerMutate(data, size, max_size);
    std::memcpy(data, out.data(), out.size());
    return out.size();
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view bytes = fuzz::as_bytes(data, size);
    // `keep` that owns nothing: the bytes outlive every array read here.
    const std::shared_ptr<const void> keep(data, [](const void*) {});
    std::unique_ptr<TensorSource> src;
    if (!fuzz::accepts([&] { src = parse_safetensors(bytes, "fuzz.safetensors", fuzz::kMaxBytes, keep); })) return 0;

    ATTNSCOPE_FUZZ_CHECK(size >= 8);
    std::uint64_t header = 0;
    for (int k = 7; k >= 0; --k) header = header << 8 | data[k];
    ATTNSCOPE_FUZZ_CHECK(header <= size - 8);
    // The header is one JSON object in JSON whitespace, as serde_json::from_str reads it:
    // no NUL byte anywhere (padding, or after the object), no byte-order mark.
    const std::string_view text = bytes.substr(8, std::size_t(header));
    ATTNSCOPE_FUZZ_CHECK(text.find('\0') == std::string_view::npos);
    const std::size_t first = text.find_first_not_of(" \t\r\n");
    ATTNSCOPE_FUZZ_CHECK(first != std::string_view::npos && text[first] == '{');
    std::set<std::string> names;
    std::size_t covered = 0;
    for (const TensorInfo& t : src->tensors()) {
        ATTNSCOPE_FUZZ_CHECK(names.insert(t.name).second);
        ATTNSCOPE_FUZZ_CHECK(t.file == "fuzz.safetensors");
        covered += t.bytes;
    }
    ATTNSCOPE_FUZZ_CHECK(covered == size - 8 - header);

    const std::string copy(bytes);
    const auto copied = parse_safetensors(copy, "copy.safetensors", fuzz::kMaxBytes);  // must not throw
    ATTNSCOPE_FUZZ_CHECK(copied->tensors().size() == src->tensors().size());
    std::set<const char*> starts;
    for (const TensorInfo& t : src->tensors()) {
        std::size_t n = 1;
        for (std::size_t d : t.shape) ATTNSCOPE_FUZZ_CHECK(!__builtin_mul_overflow(n, d, &n));
        const auto it = kReadable.find(t.dtype);
        if (it != kReadable.end()) ATTNSCOPE_FUZZ_CHECK(t.bytes == n * it->second);
        Array a;
        bool over_limit = false;
        const bool read = fuzz::accepts([&] {
            try {
                a = src->read(t.name, fuzz::kMaxBytes);
            } catch (const MemoryLimitError&) {
                over_limit = true;
                throw;
            }
        });
        if (!read) {
            // Refused: an unsupported dtype, or more than the limit as doubles.
            ATTNSCOPE_FUZZ_CHECK(over_limit ? n > fuzz::kMaxBytes / 8 : it == kReadable.end());
            continue;
        }
        ATTNSCOPE_FUZZ_CHECK(it != kReadable.end());
        fuzz::check_array(a);
        ATTNSCOPE_FUZZ_CHECK(a.shape == t.shape && a.dtype == t.dtype && a.count() == n);
        if (a.held != Array::Held::doubles) {
            ATTNSCOPE_FUZZ_CHECK(a.stored.size() == t.bytes);
            ATTNSCOPE_FUZZ_CHECK(a.stored.data() >= bytes.data() + 8 + header);
            ATTNSCOPE_FUZZ_CHECK(a.stored.data() + a.stored.size() <= bytes.data() + size);
            ATTNSCOPE_FUZZ_CHECK(a.stored.empty() || starts.insert(a.stored.data()).second);
        }
        const Array b = copied->read(t.name, fuzz::kMaxBytes);  // must not throw: the same bytes
        ATTNSCOPE_FUZZ_CHECK(b.shape == a.shape && b.held == a.held);
        ATTNSCOPE_FUZZ_CHECK(same_bits(a.doubles(), b.doubles()));
    }
    const std::string unknown = "\x01no such tensor";
    if (!names.count(unknown)) ATTNSCOPE_FUZZ_CHECK(!fuzz::accepts([&] { src->read(unknown, fuzz::kMaxBytes); }));
    return 0;
}
