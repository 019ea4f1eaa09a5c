// libFuzzer target: the .npy reader (attnscope::parse_npy) on arbitrary bytes.
//
// Oracles, besides the sanitizers:
//  - an accepted array holds exactly shape-product values (or strings), text in valid
//    UTF-8;
//  - a numeric array survives a round trip through our own writer: encoded again as
//    float64 .npy (npy_header + raw doubles) and read back, it has the same shape and
//    bit-identical values.
#include "fuzz_common.hpp"

#include <cstring>
#include <string>

using namespace attnscope;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    Array a;
    if (!fuzz::accepts([&] { a = parse_npy(fuzz::as_bytes(data, size), "fuzz.npy", fuzz::kMaxBytes); })) return 0;
    fuzz::check_array(a);
    if (a.is_text()) return 0;

    // Round trip through the writer.
    OutArray out{"a", a.shape, DType::float64, a.values.data()};
    std::string file = npy_header(out);
    file.append(reinterpret_cast<const char*>(a.values.data()), a.values.size() * sizeof(double));
    Array b = parse_npy(file, "roundtrip.npy", fuzz::kMaxBytes);  // must not throw: we wrote it
    ATTNSCOPE_FUZZ_CHECK(b.shape == a.shape && b.dtype == "float64");
    ATTNSCOPE_FUZZ_CHECK(b.values.size() == a.values.size());
    ATTNSCOPE_FUZZ_CHECK(b.values.empty() ||
                         std::memcmp(b.values.data(), a.values.data(), a.values.size() * sizeof(double)) == 0);
    return 0;
}
