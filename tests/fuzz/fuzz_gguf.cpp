// libFuzzer target: the GGUF reader (attnscope::parse_gguf) on arbitrary bytes: the
// header, every metadata type (nested arrays too), the tensor infos, the alignment and
// placement checks, and reading (dequantizing) each tensor.
//
// Oracles, besides the sanitizers:
//  - an accepted file starts with "GGUF" and version 2 or 3; its alignment is a power of
//    two and its data section starts at a multiple of it;
//  - its keys are distinct, and every string and array of the metadata lies in the input;
//  - its tensors have distinct names, lie in the data section at multiples of the
//    alignment, and do not overlap;
//  - each readable tensor reads as an array of its listed shape holding shape-product
//    numbers (held in place ones pointing into its bytes); the others are refused by name;
//    only more than the memory limit is a MemoryLimitError;
//  - read again from a copy of the bytes (no `keep`), every number is bit for bit the same;
//  - an unknown name is refused.
#include <algorithm>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "attnscope/io/gguf.hpp"
#include "fuzz_common.hpp"

using namespace attnscope;

namespace {

bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
    return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0);
}

// The types read() reads, as TensorInfo names them.
bool readable(const std::string& dtype) {
    static const std::set<std::string> kReadable = {"float32", "float16", "bfloat16", "float64", "int8", "int16",
                                                    "int32",   "int64",   "Q4_0",     "Q4_1",    "Q5_0", "Q5_1",
                                                    "Q8_0",    "Q2_K",    "Q3_K",     "Q4_K",    "Q5_K", "Q6_K"};
    return kReadable.count(dtype) != 0;
}

bool inside(std::string_view part, std::string_view whole) {
    return part.empty() || (part.data() >= whole.data() && part.data() + part.size() <= whole.data() + whole.size());
}

void check_value(const GgufValue& v, std::string_view whole) {
    ATTNSCOPE_FUZZ_CHECK(inside(v.text, whole) && inside(v.raw, whole));
    if (v.type != GgufType::array) return;
    if (v.item == GgufType::string) ATTNSCOPE_FUZZ_CHECK(v.strings().size() == v.count);
    if (v.item == GgufType::array) {
        ATTNSCOPE_FUZZ_CHECK(v.items.size() == v.count);
        for (const GgufValue& item : v.items) check_value(item, whole);
    } else if (v.item != GgufType::string) {
        ATTNSCOPE_FUZZ_CHECK(v.numbers().size() == v.count);
    }
}

void check_directory(const TensorSource& src, std::string_view bytes) {
    const GgufInfo* g = src.gguf();
    ATTNSCOPE_FUZZ_CHECK(g && bytes.substr(0, 4) == "GGUF" && (g->version == 2 || g->version == 3));
    ATTNSCOPE_FUZZ_CHECK(g->alignment && (g->alignment & (g->alignment - 1)) == 0);
    ATTNSCOPE_FUZZ_CHECK(g->data_offset % g->alignment == 0);
    std::set<std::string> keys;
    for (const auto& kv : g->metadata) {
        ATTNSCOPE_FUZZ_CHECK(keys.insert(kv.key).second);
        check_value(kv.value, bytes);
    }
    std::set<std::string> names;
    std::vector<std::pair<std::uint64_t, std::uint64_t>> spans;
    for (const TensorInfo& t : src.tensors()) {
        ATTNSCOPE_FUZZ_CHECK(names.insert(t.name).second);
        ATTNSCOPE_FUZZ_CHECK(t.offset >= g->data_offset && (t.offset - g->data_offset) % g->alignment == 0);
        ATTNSCOPE_FUZZ_CHECK(t.offset + t.bytes <= bytes.size() || t.bytes == 0);
        if (t.bytes) spans.emplace_back(t.offset, t.offset + t.bytes);
    }
    std::sort(spans.begin(), spans.end());
    for (std::size_t k = 1; k < spans.size(); ++k) ATTNSCOPE_FUZZ_CHECK(spans[k].first >= spans[k - 1].second);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view bytes = fuzz::as_bytes(data, size);
    const std::shared_ptr<const void> keep(data, [](const void*) {});  // owns nothing: the bytes outlive it
    std::unique_ptr<TensorSource> src;
    if (!fuzz::accepts([&] { src = parse_gguf(bytes, "fuzz.gguf", fuzz::kMaxBytes, keep); })) return 0;
    check_directory(*src, bytes);

    const std::string copy(bytes);
    const auto copied = parse_gguf(copy, "copy.gguf", fuzz::kMaxBytes);  // must not throw
    ATTNSCOPE_FUZZ_CHECK(copied->tensors().size() == src->tensors().size());
    for (const TensorInfo& t : src->tensors()) {
        std::size_t n = 1;
        for (std::size_t d : t.shape) ATTNSCOPE_FUZZ_CHECK(!__builtin_mul_overflow(n, d, &n));
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
            // refused: more than the limit (as doubles, and float32 when dequantized), or a
            // type listed but not read (IQ2_XXS...)
            ATTNSCOPE_FUZZ_CHECK(over_limit ? n > fuzz::kMaxBytes / 12 : !readable(t.dtype));
            continue;
        }
        fuzz::check_array(a);
        ATTNSCOPE_FUZZ_CHECK(readable(t.dtype) && a.shape == t.shape && a.dtype == t.dtype && a.count() == n);
        if (a.held != Array::Held::doubles && a.stored.size() == t.bytes && t.bytes)
            ATTNSCOPE_FUZZ_CHECK(inside(a.stored, bytes) || a.dtype != "float32");
        const Array b = copied->read(t.name, fuzz::kMaxBytes);  // must not throw: the same bytes
        ATTNSCOPE_FUZZ_CHECK(b.shape == a.shape && b.held == a.held);
        ATTNSCOPE_FUZZ_CHECK(same_bits(a.doubles(), b.doubles()));
    }
    const std::string unknown = "\x01no such tensor";
    if (!std::count_if(src->tensors().begin(), src->tensors().end(),
                       [&](const TensorInfo& t) { return t.name == unknown; }))
        ATTNSCOPE_FUZZ_CHECK(!fuzz::accepts([&] { src->read(unknown, fuzz::kMaxBytes); }));
    return 0;
}
