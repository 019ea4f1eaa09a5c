// Tiny cases whose expected numbers are computed by hand, here in the test.
#include <doctest/doctest.h>

#include "attnscope/base/errors.hpp"
#include "attnscope/core/linear.hpp"
#include "test_util.hpp"

using namespace attnscope;
using namespace testutil;

TEST_CASE("hand: two orthogonal tokens, identity weights") {
    // x = I2, W_Q = W_K = W_V = I2, one head: Q = K = V = x, Dk = 2, scale = 1/sqrt(2).
    // scores = I * a with a = 1/sqrt(2); row 0: [a, 0] -> weights [e^a, 1] / (e^a + 1).
    Bundle b = bundle({{"x", eye(2)}, {"W_Q", eye(2)}, {"W_K", eye(2)}, {"W_V", eye(2)}});
    auto tr = run<double>(b, Spec{});
    const double a = 1.0 / std::sqrt(2.0);
    const double w_self = std::exp(a) / (std::exp(a) + 1.0), w_other = 1.0 / (std::exp(a) + 1.0);
    CHECK(tr.scores(0, 0, 0, 0) == doctest::Approx(a).epsilon(1e-15));
    CHECK(tr.scores(0, 0, 0, 1) == 0.0);
    CHECK(tr.weights(0, 0, 0, 0) == doctest::Approx(w_self).epsilon(1e-15));
    CHECK(tr.weights(0, 0, 0, 1) == doctest::Approx(w_other).epsilon(1e-15));
    CHECK(tr.weights(0, 0, 1, 1) == doctest::Approx(w_self).epsilon(1e-15));
    // context = weights · V = weights (V = I); output = context (no W_O)
    CHECK(tr.context(0, 0, 1, 0) == doctest::Approx(w_other).epsilon(1e-15));
    CHECK(tr.output(0, 0, 0) == doctest::Approx(w_self).epsilon(1e-15));
    CHECK(tr.output(0, 1, 1) == doctest::Approx(w_self).epsilon(1e-15));
    CHECK(tr.mask(0, 0, 1));
    CHECK(tr.fully_masked.empty());
    CHECK(tr.Q.shape() == std::array<std::size_t, 4>{1, 1, 2, 2});
}

TEST_CASE("hand: values, not keys, make the output") {
    // Keys decide where to look, values are what is taken: identical keys give uniform
    // weights, so the output is the mean of the value rows, whatever the keys are.
    // x rows: [1,0], [0,1], [1,1]; W_K = 0 -> all scores 0 -> weights 1/3 each.
    Array x = arr({3, 2}, {1, 0, 0, 1, 1, 1});
    Array wv = arr({2, 1}, {2, 10});  // values: 2, 10, 12 -> mean 8
    Bundle b = bundle({{"x", x}, {"W_Q", eye(2)}, {"W_K", arr({2, 2}, {0, 0, 0, 0})}, {"W_V", wv}});
    auto tr = run<double>(b, Spec{});
    for (std::size_t i = 0; i < 3; ++i) {
        CAPTURE(i);
        for (std::size_t j = 0; j < 3; ++j) CHECK(tr.weights(0, 0, i, j) == doctest::Approx(1.0 / 3).epsilon(1e-15));
        CHECK(tr.output(0, i, 0) == doctest::Approx(8.0).epsilon(1e-15));
    }
    CHECK(tr.output.shape() == std::array<std::size_t, 3>{1, 3, 1});  // Dout = H*Dv = 1
}

