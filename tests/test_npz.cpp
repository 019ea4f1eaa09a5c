// .npz reading (np.savez, np.savez_compressed, zip64) and zip's CRC-32.
// Expected values are written here or come from numpy: the fixtures under tests/fixtures/
// are written by scripts/make_fixtures.py, and good/expected.json holds numpy's own
// reading of every good .npy and .npz file. Nothing is compared with the code under test.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <new>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "attnscope/base/errors.hpp"
#include "attnscope/io/read.hpp"
#include "attnscope/io/write.hpp"
#include "attnscope/model/model.hpp"
#include "test_util.hpp"

using namespace attnscope;
using namespace testutil;

// ---- .npz ------------------------------------------------------------------------------

TEST_CASE("io: np.savez and np.savez_compressed archives give their names and values") {
    for (const char* file : {"savez.npz", "savez_compressed.npz", "savez_comment.npz"}) {
        CAPTURE(file);
        const std::string path = good(file);
        Bundle b = parse_npz(slurp(path), path);
        CHECK(b.source == path);
        std::set<std::string> names;
        for (const auto& [name, arr] : b.arrays) names.insert(name);
        CHECK(names == std::set<std::string>{"x", "expected/Q", "mask", "query_tokens", "ids", "random"});
        REQUIRE(names.count("expected/Q"));

        const Array& q = b.arrays.at("expected/Q");
        CHECK(q.origin == path + ": expected/Q");
        CHECK(q.dtype == "float32");
        CHECK(q.shape == std::vector<std::size_t>{2, 3, 4});
        check_values(q.doubles(), a3());

        check_values(b.arrays.at("x").doubles(), kA2);
        check_values(b.arrays.at("mask").doubles(), {1, 0, 1, 0, 0, 1});
        CHECK(b.arrays.at("query_tokens").strings == kTokens);
        CHECK(b.arrays.at("ids").dtype == "int64");
        check_values(b.arrays.at("ids").doubles(), {-0x1p63, -1, 0, 1, 0x1p32, 0x1p53});
        CHECK(b.arrays.at("random").shape == std::vector<std::size_t>{3, 5});
    }
}

TEST_CASE("io: a zip64 archive with zip64 fields in its central directory") {
    // x.npy has size, compressed size and offset in its zip64 extra field; expected/y.npy
    // only its offset (the other two are in the 32-bit fields).
    const std::string path = good("zip64.npz");
    Bundle b = parse_npz(slurp(path), path);
    REQUIRE(b.arrays.size() == 2);
    REQUIRE(b.arrays.count("x"));
    REQUIRE(b.arrays.count("expected/y"));
    check_values(b.arrays.at("x").doubles(), kA2);
    CHECK(b.arrays.at("expected/y").dtype == "int16");
    check_values(b.arrays.at("expected/y").doubles(), {0, 1, 2, 3});
}

TEST_CASE("io: crc32_bytes is zip's CRC-32 for every length, offset and starting value") {
    // The oracle: the CRC-32 of the zip format (reflected polynomial 0xEDB88320), bit by bit.
    auto reference = [](std::uint32_t crc, const unsigned char* p, std::size_t n) {
        crc = ~crc;
        for (std::size_t i = 0; i < n; ++i) {
            crc ^= p[i];
            for (int b = 0; b < 8; ++b) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
        }
        return ~crc;
    };
    CHECK(crc32_bytes(0, reinterpret_cast<const unsigned char*>("123456789"), 9) == 0xCBF43926u);  // the check value
    std::vector<unsigned char> bytes(4096 + 64);
    std::uint64_t state = 0x9E3779B97F4A7C15ull;
    for (unsigned char& c : bytes) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        c = static_cast<unsigned char>(state >> 56);
    }
    std::size_t differ = 0, first_len = 0, first_offset = 0;
    for (std::size_t offset = 0; offset < 17; ++offset)
        for (std::size_t n = 0; n <= 700; ++n) {
            const std::uint32_t start = n % 3 == 0 ? 0u : static_cast<std::uint32_t>(n * 2654435761u);
            if (crc32_bytes(start, bytes.data() + offset, n) != reference(start, bytes.data() + offset, n) &&
                differ++ == 0) {
                first_len = n;
                first_offset = offset;
            }
        }
    CHECK_MESSAGE(differ == 0, differ << " differ; the first at length " << first_len << ", offset " << first_offset);
    CHECK(crc32_bytes(0, bytes.data(), bytes.size()) == reference(0, bytes.data(), bytes.size()));
    const std::uint32_t half = crc32_bytes(0, bytes.data(), 1000);
    CHECK(crc32_bytes(half, bytes.data() + 1000, bytes.size() - 1000) == reference(0, bytes.data(), bytes.size()));
}
