// Helpers shared by the core tests: building bundles in memory, running the pipeline,
// and comparing tensors with the largest difference reported (llm.c's "maxdiff").
#pragma once

#include "attnscope/attention.hpp"
#include "attnscope/io.hpp"
#include "attnscope/model.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace testutil {

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