TEST_CASE("hand: causal top-left on equal scores gives 1, 1/2, 1/3") {
    Array x = arr({3, 1}, {1, 1, 1});
    Array one = arr({1, 1}, {1});
    Bundle b = bundle({{"x", x}, {"W_Q", one}, {"W_K", one}, {"W_V", arr({1, 1}, {3})}});
    Spec s;
    s.causal = true;
    auto tr = run<double>(b, s);
    const double expected[3][3] = {{1, 0, 0}, {0.5, 0.5, 0}, {1.0 / 3, 1.0 / 3, 1.0 / 3}};
    for (std::size_t i = 0; i < 3; ++i)
        for (std::size_t j = 0; j < 3; ++j) {
            CAPTURE(i);
            CAPTURE(j);
            CHECK(tr.weights(0, 0, i, j) == doctest::Approx(expected[i][j]).epsilon(1e-15));
            CHECK(tr.mask(0, i, j) == (j <= i));
            if (j > i) {
                CHECK(tr.weights(0, 0, i, j) == 0.0);  // exactly zero, not tiny
                CHECK(tr.masked()(0, 0, i, j) == -INFINITY);
                CHECK(tr.scores(0, 0, i, j) == 1.0);  // scores keep the raw value
            }
        }
}

TEST_CASE("hand: causal alignment with Tq != Tk") {
    // Tq = 2 queries over Tk = 3 keys (cross-attention).
    Array x = arr({2, 1}, {1, 1});
    Array mem = arr({3, 1}, {1, 1, 1});
    Array one = arr({1, 1}, {1});
    Bundle b = bundle({{"x", x}, {"memory", mem}, {"W_Q", one}, {"W_K", one}, {"W_V", one}});
    Spec s;
    s.causal = true;
    SUBCASE("top-left: query i sees j <= i") {
        auto tr = run<double>(b, s);
        CHECK(tr.mask(0, 0, 0));
        CHECK(!tr.mask(0, 0, 1));
        CHECK(tr.mask(0, 1, 1));
        CHECK(!tr.mask(0, 1, 2));
        CHECK(tr.weights(0, 0, 1, 0) == doctest::Approx(0.5));
    }
    SUBCASE("bottom-right: query i sits at i + Tk - Tq") {
        s.causal_align = CausalAlign::bottom_right;
        auto tr = run<double>(b, s);
        CHECK(tr.mask(0, 0, 1));
        CHECK(!tr.mask(0, 0, 2));
        CHECK(tr.mask(0, 1, 2));
        CHECK(tr.weights(0, 0, 0, 0) == doctest::Approx(0.5));
        CHECK(tr.weights(0, 0, 1, 2) == doctest::Approx(1.0 / 3));
    }
    SUBCASE("bottom-right with Tq > Tk leaves early queries with no key") {
        Bundle b2 = bundle(
            {{"x", arr({3, 1}, {1, 1, 1})}, {"memory", arr({2, 1}, {1, 1})}, {"W_Q", one}, {"W_K", one}, {"W_V", one}});
        s.causal_align = CausalAlign::bottom_right;
        auto tr = run<double>(b2, s);  // offset Tk - Tq = -1: query 0 sees nothing
        REQUIRE(tr.fully_masked.size() == 1);
        CHECK(tr.fully_masked[0].query == 0);
        CHECK(tr.weights(0, 0, 0, 0) == 0.0);
        CHECK(tr.weights(0, 0, 0, 1) == 0.0);
        CHECK(tr.output(0, 0, 0) == 0.0);
        CHECK(tr.weights(0, 0, 2, 1) == doctest::Approx(0.5));
    }
}

TEST_CASE("hand: padding zeroes a key's column, and all-PAD rows are zero, not NaN") {
    Array x = arr({2, 2, 1}, {1, 2, 3, 4});
    Array one = arr({1, 1}, {1});
    Bundle b = bundle({{"x", x},
                       {"W_Q", one},
                       {"W_K", one},
                       {"W_V", one},
                       {"key_padding_mask", arr({2, 2}, {0, 1, 1, 1})}});  // batch 1: all PAD
    auto tr = run<double>(b, Spec{});
    CHECK(tr.weights(0, 0, 0, 0) == 1.0);
    CHECK(tr.weights(0, 0, 0, 1) == 0.0);
    CHECK(tr.weights(0, 0, 1, 1) == 0.0);
    CHECK(tr.output(0, 1, 0) == 1.0);  // only value x[0][0] = 1 is visible
    REQUIRE(tr.fully_masked.size() == 2);
    CHECK(tr.fully_masked[0].batch == 1);
    for (std::size_t i = 0; i < 2; ++i)
        for (std::size_t j = 0; j < 2; ++j) {
            CHECK(tr.weights(1, 0, i, j) == 0.0);
            CHECK(tr.masked()(1, 0, i, j) == -INFINITY);
        }
    CHECK(tr.output(1, 0, 0) == 0.0);
    CHECK(!std::isnan(tr.output(1, 1, 0)));
}

