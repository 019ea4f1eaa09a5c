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
#include <optional>
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

// ---- crafted archives: what numpy's zipfile refuses, and what must be refused before
// anything is inflated ----------------------------------------------------------------------
namespace {

void put(std::string& s, std::uint64_t v, int n) {
    for (int k = 0; k < n; ++k) s += char(v >> (8 * k) & 0xff);
}

// One central directory entry: what it says about a member (written by hand, so that it
// can lie: a shared offset, another name than the local header's, a huge size).
struct Entry {
    std::string name;
    std::uint64_t offset;  // of the local header it points to
    std::uint32_t crc;
    std::uint64_t comp_size, size;  // as declared
    std::uint16_t method = 0;       // 0 stored, 8 deflate
};

// A local header (plain 32-bit fields) for `name`, then `data`.
std::string local_record(const std::string& name, const std::string& data, std::uint16_t method = 0,
                         std::uint64_t size = 0) {
    std::string s;
    put(s, 0x04034b50, 4);
    put(s, 20, 2);
    put(s, 0, 2);
    put(s, method, 2);
    put(s, 0, 4);  // time, date
    put(s, crc32_bytes(0, reinterpret_cast<const unsigned char*>(data.data()), data.size()), 4);
    put(s, data.size(), 4);
    put(s, method ? size : data.size(), 4);
    put(s, name.size(), 2);
    put(s, 0, 2);
    return s + name + data;
}

// The central directory of `entries` at `dir_offset`, and the end record counting `count` of them.
std::string directory(const std::vector<Entry>& entries, std::uint64_t dir_offset, std::uint64_t count) {
    std::string central;
    for (const Entry& e : entries) {
        put(central, 0x02014b50, 4);
        put(central, 20, 2);
        put(central, 20, 2);
        put(central, 0, 2);
        put(central, e.method, 2);
        put(central, 0, 4);
        put(central, e.crc, 4);
        put(central, e.comp_size, 4);
        put(central, e.size, 4);
        put(central, e.name.size(), 2);
        put(central, 0, 2);
        put(central, 0, 2);
        put(central, 0, 2);
        put(central, 0, 2);
        put(central, 0, 4);
        put(central, e.offset, 4);
        central += e.name;
    }
    std::string end;
    put(end, 0x06054b50, 4);
    put(end, 0, 4);
    put(end, count, 2);
    put(end, count, 2);
    put(end, central.size(), 4);
    put(end, dir_offset, 4);
    put(end, 0, 2);
    return central + end;
}

const std::string kX = make_npy("{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }", std::string(16, '\0'));

std::uint32_t crc_of(const std::string& s) {
    return crc32_bytes(0, reinterpret_cast<const unsigned char*>(s.data()), s.size());
}

// A stored archive whose local headers are named `locals` and its directory entries
// `names` (the same unless a test wants them to differ), each member holding kX.
std::string archive(const std::vector<std::string>& names, std::vector<std::string> locals = {},
                    std::optional<std::uint64_t> count = {}) {
    if (locals.empty()) locals = names;
    std::string out;
    std::vector<Entry> entries;
    for (std::size_t i = 0; i < names.size(); ++i) {
        entries.push_back({names[i], out.size(), crc_of(kX), kX.size(), kX.size()});
        out += local_record(locals[i], kX);
    }
    return out + directory(entries, out.size(), count.value_or(names.size()));
}

}  // namespace

TEST_CASE("io: the crafted-archive writer of these tests makes archives the reader accepts") {
    Bundle b = parse_npz(archive({"x.npy", "W_Q.npy"}), "ok.npz");
    CHECK(b.arrays.size() == 2);
    check_values(b.arrays.at("W_Q").doubles(), {0, 0});
}

