// libFuzzer target: the .npz (zip) reader (attnscope::parse_npz) on arbitrary bytes —
// central directory, zip64 records, local headers, stored and deflated members, CRC-32,
// and the .npy reader on every member. A structure-aware mutator (npz_mutator.hpp)
// rewrites archives with valid CRCs, so the members' contents get fuzzed too.
//
// Oracles, besides the sanitizers:
//  - every accepted array holds exactly shape-product values (or strings) and names its
//    archive and itself (escaped, clipped: a line for messages) in its origin;
//  - the memory limit holds for the archive as a whole (io.hpp: max_bytes is "the most it
//    may allocate for what it reads"): read again with a small limit, an accepted
//    archive's arrays, widened to double, fit in that limit.
#include "attnscope/base/text.hpp"
#include "fuzz_common.hpp"
#include "npz_mutator.hpp"

using namespace attnscope;

namespace {

// Small enough that archives the fuzzer writes can reach it.
constexpr std::size_t kSmallLimit = 4096;

// Bytes the arrays hold after reading: doubles, or at least a std::string per label.
std::size_t held_bytes(const Bundle& b) {
    std::size_t n = 0;
    for (const auto& [name, a] : b.arrays) n += a.count() * sizeof(double) + a.strings.size() * sizeof(std::string);
    return n;
}

}  // namespace

extern "C" std::size_t LLVMFuzzerCustomMutator(std::uint8_t* data, std::size_t size, std::size_t max_size,
                                               unsigned int seed) {
    return fuzz::mutate_npz(data, size, max_size, seed);
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view bytes = fuzz::as_bytes(data, size);
    Bundle b;
    if (!fuzz::accepts([&] { b = parse_npz(bytes, "fuzz.npz", fuzz::kMaxBytes); })) return 0;
    ATTNSCOPE_FUZZ_CHECK(b.source == "fuzz.npz");
    for (const auto& [name, a] : b.arrays) {
        fuzz::check_array(a);
        // The origin is for messages: the array's name escaped and clipped, one line.
        ATTNSCOPE_FUZZ_CHECK(a.origin == "fuzz.npz: " + escape_control(clip_fragment(name)));
        for (char c : a.origin) ATTNSCOPE_FUZZ_CHECK(static_cast<unsigned char>(c) >= 0x20 && c != 0x7f);
    }
    if (held_bytes(b) <= kSmallLimit) return 0;
    Bundle small;
    if (fuzz::accepts([&] { small = parse_npz(bytes, "fuzz.npz", kSmallLimit); }))
        ATTNSCOPE_FUZZ_CHECK(held_bytes(small) <= kSmallLimit);
    return 0;
}
