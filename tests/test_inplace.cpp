// Reading in place: map_file, numbers kept as stored in mapped files, and copy_numbers.
// Expected values are written here or come from numpy: the fixtures under tests/fixtures/
// are written by scripts/make_fixtures.py, and good/expected.json holds numpy's own
// reading of every good .npy and .npz file. Nothing is compared with the code under test.
#include <doctest/doctest.h>
#include <unistd.h>

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

// ---- reading in place: mapped files, numbers kept as stored, copy-out -----------------

namespace {

// A little-endian C-order .npy of float32 or float64 numbers given as raw bytes.
template <typename F>
std::string npy_of(const std::vector<F>& v, const std::string& shape) {
    const std::string descr = sizeof(F) == 4 ? "<f4" : "<f8";
    return make_npy("{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }",
                    std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(F)));
}

bool points_into(std::string_view inner, std::string_view outer) {
    auto p = reinterpret_cast<std::uintptr_t>(inner.data()), o = reinterpret_cast<std::uintptr_t>(outer.data());
    return p >= o && p + inner.size() <= o + outer.size();
}

}  // namespace

TEST_CASE("io: map_file gives a file's bytes, mapped or read, with read_file's checks") {
    TempDir dir;
    const std::string path = dir / "x.npy", empty = dir / "empty.npy";
    const std::string bytes = slurp(good("float32.npy"));
    spit(path, bytes);
    spit(empty, "");

    FileBytes mapped = map_file(path);
    CHECK(mapped.bytes == bytes);
    CHECK(read_file(path) == bytes);
    fs::remove(path);  // the mapping outlives the name
    CHECK(mapped.bytes == bytes);

    CHECK(map_file(empty).bytes.empty());
    check_message(input_error([&] { load_array(empty, "x"); }), {empty + ": x: not a .npy file"});
    spit(dir / "empty.npz", "");
    check_message(input_error([&] { load_bundle(dir / "empty.npz"); }),
                  {dir / "empty.npz", "too short to hold a zip directory"});

    spit(path, bytes);
    check_message(memory_limit_error([&] { map_file(path, bytes.size() - 1); }),
                  {path + ": the file holds", "over the memory limit"});
    check_message(input_error([&] { map_file(dir / "missing"); }), {(dir / "missing") + ": cannot open file"});
    check_message(input_error([&] { map_file(dir.path.string()); }), {"is a directory"});

    // A pipe cannot be mapped: it is read to its end, as read_file does.
    int fds[2];
    REQUIRE(::pipe(fds) == 0);
    REQUIRE(::write(fds[1], bytes.data(), bytes.size()) == ssize_t(bytes.size()));
    ::close(fds[1]);
    const std::string via_pipe = "/dev/fd/" + std::to_string(fds[0]);
    Array piped = load_array(via_pipe, "x");  // sniffed by its magic: the name has no .npy
    ::close(fds[0]);
    CHECK(piped.dtype == "float32");
    check_values(piped.doubles(), parse_npy(bytes, "x").doubles());
}

TEST_CASE("io: numbers read in place, from a copy and through a mapped file are the same") {
    for (const std::string file : {"float32.npy", "float64.npy", "float32_3d.npy", "be_f8.npy", "fortran_f8_2d.npy",
                                   "fortran_f4_3d.npy", "float16.npy", "int64.npy", "bool.npy", "empty_0x3_f4.npy",
                                   "empty_2x0_f8.npy", "scalar_f8.npy", "v3_f8.npy"}) {
        CAPTURE(file);
        const std::string bytes = slurp(good(file));
        auto keep = std::make_shared<const std::string>(bytes);
        Array in_place = parse_npy(*keep, "a", kNoLimit, keep);
        Array copied = parse_npy(std::string(bytes), "a");  // its source is gone after the call
        Array mapped = load_array(good(file), "a");
        for (const Array* a : {&copied, &mapped}) {
            CHECK(a->shape == in_place.shape);
            CHECK(a->dtype == in_place.dtype);
            CHECK(a->held == in_place.held);
            check_values(a->doubles(), in_place.doubles());
        }
        const bool as_stored = (in_place.dtype == "float32" || in_place.dtype == "float64") && file.find("be_") != 0 &&
                               file.find("fortran") != 0;
        CHECK((in_place.held != Array::Held::doubles) == as_stored);
        if (as_stored) {
            CHECK(in_place.values.empty());
            CHECK(points_into(in_place.stored, *keep));
            CHECK_FALSE(points_into(copied.stored, *keep));
        }
        std::vector<double> one_by_one;
        for (std::size_t k = 0; k < in_place.count(); ++k) one_by_one.push_back(in_place.value(k));
        check_values(one_by_one, in_place.doubles());
    }

    // An .npz's stored members are read in place in the archive; deflated ones are not.
    const std::string zip = slurp(good("savez.npz"));
    auto keep = std::make_shared<const std::string>(zip);
    Bundle b = parse_npz(*keep, "s.npz", kNoLimit, keep);
    bool any_stored = false;
    for (const auto& [name, a] : b.arrays)
        if (a.held != Array::Held::doubles) {
            any_stored = true;
            CHECK(points_into(a.stored, *keep));
        }
    CHECK(any_stored);
    Bundle c = load_bundle(good("savez_compressed.npz"));
    Bundle s = load_bundle(good("savez.npz"));
    for (const auto& item : s.arrays) {
        const auto& name = item.first;  // not a structured binding: clang 14 cannot capture one
        const auto& a = item.second;
        CAPTURE(name);
        REQUIRE(c.arrays.count(name));
        CHECK(c.arrays.at(name).held == a.held);
        if (!a.is_text()) check_values(c.arrays.at(name).doubles(), a.doubles());
    }
}

