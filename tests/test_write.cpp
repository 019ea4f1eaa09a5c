// The .npy / .npz writers: round trips through the readers and through numpy (files
// attnscope writes are read back by numpy through /usr/bin/python3), and npy_header.
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

namespace {

// numpy's repr of a shape tuple, written independently of shape_str.
std::string tuple_repr(const std::vector<std::size_t>& shape) {
    if (shape.empty()) return "()";
    std::string s = "(";
    for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + (shape.size() == 1 ? ",)" : ")");
}

}  // namespace

// ---- writers: round trips through the readers and through numpy --------------------------

namespace {

// Test data for the writers: C-order values k * 0.5 - 3, the first six replaced by
// NaN, -inf, +inf, -0, the smallest subnormal and the largest finite value.
template <typename T>
std::vector<T> writer_values(std::size_t n) {
    std::vector<T> v(n);
    for (std::size_t k = 0; k < n; ++k) v[k] = T(double(k) * 0.5 - 3);
    const T special[] = {std::numeric_limits<T>::quiet_NaN(),  -std::numeric_limits<T>::infinity(),
                         std::numeric_limits<T>::infinity(),   T(-0.0),
                         std::numeric_limits<T>::denorm_min(), std::numeric_limits<T>::max()};
    for (std::size_t k = 0; k < n && k < 6; ++k) v[k] = special[k];
    return v;
}

std::vector<unsigned char> writer_bools(std::size_t n) {
    std::vector<unsigned char> v(n);
    for (std::size_t k = 0; k < n; ++k) v[k] = k % 3 == 0;
    return v;
}

// Owns the data an OutArray points to.
struct TestArray {
    std::vector<float> f32;
    std::vector<double> f64;
    std::vector<unsigned char> b;
    OutArray out;

    TestArray(std::string name, DType dtype, std::vector<std::size_t> shape) {
        std::size_t n = element_count(shape);
        const void* data = nullptr;
        if (dtype == DType::float32) {
            f32 = writer_values<float>(n);
            data = f32.data();
        }
        if (dtype == DType::float64) {
            f64 = writer_values<double>(n);
            data = f64.data();
        }
        if (dtype == DType::boolean) {
            b = writer_bools(n);
            data = b.data();
        }
        out = OutArray{std::move(name), std::move(shape), dtype, data};
    }
    TestArray(const TestArray&) = delete;
    std::string raw() const {
        return std::string(static_cast<const char*>(out.data), element_count(out.shape) * dtype_size(out.dtype));
    }
    std::vector<double> as_doubles() const {
        if (out.dtype == DType::float32) return std::vector<double>(f32.begin(), f32.end());
        if (out.dtype == DType::float64) return f64;
        return std::vector<double>(b.begin(), b.end());
    }
    std::string dtype_name() const {
        return out.dtype == DType::float32 ? "float32" : out.dtype == DType::float64 ? "float64" : "bool";
    }
};

const std::vector<std::vector<std::size_t>> kWriterShapes = {
    {}, {0}, {1}, {6}, {2, 3}, {0, 3}, {3, 0}, {2, 0, 3}, {2, 3, 4, 5}, {1, 1, 1, 1}, {2, 3, 0, 5}};

}  // namespace

TEST_CASE("io: write_npy then parse_npy gives identical bytes and values") {
    TempDir dir;
    for (DType dtype : {DType::float32, DType::float64, DType::boolean}) {
        for (const auto& shape : kWriterShapes) {
            TestArray t("a", dtype, shape);
            CAPTURE(t.dtype_name());
            CAPTURE(tuple_repr(shape));
            const std::string path = dir / "a.npy";
            {
                AtomicFile f(path);
                write_npy(f, t.out);
                f.commit();
            }
            std::string bytes = slurp(path);
            CHECK(bytes == npy_header(t.out) + t.raw());
            Array a = parse_npy(bytes, path);
            CHECK(a.shape == shape);
            CHECK(a.dtype == t.dtype_name());
            check_values(a.doubles(), t.as_doubles());
        }
    }
}

