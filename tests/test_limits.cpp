// Memory limits: files, arrays, archives and JSON values refused before allocating.
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
namespace fs = std::filesystem;

// ---- memory limits ---------------------------------------------------------------------

TEST_CASE("io: format_bytes spells sizes for messages") {
    CHECK(format_bytes(0) == "0 bytes");
    CHECK(format_bytes(1023) == "1023 bytes");
    CHECK(format_bytes(1024) == "1.0 KiB");
    CHECK(format_bytes(1536) == "1.5 KiB");
    CHECK(format_bytes(std::size_t(3) << 30) == "3.0 GiB");
    CHECK(format_bytes(kNoLimit) == "16.0 EiB");
}

TEST_CASE("io: memory limits refuse files, arrays and archives before allocating") {
    // read_file: the file's size against the limit.
    const std::string f8 = good("float64.npy");
    const std::size_t size = std::size_t(fs::file_size(f8));
    CHECK(read_file(f8, size).size() == size);
    check_message(memory_limit_error([&] { read_file(f8, size - 1); }),
                  {f8 + ": the file holds " + std::to_string(size) + " bytes, over the memory limit of " +
                   std::to_string(size - 1) + " bytes (max_memory)"});

    // parse_npy: the values widened to double, (2, 3) -> 48 bytes.
    const std::string bytes = slurp(f8);
    check_values(parse_npy(bytes, "x", 48).doubles(), kA2);
    check_message(memory_limit_error([&] { parse_npy(bytes, "x", 47); }),
                  {"x: shape (2, 3) needs 48 bytes in memory, over the memory limit of 47 bytes (max_memory)"});
    check_message(memory_limit_error([&] { parse_npy(slurp(good("tokens_U5.npy")), "t", 0); }),
                  {"t: shape (6,) needs "});
    CHECK(parse_npy(slurp(good("empty_0x3_f4.npy")), "e", 0).count() == 0);

    // load_array passes the limit on: 1000 int8 values read (about 1 KiB) but widen to 8000 bytes.
    const std::string i8 = good("int8_1000.npy");
    CHECK(load_array(i8, "x", 8000).count() == 1000);
    check_message(memory_limit_error([&] { load_array(i8, "x", 4000); }),
                  {i8 + ": x: shape (1000,) needs 7.8 KiB in memory, over the memory limit of 3.9 KiB"});

    // parse_npz / load_bundle: the members' declared sizes, before anything is inflated.
    const std::string zeros = good("npz_zeros_1mb.npz");
    Bundle all = load_bundle(zeros);
    REQUIRE(all.arrays.count("zeros"));
    CHECK(all.arrays.at("zeros").shape == std::vector<std::size_t>{125000});
    check_message(memory_limit_error([&] { load_bundle(zeros, 100000); }),
                  {zeros + ": its members would need ", "decompressed beside the archive's ",
                   "over the memory limit of 97.7 KiB (max_memory)"});
    check_message(memory_limit_error([&] { parse_npz(slurp(zeros), "z.npz", 100000); }),
                  {"z.npz: its members would need "});
}

TEST_CASE("io: the memory limit covers all of an archive's arrays together") {
    // Four int8 members of 1000 values: 4.4 KiB decompressed in all, 8000 bytes each
    // widened to double, 32000 bytes together. io.hpp: max_bytes is "the most it may
    // allocate for what it reads"; each array fits the limit, all four do not.
    const std::string path = good("npz_int8_members.npz");
    CHECK(parse_npz(slurp(path), path).arrays.size() == 4);
    std::size_t widened = 0;
    INFO("parse_npz with a 10000-byte limit returned arrays holding " << widened << " bytes of values");
    std::string message = memory_limit_error([&] {
        Bundle b = parse_npz(slurp(path), path, 10000);
        for (const auto& [name, a] : b.arrays) widened += a.count() * sizeof(double);
    });
    check_message(message, {path + ": its arrays together", "over the memory limit of 9.8 KiB"});
}

TEST_CASE("io: the memory limit covers a JSON file's values widened to double") {
    // 10000 zeros: about 20 KB of JSON, 80000 bytes of doubles. io.hpp: max_bytes is
    // "the most it may allocate for what it reads (..., values widened to double)".
    TempDir dir;
    std::string text = "{\"x\": [0";
    for (int i = 1; i < 10000; ++i) text += ",0";
    text += "]}";
    spit(dir / "zeros.json", text);
    spit(dir / "list.json", text.substr(6, text.size() - 7));  // the bare list
    REQUIRE(text.size() < 40000);
    for (const std::string file : {"zeros.json", "list.json"}) {
        CAPTURE(file);
        const std::string path = dir / file;
        std::size_t widened = 0;
        INFO("read with a 40000-byte limit, the values alone hold " << widened << " bytes");
        std::string message = memory_limit_error([&] {
            if (file == "zeros.json")
                widened = load_bundle(path, 40000).arrays.at("x").count() * sizeof(double);
            else
                widened = load_array(path, "x", 40000).count() * sizeof(double);
        });
        check_message(message, {path + ": ", "over the memory limit of 39.1 KiB"});
    }
}
