// Helpers shared by the core tests: building bundles in memory, running the pipeline,
// and comparing tensors with the largest difference reported (llm.c's "maxdiff").
#pragma once

#include "attnscope/core/attention.hpp"
#include "attnscope/io/read.hpp"
#include "attnscope/io/write.hpp"
#include "attnscope/model/model.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <system_error>
#include <vector>

namespace testutil {

// A fresh directory under the system temp directory, removed with its contents.
struct TempDir {
    std::filesystem::path path;
    TempDir() {
        std::string t = (std::filesystem::temp_directory_path() / "attnscope-test-XXXXXX").string();
        REQUIRE(::mkdtemp(t.data()) != nullptr);
        path = t;
    }
    ~TempDir() {
        std::error_code ec;
        std::filesystem::remove_all(path, ec);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    std::string operator/(const std::string& name) const { return (path / name).string(); }
    std::set<std::string> entries() const { return entries_of(path.string()); }
    // The names in directory `dir` (none when it does not exist).
    static std::set<std::string> entries_of(const std::string& dir) {
        std::set<std::string> names;
        std::error_code ec;
        for (const auto& e : std::filesystem::directory_iterator(dir, ec)) names.insert(e.path().filename().string());
        return names;
    }
};

using attnscope::Array;
using attnscope::Bundle;

inline Array arr(std::vector<std::size_t> shape, std::vector<double> values, std::string name = "test") {
    Array a;
    a.shape = std::move(shape);
    a.values = std::move(values);
    a.dtype = "float64";
    a.origin = "test: " + name;
    REQUIRE(a.values.size() == attnscope::element_count(a.shape));
    return a;
}

inline Array random_array(std::mt19937& rng, std::vector<std::size_t> shape, double scale = 1.0) {
    std::normal_distribution<double> n(0.0, scale);
    std::vector<double> v(attnscope::element_count(shape));
    for (double& x : v) x = n(rng);
    return arr(std::move(shape), std::move(v));
}

inline Bundle bundle(std::initializer_list<std::pair<const std::string, Array>> arrays) {
    Bundle b;
    b.source = "test";
    b.arrays = arrays;
    return b;
}

template <typename T>
attnscope::Trace<T> run(const Bundle& b, const attnscope::Spec& spec) {
    return attnscope::attend(attnscope::make_problem<T>(b, spec));
}

// Largest |a - b| over two equally shaped tensors; equal infinities count as 0, and a
// NaN on one side only counts as infinite.
template <typename A, typename B>
double maxdiff(const A& a, const B& b) {
    REQUIRE(a.size() == b.size());
    double m = 0;
    auto ia = a.begin();
    auto ib = b.begin();
    for (; ia != a.end(); ++ia, ++ib) {
        double x = double(*ia), y = double(*ib);
        if (x == y || (std::isnan(x) && std::isnan(y))) continue;
        double d = std::fabs(x - y);
        m = std::max(m, std::isnan(d) ? std::numeric_limits<double>::infinity() : d);
    }
    return m;
}

}  // namespace testutil