TEST_CASE("hand: two heads with their own key spaces, W_O and biases") {
    // x = [[1, 0]], Dm = 2; H = 2 heads of width Dk = Dv = 1. One query, one key: every
    // weight is 1, so context = V = x · W_V + b_V, and output = context · W_O + b_O.
    Array x = arr({1, 2}, {1, 0});
    Bundle b = bundle({{"x", x},
                       {"W_Q", eye(2)},
                       {"W_K", eye(2)},
                       {"W_V", arr({2, 2}, {2, 3, 0, 0})},
                       {"b_V", arr({2}, {1, -1})},
                       {"W_O", arr({2, 1}, {1, 10})},
                       {"b_O", arr({1}, {0.5})}});
    Spec s;
    s.heads = 2;
    auto tr = run<double>(b, s);
    CHECK(tr.context(0, 0, 0, 0) == 3.0);  // 1*2 + 1
    CHECK(tr.context(0, 1, 0, 0) == 2.0);  // 1*3 - 1
    CHECK(tr.output(0, 0, 0) == 23.5);     // 3*1 + 2*10 + 0.5
    CHECK(tr.scores(0, 0, 0, 0) == 1.0);   // head 0: q = k = 1, scale 1/sqrt(1)
    CHECK(tr.scores(0, 1, 0, 0) == 0.0);   // head 1: q = k = 0
}

TEST_CASE("hand: a custom scale multiplies the scores") {
    Array x = arr({1, 1}, {2});
    Array one = arr({1, 1}, {1});
    Bundle b = bundle({{"x", x}, {"W_Q", one}, {"W_K", one}, {"W_V", one}});
    Spec s;
    s.scale = 0.25;
    auto tr = run<double>(b, s);
    CHECK(tr.scores(0, 0, 0, 0) == 1.0);  // 2 * 2 * 0.25
}

TEST_CASE("hand: linear() is x · W + b in the math layout and torch's, with row strides") {
    // x (2, 3) = [[1, 2, 3], [4, 5, 6]], stored 4 apart (a padding column of 99);
    // W (3, 2) = [[1, 0], [0, 1], [1, -1]] (in, out), b = [10, 20]:
    // row 0: [1 + 3, 2 - 3] + b = [14, 19]; row 1: [4 + 6, 5 - 6] + b = [20, 19].
    const double x[] = {1, 2, 3, 99, 4, 5, 6, 99};
    const double W[] = {1, 0, 0, 1, 1, -1}, Wt[] = {1, 0, 1, 0, 1, -1}, b[] = {10, 20};
    double y[6] = {-1, -1, -1, -1, -1, -1};  // (2, 2) rows 3 apart; the third column untouched
    linear(x, 2, 4, W, 3, 2, Layout::math, b, y, 3);
    CHECK(std::vector<double>(y, y + 6) == std::vector<double>{14, 19, -1, 20, 19, -1});
    // Wt (2, 3) = Wᵀ, as nn.Linear stores it: the same map; without b, no bias.
    double z[4] = {};
    linear(x, 2, 4, Wt, 3, 2, Layout::torch, static_cast<const double*>(nullptr), z, 2);
    CHECK(std::vector<double>(z, z + 4) == std::vector<double>{4, -1, 10, -1});
    const float xf[] = {1, 2, 3, 4, 5, 6}, Wf[] = {1, 0, 1, 0, 1, -1}, bf[] = {0.5f, -0.5f};
    float yf[4] = {};
    linear(xf, 2, 3, Wf, 3, 2, Layout::torch, bf, yf, 2);
    CHECK(std::vector<float>(yf, yf + 4) == std::vector<float>{4.5f, -1.5f, 10.5f, -1.5f});
}