TEST_CASE("io: .npz entries that share or overlap one member's bytes are refused, naming both") {
    // Twelve directory entries, one member: every entry points at the one local header
    // (with its own name, so no name appears twice). The archive is refused from the
    // directory alone, naming the file and two of the members that share bytes.
    std::string out = local_record("x.npy", kX);
    std::vector<Entry> entries;
    for (const char* name : {"x.npy", "W_Q.npy", "W_K.npy", "W_V.npy", "W_O.npy", "b_Q.npy", "b_K.npy", "b_V.npy",
                             "b_O.npy", "memory.npy", "key_padding_mask.npy", "in_proj_weight.npy"})
        entries.push_back({name, 0, crc_of(kX), kX.size(), kX.size()});
    const std::string shared = out + directory(entries, out.size(), entries.size());
    check_message(input_error([&] { parse_npz(shared, "shared.npz"); }),
                  {"shared.npz: members 'x.npy' and 'W_Q.npy' share or overlap bytes of the archive (at 0 and 0)"});

    // Overlapping, not identical: the second entry's local header lies inside the first
    // member's data (a .npy whose bytes hold another local header).
    const std::string inner = local_record("W_Q.npy", kX);
    const std::string outer_data = kX + inner;
    std::string overlap = local_record("x.npy", outer_data);
    const std::uint64_t inner_at = 30 + 5 + kX.size();
    std::vector<Entry> two = {{"x.npy", 0, crc_of(outer_data), outer_data.size(), outer_data.size()},
                              {"W_Q.npy", inner_at, crc_of(kX), kX.size(), kX.size()}};
    overlap += directory(two, overlap.size(), 2);
    check_message(
        input_error([&] { parse_npz(overlap, "overlap.npz"); }),
        {"overlap.npz: members 'x.npy' and 'W_Q.npy' share or overlap bytes", "at 0 and " + std::to_string(inner_at)});

    // A member whose bytes run into the central directory.
    std::string into = local_record("x.npy", kX);
    std::vector<Entry> long_entry = {{"x.npy", 0, crc_of(kX), kX.size() + 8, kX.size() + 8}};
    into += directory(long_entry, into.size(), 1);
    check_message(input_error([&] { parse_npz(into, "into.npz"); }),
                  {"into.npz: member 'x.npy' runs into the central directory"});
}

TEST_CASE("io: a member's name, and the archive's size, are checked before anything is inflated") {
    // One deflated member that claims 1 GiB from 10 bytes of data that are not deflate at
    // all: inflating it would fail (or, were it real, take a gigabyte). Every refusal
    // below comes before that: the name (a NameCheck, or not a .npy), then the sizes.
    const std::string junk(10, '\x55');
    auto one = [&](const std::string& name) {
        std::string out = local_record(name, junk, 8, std::uint64_t(1) << 30);
        return out + directory({{name, 0, 0, junk.size(), std::uint64_t(1) << 30, 8}}, out.size(), 1);
    };
    std::vector<std::string> asked;
    const NameCheck known_only = [&](const std::string& source, const std::string& name) {
        asked.push_back(name);
        if (name != "x") throw InputError(source + ": unknown array '" + name + "'");
    };
    check_message(input_error([&] { parse_npz(one("secret.npy"), "bomb.npz", kNoLimit, {}, known_only); }),
                  {"bomb.npz: unknown array 'secret'"});
    CHECK(asked == std::vector<std::string>{"secret"});
    check_message(input_error([&] { parse_npz(one("secret.bin"), "bomb.npz"); }),
                  {"bomb.npz: member 'secret.bin' is not a .npy array"});
    // A known name gets as far as the sizes: more than deflate can expand, still nothing inflated.
    check_message(input_error([&] { parse_npz(one("x.npy"), "bomb.npz", kNoLimit, {}, known_only); }),
                  {"bomb.npz: member 'x.npy' claims 1.0 GiB from 10 bytes of deflate data"});

    // load_bundle passes the check on, for archives and JSON objects alike; a JSON
    // object's unknown key is refused before its value is read.
    TempDir dir;
    spit(dir / "bomb.npz", one("secret.npy"));
    check_message(input_error([&] { load_bundle(dir / "bomb.npz", kNoLimit, known_only); }),
                  {"bomb.npz: unknown array 'secret'"});
    spit(dir / "b.json", R"({"x": [1], "secret": [1, 2, "not read"]})");
    check_message(input_error([&] { load_bundle(dir / "b.json", kNoLimit, known_only); }),
                  {"b.json: unknown array 'secret'"});
}