TEST_CASE("io: write_npz then parse_npz gives every member back") {
    TempDir dir;
    std::vector<std::unique_ptr<TestArray>> arrays;
    arrays.push_back(std::make_unique<TestArray>("x", DType::float32, std::vector<std::size_t>{2, 3, 4, 5}));
    arrays.push_back(std::make_unique<TestArray>("expected/Q", DType::float64, std::vector<std::size_t>{2, 3}));
    arrays.push_back(std::make_unique<TestArray>("expected/mask", DType::boolean, std::vector<std::size_t>{2, 3, 3}));
    arrays.push_back(std::make_unique<TestArray>("empty", DType::float64, std::vector<std::size_t>{0, 3}));
    arrays.push_back(std::make_unique<TestArray>("scalar", DType::float32, std::vector<std::size_t>{}));
    std::vector<OutArray> out;
    for (const auto& a : arrays) out.push_back(a->out);

    const std::string path = dir / "all.npz";
    {
        AtomicFile f(path);
        write_npz(f, out);
        f.commit();
    }
    Bundle b = parse_npz(slurp(path), path);
    CHECK(b.arrays.size() == arrays.size());
    for (const auto& t : arrays) {
        CAPTURE(t->out.name);
        REQUIRE(b.arrays.count(t->out.name));
        const Array& a = b.arrays.at(t->out.name);
        CHECK(a.origin == path + ": " + t->out.name);
        CHECK(a.shape == t->out.shape);
        CHECK(a.dtype == t->dtype_name());
        check_values(a.doubles(), t->as_doubles());
    }

    // An empty archive is still an archive.
    const std::string empty = dir / "empty.npz";
    {
        AtomicFile f(empty);
        write_npz(f, {});
        f.commit();
    }
    CHECK(parse_npz(slurp(empty), empty).arrays.empty());
}

TEST_CASE("io: numpy reads what write_npy and write_npz wrote") {
    if (!have_numpy()) {
        MESSAGE("skipped: /usr/bin/python3 cannot import numpy");
        return;
    }
    TempDir dir;
    TestArray f32("x", DType::float32, {2, 3, 4, 5});
    TestArray f64("expected/Q", DType::float64, {2, 3});
    TestArray empty("empty", DType::float64, {0, 3});
    TestArray flag("flag", DType::boolean, {});
    TestArray mask("mask", DType::boolean, {5});
    for (const TestArray* t : {&f32, &f64, &empty, &flag, &mask}) {
        std::string file = t->out.name == "expected/Q" ? "Q" : t->out.name;
        AtomicFile f(dir / (file + ".npy"));
        write_npy(f, t->out);
        f.commit();
    }
    {
        AtomicFile f(dir / "all.npz");
        write_npz(f, {f32.out, f64.out, empty.out, flag.out, mask.out});
        f.commit();
    }
    // The oracle recomputes every array with numpy, independently of the C++ above.
    spit(dir / "check.py", R"PY(
import sys, zipfile
import numpy as np

d = sys.argv[1]

def values(n, dtype):
    v = (np.arange(n) * 0.5 - 3).astype(dtype)
    info = np.finfo(dtype)
    special = np.array([np.nan, -np.inf, np.inf, -0.0, info.smallest_subnormal, info.max], dtype=dtype)
    v[:min(n, 6)] = special[:min(n, 6)]
    return v

def bools(n):
    return np.arange(n) % 3 == 0

want = {
    "x": values(120, np.float32).reshape(2, 3, 4, 5),
    "expected/Q": values(6, np.float64).reshape(2, 3),
    "empty": values(0, np.float64).reshape(0, 3),
    "flag": bools(1).reshape(()),
    "mask": bools(5),
}

def same(name, got):
    w = want[name]
    assert got.dtype == w.dtype, (name, got.dtype, w.dtype)
    assert got.shape == w.shape, (name, got.shape, w.shape)
    assert np.array_equal(got, w, equal_nan=w.dtype.kind == "f"), (name, got, w)
    assert np.array_equal(np.signbit(got), np.signbit(w)) if w.dtype.kind == "f" else True, name

for name in want:
    path = "%s/%s.npy" % (d, "Q" if name == "expected/Q" else name)
    with open(path, "rb") as f:
        assert np.lib.format.read_magic(f) == (1, 0), path
    same(name, np.load(path))

with zipfile.ZipFile(d + "/all.npz") as z:
    assert z.testzip() is None  # every CRC-32 checks
    assert [i.filename for i in z.infolist()] == [n + ".npy" for n in want], z.namelist()
with np.load(d + "/all.npz") as z:
    assert sorted(z.files) == sorted(want), z.files
    for name in want:
        same(name, z[name])
print("numpy agrees")
)PY");
    std::string log = dir / "check.log";
    int rc = std::system(
        ("/usr/bin/python3 '" + (dir / "check.py") + "' '" + dir.path.string() + "' > '" + log + "' 2>&1").c_str());
    const std::string output = slurp(log);  // read now: INFO is evaluated lazily, inside the reporter
    INFO("python output:\n" << output);
    CHECK(rc == 0);
}

