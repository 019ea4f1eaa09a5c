// Choosing a reader: load_bundle and load_array by extension, then by content; standard
// input; a .npy or a directory where a bundle is expected.
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

// ---- choosing a reader -----------------------------------------------------------------

TEST_CASE("io: load_bundle and load_array choose the reader by extension, then by content") {
    TempDir dir;
    spit(dir / "archive.data", slurp(good("savez.npz")));
    spit(dir / "bundle.txt", slurp(good("bundle.json")));
    spit(dir / "x.dat", slurp(good("float64.npy")));
    spit(dir / "w.txt", slurp(good("single_list.json")));

    Bundle npz = load_bundle(good("savez_compressed.npz"));
    CHECK(npz.source == good("savez_compressed.npz"));
    CHECK(npz.arrays.size() == 6);
    Bundle sniffed = load_bundle(dir / "archive.data");  // "PK" at the start
    CHECK(sniffed.arrays.size() == 6);
    CHECK(sniffed.arrays.at("expected/Q").origin == (dir / "archive.data") + ": expected/Q");
    CHECK(load_bundle(good("bundle.json")).arrays.size() == 10);
    CHECK(load_bundle(dir / "bundle.txt").arrays.size() == 10);

    Array npy = load_array(good("float64.npy"), "x");
    CHECK(npy.origin == good("float64.npy") + ": x");
    check_values(npy.doubles(), kA2);
    Array magic = load_array(dir / "x.dat", "x");  // "\x93NUMPY" at the start
    CHECK(magic.dtype == "float64");
    check_values(magic.doubles(), kA2);
    Array json = load_array(dir / "w.txt", "W");
    CHECK(json.shape == std::vector<std::size_t>{3, 2});
    CHECK(json.origin == (dir / "w.txt") + ": W");

    check_message(input_error([&] { load_array(good("savez.npz"), "W_Q"); }),
                  {good("savez.npz") + ": an .npz archive is a bundle", "W_Q"});
    check_message(input_error([&] { load_array(dir / "missing.npy", "x"); }),
                  {(dir / "missing.npy") + ": cannot open file"});
    check_message(input_error([&] { load_bundle(dir / "missing.npz"); }),
                  {(dir / "missing.npz") + ": cannot open file"});
}

TEST_CASE("io: a .npy given as a bundle says to pass it as one array") {
    const std::string path = good("float32.npy");
    check_message(input_error([&] { load_bundle(path); }),
                  {path + ": a .npy file holds one array, not a bundle", "x " + path});
}

TEST_CASE("io: \"-\" reads a JSON bundle from standard input") {
    std::istringstream in(R"({"x": [[1, 2]], "bad": [1, "z"]})");
    std::streambuf* saved = std::cin.rdbuf(in.rdbuf());
    std::string message = input_error([] { load_bundle("-"); });
    std::cin.rdbuf(saved);
    check_message(message, {"<stdin>: bad[1]: expected a number, found string \"z\""});

    std::istringstream in2(R"({"x": [[1, 2]]})");
    saved = std::cin.rdbuf(in2.rdbuf());
    Bundle b;
    try {
        b = load_bundle("-");
    } catch (...) {
        std::cin.rdbuf(saved);
        throw;
    }
    std::cin.rdbuf(saved);
    CHECK(b.source == "<stdin>");
    check_values(b.arrays.at("x").doubles(), {1, 2});
}

TEST_CASE("io: a directory given as an input file is an InputError naming it") {
    TempDir dir;
    fs::create_directory(dir.path / "inputs.npz");
    fs::create_directory(dir.path / "x.npy");
    const std::string bundle = dir / "inputs.npz", array = dir / "x.npy";
    check_message(input_error([&] { read_file(bundle); }), {bundle + ": ", "is a directory"});
    check_message(input_error([&] { load_bundle(bundle); }), {bundle + ": ", "is a directory"});
    check_message(input_error([&] { load_array(array, "x"); }), {array + ": ", "is a directory"});
}

TEST_CASE("io: standard input is bounded by the memory limit as it is read") {
    // A megabyte of blanks with a 64 KiB limit: refused naming <stdin> and the limit, and
    // no more than the limit (and one byte) taken from the stream.
    std::istringstream in(std::string(1 << 20, ' '));
    std::streambuf* saved = std::cin.rdbuf(in.rdbuf());
    std::string message;
    try {
        message = memory_limit_error([] { load_bundle("-", 64 << 10); });
    } catch (...) {
        std::cin.rdbuf(saved);
        throw;
    }
    std::cin.rdbuf(saved);
    check_message(message, {"<stdin>: the input is larger than the memory limit of 64.0 KiB (max_memory)"});
    in.clear();
    CHECK(std::size_t(in.tellg()) <= (64 << 10) + 1);

    // read_stream itself: exactly at the limit is accepted, one byte more is not.
    std::istringstream exact(std::string(1000, 'a')), over(std::string(1001, 'a'));
    CHECK(read_stream(exact, "<stdin>", 1000).bytes == std::string(1000, 'a'));
    check_message(memory_limit_error([&] { read_stream(over, "<stdin>", 1000); }),
                  {"<stdin>: the input is larger than the memory limit of 1000 bytes"});
    std::istringstream empty("");
    CHECK(read_stream(empty, "<stdin>", 0).bytes.empty());
}

TEST_CASE("io: a device without end is refused by its kind, not read until memory runs out") {
    check_message(input_error([] { map_file("/dev/zero", 1 << 20); }),
                  {"/dev/zero: is a character device, expected a file"});
    check_message(input_error([] { load_bundle("/dev/zero", 1 << 20); }), {"/dev/zero: is a character device"});
    check_message(input_error([] { map_file_lazily("/dev/zero", 1 << 20); }), {"/dev/zero: is a character device"});
}

TEST_CASE("io: a procfs file whose size says 0 is read to its end") {
    // /proc/self/status has st_size 0 but holds text: read until EOF, like a pipe.
    const FileBytes status = map_file("/proc/self/status");
    CHECK(std::string(status.bytes).rfind("Name:", 0) == 0);
    CHECK(read_file("/proc/self/status").find("\nPid:") != std::string::npos);
    // It is not JSON, and the message says where, not that the file is empty.
    check_message(input_error([] { load_array("/proc/self/status", "x"); }),
                  {"/proc/self/status: x: invalid JSON at line 1, column 1 (byte 0)"});
    // Bounded like a pipe: more than the limit is refused.
    check_message(memory_limit_error([] { map_file("/proc/self/status", 10); }),
                  {"/proc/self/status: the file holds more than the memory limit of 10 bytes"});
}
