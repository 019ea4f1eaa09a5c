// libFuzzer target: the .npy reader (attnscope::parse_npy) on arbitrary bytes.
//
// Oracles, besides the sanitizers:
//  - an accepted array holds exactly shape-product values (or strings), text in valid
//    UTF-8;
//  - a numeric array survives a round trip through our own writer: encoded again as
//    float64 .npy (npy_header + raw doubles) and read back, it has the same shape and
//    bit-identical values.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz_common.hpp"

using namespace attnscope;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    Array a;
    if (!fuzz::accepts([&] { a = parse_npy(fuzz::as_bytes(data, size), "fuzz.npy", fuzz::kMaxBytes); })) return 0;
    fuzz::check_array(a);
    if (a.is_text()) return 0;

    // Round trip through the writer.
    const std::vector<double> av = a.doubles();
    OutArray out{"a", a.shape, DType::float64, av.data()};
    std::string file = npy_header(out);
    file.append(reinterpret_cast<const char*>(av.data()), av.size() * sizeof(double));
    Array b = parse_npy(file, "roundtrip.npy", fuzz::kMaxBytes);  // must not throw: we wrote it
    ATTNSCOPE_FUZZ_CHECK(b.shape == a.shape && b.dtype == "float64");
    const std::vector<double> bv = b.doubles();
    ATTNSCOPE_FUZZ_CHECK(bv.size() == av.size());
    ATTNSCOPE_FUZZ_CHECK(bv.empty() || std::memcmp(bv.data(), av.data(), av.size() * sizeof(double)) == 0);
    // Copied out as float, every number is its double's static_cast, bit for bit (a NaN
    // is a NaN: float32 data keep their payload, which a trip through double may quiet).
    std::vector<float> f(a.count());
    copy_numbers<float>(a, f.data());
    for (std::size_t k = 0; k < f.size(); ++k) {
        const float want = static_cast<float>(av[k]);
        ATTNSCOPE_FUZZ_CHECK(std::isnan(f[k]) ? std::isnan(want) : std::memcmp(&f[k], &want, sizeof want) == 0);
    }
    return 0;
}