TEST_CASE("io: a local header that names its member differently than the directory is refused") {
    // numpy (zipfile) refuses it too ("File name in directory ... and header ... differ").
    check_message(input_error([&] {
                      parse_npz(archive({"x.npy", "W_Q.npy"}, {"x.npy", "W_K.npy"}), "two.npz");
                  }),
                  {"two.npz: not a valid .npz (zip) archive: member 'W_Q.npy' is named 'W_K.npy' in its local "
                   "header"});
}

TEST_CASE("io: an end record whose member count disagrees with the central directory is refused") {
    // Refused, not read: numpy's zipfile reads entries by the directory's size and would
    // find the members; another reader trusts the count and finds none. An archive whose
    // records disagree is corrupt or made to show two readers two things.
    check_message(input_error([&] {
                      parse_npz(archive({"x.npy", "W_Q.npy"}, {}, 0), "zero.npz");
                  }),
                  {"zero.npz: not a valid .npz (zip) archive: its end record lists 0 members, but the central "
                   "directory has ",
                   "bytes after them, starting with another entry (records that disagree)"});
    check_message(input_error([&] {
                      parse_npz(archive({"x.npy", "W_Q.npy"}, {}, 1), "one.npz");
                  }),
                  {"one.npz: not a valid .npz (zip) archive: its end record lists 1 members"});
    check_message(input_error([&] { parse_npz(archive({"x.npy"}, {}, 2), "more.npz"); }),
                  {"more.npz: not a valid .npz (zip) archive: its end record lists 2 members, but the central "
                   "directory ends after 1 (records that disagree)"});
}

TEST_CASE("io: .npz member names reach messages escaped, clipped, on one line") {
    // Control characters (ESC sequences, a newline, a NUL that would cut what() short,
    // BEL) and bytes that are not UTF-8, in names that are not .npy and in names twice.
    const std::vector<std::pair<std::string, std::string>> names = {
        {"\x1b[31mRED", "\\x1b[31mRED"},
        {"\x1b]0;title\x07", "\\x1b]0;title\\x07"},
        {"a\nb", "a\\nb"},
        {std::string("nul\0after", 9), "nul\\x00after"},
        {"bad\xff\xfe", "bad\\xff\\xfe"},
    };
    for (const auto& item : names) {
        const auto& raw = item.first;  // not a structured binding: clang 14 cannot capture one
        const auto& escaped = item.second;
        CAPTURE(escaped);
        const std::string m = input_error([&] { parse_npz(archive({raw}), "n.npz"); });
        check_message(m, {"n.npz: member '" + escaped + "' is not a .npy array"});
        check_message(input_error([&] {
                          parse_npz(archive({raw + ".npy", raw + ".npy"}), "n.npz");
                      }),
                      {"n.npz: array '" + escaped + "' appears twice in the archive"});
        // A bad .npy inside the member: the array's origin carries the escaped name.
        std::string out = local_record(raw + ".npy", "not npy");
        out += directory({{raw + ".npy", 0, crc_of("not npy"), 7, 7}}, out.size(), 1);
        check_message(input_error([&] { parse_npz(out, "n.npz"); }), {"n.npz: " + escaped + ": not a .npy file"});
    }
    // A long name is clipped (the archive's own name is kept whole, escaped).
    const std::string long_name(5000, 'n');
    const std::string m = input_error([&] { parse_npz(archive({long_name}), "dir\x1b/long.npz"); });
    check_message(m, {"dir\\x1b/long.npz: member 'nnnn", "... (5000 bytes in all)' is not a .npy array"});
    CHECK(m.size() < 300);
}