TEST_CASE("io: copy_numbers gives float32 data to a float run bit for bit, wherever the bytes lie") {
    // 5000 numbers: several copy chunks; subnormals, -0, a NaN with a payload, the extremes.
    std::vector<float> v(5000);
    for (std::size_t k = 0; k < v.size(); ++k) v[k] = float(std::ldexp(double(k) - 2500.0, int(k % 200) - 100));
    v[1] = -0.0f;
    v[2] = std::numeric_limits<float>::denorm_min();
    v[3] = std::numeric_limits<float>::max();
    v[4] = -std::numeric_limits<float>::max();
    std::uint32_t payload = 0x7fc12345u;
    std::memcpy(&v[3000], &payload, 4);
    v[4500] = -std::numeric_limits<float>::infinity();
    const std::string npy = npy_of(v, "(5000,)");

    for (std::size_t offset = 0; offset < 4; ++offset) {  // members of an .npz start at any byte
        CAPTURE(offset);
        auto buffer = std::make_shared<const std::string>(std::string(offset, 'z') + npy);
        Array a = parse_npy(std::string_view(*buffer).substr(offset), "a", kNoLimit, buffer);
        REQUIRE(a.held == Array::Held::float32);
        if (offset) CHECK(reinterpret_cast<std::uintptr_t>(a.stored.data()) % 4 != 0);
        std::vector<float> f(a.count());
        NonFinite nf = copy_numbers<float>(a, f.data());
        CHECK(std::memcmp(f.data(), v.data(), v.size() * sizeof(float)) == 0);
        CHECK(nf.count == 2);
        CHECK(nf.first == 3000);
        CHECK(std::isnan(nf.first_value));
        std::vector<double> d(a.count());
        NonFinite nd = copy_numbers<double>(a, d.data());
        std::size_t differ = 0;
        for (std::size_t k = 0; k < v.size(); ++k) differ += !same(d[k], double(v[k])) && !std::isnan(v[k]);
        CHECK(differ == 0);
        CHECK(nd.count == 2);
        CHECK(nd.first == 3000);
    }
}

TEST_CASE("io: copy_numbers finds float64 numbers beyond float32's range in a float run only") {
    const float fmax = std::numeric_limits<float>::max();
    // 3.4028235e38 lies above float's largest finite value, yet rounds to it.
    const std::vector<double> v = {1.0, 1e39, -2.5, -1e39, 3.4028235e38, double(fmax), 0x1p-149, 1e-50};
    for (const bool stored : {true, false}) {
        CAPTURE(stored);
        Array a = stored ? parse_npy(npy_of(v, "(2, 4)"), "a") : Array{};
        if (!stored) {  // the same numbers held as doubles, as JSON gives them
            a.shape = {2, 4};
            a.values = v;
            a.dtype = "json";
        }
        CHECK((a.held == Array::Held::float64) == stored);
        std::vector<float> f(a.count());
        NonFinite nf = copy_numbers<float>(a, f.data());
        for (std::size_t k = 0; k < v.size(); ++k) CHECK(same_bits(f[k], static_cast<float>(v[k])));
        CHECK(nf.count == 3);
        CHECK(nf.first == 1);
        CHECK(nf.first_value == 1e39);
        std::vector<double> d(a.count());
        NonFinite nd = copy_numbers<double>(a, d.data());
        check_values(d, v);
        CHECK(nd.count == 0);
    }
    Array empty = parse_npy(npy_of(std::vector<double>{}, "(0, 4)"), "e");
    CHECK(empty.count() == 0);
    CHECK(copy_numbers<float>(empty, nullptr).count == 0);
}