TEST_CASE("io: npy_header is 64-byte aligned and spells numpy's header dict") {
    const std::vector<std::pair<DType, std::string>> dtypes = {
        {DType::float32, "<f4"}, {DType::float64, "<f8"}, {DType::boolean, "|b1"}};
    std::vector<std::vector<std::size_t>> shapes = kWriterShapes;
    shapes.push_back({4294967296, 0});
    shapes.push_back(std::vector<std::size_t>(32, 1));
    for (const auto& item : dtypes) {
        const auto& dtype = item.first;  // not a structured binding: clang 14 cannot capture one
        const auto& descr = item.second;
        for (const auto& shape : shapes) {
            CAPTURE(descr);
            CAPTURE(tuple_repr(shape));
            std::string h = npy_header(OutArray{"a", shape, dtype, nullptr});
            REQUIRE(h.size() > 10);
            CHECK(h.size() % 64 == 0);
            CHECK(h.substr(0, 8) == std::string("\x93NUMPY\x01\x00", 8));
            std::size_t header_len =
                std::size_t(static_cast<unsigned char>(h[8])) | std::size_t(static_cast<unsigned char>(h[9])) << 8;
            CHECK(header_len == h.size() - 10);
            const std::string dict =
                "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + tuple_repr(shape) + ", }";
            CHECK(h.substr(10, dict.size()) == dict);
            CHECK(h.find_first_not_of(' ', 10 + dict.size()) == h.size() - 1);  // spaces, then the newline
            CHECK(h.back() == '\n');
        }
    }
}

TEST_CASE("io: npy_header's dict text matches np.save's for the same array") {
    struct Ref {
        const char* file;
        DType dtype;
        std::vector<std::size_t> shape;
    };
    const std::vector<Ref> refs = {
        {"ref_f4_2x3.npy", DType::float32, {2, 3}},
        {"ref_f8_5.npy", DType::float64, {5}},
        {"ref_b1_scalar.npy", DType::boolean, {}},
        {"ref_f8_2x0x3x1.npy", DType::float64, {2, 0, 3, 1}},
        {"ref_f4_2x3x4x5.npy", DType::float32, {2, 3, 4, 5}},
    };
    for (const Ref& r : refs) {
        CAPTURE(r.file);
        std::string numpy = slurp(good(r.file));
        std::string ours = npy_header(OutArray{"a", r.shape, r.dtype, nullptr});
        // The dict text, from the '{' after the 10-byte preamble to the closing '}'.
        // (np.save adds spare spaces after it so the shape can grow in place; the
        // padding is not part of the format, so only the text is compared.)
        std::size_t numpy_end = numpy.find('}'), ours_end = ours.find('}');
        REQUIRE(numpy_end != std::string::npos);
        REQUIRE(ours_end != std::string::npos);
        CHECK(ours.substr(0, 8) == numpy.substr(0, 8));  // magic and version 1.0
        CHECK(ours.substr(10, ours_end - 9) == numpy.substr(10, numpy_end - 9));
        CHECK(numpy.size() - std::size_t(numpy.find('\n') + 1) == element_count(r.shape) * dtype_size(r.dtype));
    }
}
