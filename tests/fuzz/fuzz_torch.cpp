// libFuzzer target: the PyTorch zip state-dict reader (attnscope::parse_torch_zip) on
// arbitrary bytes — the zip directory, the restricted unpickler (opcodes, memo, marks,
// globals, persistent ids, REDUCE arguments), the flattening of nested dicts, every
// tensor's bounds against its storage, and read() of each tensor. The .npz mutator
// (npz_mutator.hpp) rewrites archives with valid CRCs, so data.pkl and the storages get
// fuzzed too, not only the zip records.
//
// Oracles, besides the sanitizers:
//  - every listed tensor has a known dtype, bytes == shape product x element size, and
//    names this file; names are unique;
//  - a tensor that reads holds exactly its listed shape and dtype (fuzz::check_array),
//    and the same numbers whether the bytes are kept alive or copied out;
//  - the memory limit holds: read again under a small limit, an accepted tensor's
//    numbers, as doubles, fit in that limit.
#include <cstring>
#include <set>
#include <string>

#include "attnscope/base/text.hpp"
#include "attnscope/io/checkpoint.hpp"
#include "fuzz_common.hpp"
#include "npz_mutator.hpp"

using namespace attnscope;

namespace {

constexpr std::size_t kSmallLimit = 4096;
constexpr std::size_t kMaxReads = 64;  // tensors read per input: enough to reach every path

std::size_t element_size(const std::string& dtype) {
    if (dtype == "float64" || dtype == "int64" || dtype == "uint64") return 8;
    if (dtype == "float32" || dtype == "int32" || dtype == "uint32") return 4;
    if (dtype == "float16" || dtype == "bfloat16" || dtype == "int16" || dtype == "uint16") return 2;
    if (dtype == "int8" || dtype == "uint8" || dtype == "bool") return 1;
    return 0;
}

bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
    return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0);
}

}  // namespace

extern "C" std::size_t LLVMFuzzerCustomMutator(std::uint8_t* data, std::size_t size, std::size_t max_size,
                                               unsigned int seed) {
    return fuzz::mutate_npz(data, size, max_size, seed);
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view bytes = fuzz::as_bytes(data, size);
    std::unique_ptr<TensorSource> src;
    if (!fuzz::accepts([&] { src = parse_torch_zip(bytes, "fuzz.pt", fuzz::kMaxBytes); })) return 0;
    // A second reader whose reads may point into a copy of the bytes kept alive.
    const auto kept = std::make_shared<const std::string>(bytes);
    std::unique_ptr<TensorSource> in_place;
    ATTNSCOPE_FUZZ_CHECK(fuzz::accepts([&] { in_place = parse_torch_zip(*kept, "fuzz.pt", fuzz::kMaxBytes, kept); }));
    ATTNSCOPE_FUZZ_CHECK(in_place->tensors().size() == src->tensors().size());

    std::set<std::string> names;
    std::size_t reads = 0;
    for (const TensorInfo& t : src->tensors()) {
        const std::size_t elem = element_size(t.dtype);
        ATTNSCOPE_FUZZ_CHECK(elem != 0);
        ATTNSCOPE_FUZZ_CHECK(t.file == "fuzz.pt");
        ATTNSCOPE_FUZZ_CHECK(names.insert(t.name).second);
        std::size_t n = 1;
        for (std::size_t d : t.shape) ATTNSCOPE_FUZZ_CHECK(!__builtin_mul_overflow(n, d, &n));
        ATTNSCOPE_FUZZ_CHECK(t.bytes == n * elem);
        if (reads++ >= kMaxReads) continue;

        Array a;
        if (!fuzz::accepts([&] { a = src->read(t.name, fuzz::kMaxBytes); })) continue;
        fuzz::check_array(a);
        ATTNSCOPE_FUZZ_CHECK(a.shape == t.shape && a.dtype == t.dtype && !a.is_text());
        ATTNSCOPE_FUZZ_CHECK(a.origin == "fuzz.pt: " + escape_control(clip_fragment(t.name)));
        Array b;
        ATTNSCOPE_FUZZ_CHECK(fuzz::accepts([&] { b = in_place->read(t.name, fuzz::kMaxBytes); }));
        ATTNSCOPE_FUZZ_CHECK(same_bits(a.doubles(), b.doubles()));
        if (a.count() * sizeof(double) <= kSmallLimit) continue;
        Array small;
        if (fuzz::accepts([&] { small = src->read(t.name, kSmallLimit); }))
            ATTNSCOPE_FUZZ_CHECK(small.count() * sizeof(double) <= kSmallLimit);
    }
    return 0;
}
