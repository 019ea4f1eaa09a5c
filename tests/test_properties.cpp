// Properties that must hold for any input, over seeded random shapes (CONTRIBUTING.md, "Tests").
#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>

#include "test_util.hpp"

using namespace attnscope;
using namespace testutil;

namespace {

struct RandomCase {
    Bundle bundle;
    Spec spec;
    std::size_t B, Tq, Tk, Dm, Dkv, H, Dk, Dv;
    bool cross;
};

// A random problem: 1..3 batch items, self or cross, 1..4 heads, biases and W_O at
// random, random key padding (sometimes a whole item) and causal masks.
RandomCase random_case(unsigned seed, bool allow_masks = true) {
    std::mt19937 rng(seed);
    auto pick = [&](std::size_t lo, std::size_t hi) { return std::uniform_int_distribution<std::size_t>(lo, hi)(rng); };
    RandomCase c;
    c.B = pick(1, 3);
    c.Tq = pick(1, 7);
    c.cross = pick(0, 1) == 1;
    c.Tk = c.cross ? pick(1, 7) : c.Tq;
    c.Dm = pick(1, 6);
    c.Dkv = c.cross ? pick(1, 6) : c.Dm;
    c.H = pick(1, 4);
    c.Dk = pick(1, 3);
    c.Dv = pick(1, 3);
    Bundle& b = c.bundle;
    b.source = "random";
    b.arrays["x"] = random_array(rng, {c.B, c.Tq, c.Dm});
    if (c.cross) b.arrays["memory"] = random_array(rng, {c.B, c.Tk, c.Dkv});
    b.arrays["W_Q"] = random_array(rng, {c.Dm, c.H * c.Dk});
    b.arrays["W_K"] = random_array(rng, {c.Dkv, c.H * c.Dk});
    b.arrays["W_V"] = random_array(rng, {c.Dkv, c.H * c.Dv});
    if (pick(0, 1)) b.arrays["b_Q"] = random_array(rng, {c.H * c.Dk});
    if (pick(0, 1)) b.arrays["b_V"] = random_array(rng, {c.H * c.Dv});
    if (pick(0, 1)) b.arrays["W_O"] = random_array(rng, {c.H * c.Dv, pick(1, 5)});
    c.spec.heads = c.H;
    if (allow_masks) {
        if (pick(0, 1)) {
            std::vector<double> pad(c.B * c.Tk);
            for (double& v : pad) v = pick(0, 3) == 0 ? 1.0 : 0.0;
            b.arrays["key_padding_mask"] = arr({c.B, c.Tk}, pad);
        }
        c.spec.causal = pick(0, 1) == 1;
        c.spec.causal_align = pick(0, 1) ? CausalAlign::bottom_right : CausalAlign::top_left;
    }
    return c;
}

}  // namespace

TEST_CASE("property: weight rows sum to 1, masked weights are exactly 0, masked-out rows are 0") {
    for (unsigned seed = 0; seed < 200; ++seed) {
        CAPTURE(seed);
        RandomCase c = random_case(seed);
        auto tr = run<double>(c.bundle, c.spec);
        std::size_t fully = 0;
        for (std::size_t b = 0; b < c.B; ++b)
            for (std::size_t i = 0; i < c.Tq; ++i) {
                bool any = false;
                for (std::size_t j = 0; j < c.Tk; ++j) any |= tr.mask(b, i, j);
                fully += !any;
                for (std::size_t h = 0; h < c.H; ++h) {
                    double sum = 0;
                    for (std::size_t j = 0; j < c.Tk; ++j) {
                        double w = tr.weights(b, h, i, j);
                        REQUIRE(!std::isnan(w));
                        if (!tr.mask(b, i, j)) {
                            REQUIRE(w == 0.0);
                            REQUIRE(tr.masked()(b, h, i, j) == -INFINITY);
                        } else {
                            REQUIRE(tr.masked()(b, h, i, j) == tr.scores(b, h, i, j));
                        }
                        sum += w;
                    }
                    if (any)
                        REQUIRE(sum == doctest::Approx(1.0).epsilon(1e-12));
                    else
                        REQUIRE(sum == 0.0);
                }
            }
        CHECK(tr.fully_masked.size() == fully);
    }
}

TEST_CASE("property: adding a constant to every score of a row changes nothing") {
    // A key bias b_K adds q_i · b_K to every score of row i: the same constant along the
    // row, so softmax (over the row) and everything after it stay the same.
    for (unsigned seed = 0; seed < 100; ++seed) {
        CAPTURE(seed);
        RandomCase c = random_case(seed);
        std::mt19937 rng(seed + 1000);
        Bundle shifted = c.bundle;
        shifted.arrays["b_K"] = random_array(rng, {c.H * c.Dk}, 3.0);
        auto a = run<double>(c.bundle, c.spec);
        auto b = run<double>(shifted, c.spec);
        CHECK(maxdiff(a.weights, b.weights) < 1e-12);
        CHECK(maxdiff(a.output, b.output) < 1e-12);
    }
}

TEST_CASE("property: one head of many equals the single-head formula on its slice") {
    for (unsigned seed = 0; seed < 60; ++seed) {
        CAPTURE(seed);
        RandomCase c = random_case(seed);
        auto multi = run<double>(c.bundle, c.spec);
        for (std::size_t h = 0; h < c.H; ++h) {
            CAPTURE(h);
            // Columns h*D .. (h+1)*D of each projection, and no W_O.
            auto slice = [&](const Array& w, std::size_t D) {
                std::size_t rows = w.shape[0], cols = w.shape[1];
                std::vector<double> v;
                for (std::size_t r = 0; r < rows; ++r)
                    for (std::size_t k = 0; k < D; ++k) v.push_back(w.values[r * cols + h * D + k]);
                return arr({rows, D}, v);
            };
            auto slice1 = [&](const Array& bias, std::size_t D) {
                return arr({D}, std::vector<double>(bias.values.begin() + long(h * D),
                                                    bias.values.begin() + long((h + 1) * D)));
            };
            Bundle one = c.bundle;
            one.arrays.erase("W_O");
            one.arrays["W_Q"] = slice(c.bundle.arrays.at("W_Q"), c.Dk);
            one.arrays["W_K"] = slice(c.bundle.arrays.at("W_K"), c.Dk);
            one.arrays["W_V"] = slice(c.bundle.arrays.at("W_V"), c.Dv);
            if (c.bundle.arrays.count("b_Q")) one.arrays["b_Q"] = slice1(c.bundle.arrays.at("b_Q"), c.Dk);
            if (c.bundle.arrays.count("b_V")) one.arrays["b_V"] = slice1(c.bundle.arrays.at("b_V"), c.Dv);
            Spec s = c.spec;
            s.heads = 1;
            auto single = run<double>(one, s);
            double m = 0;
            for (std::size_t b = 0; b < c.B; ++b)
                for (std::size_t i = 0; i < c.Tq; ++i) {
                    for (std::size_t j = 0; j < c.Tk; ++j)
                        m = std::max(m, std::fabs(multi.weights(b, h, i, j) - single.weights(b, 0, i, j)));
                    for (std::size_t k = 0; k < c.Dv; ++k)
                        m = std::max(m, std::fabs(multi.context(b, h, i, k) - single.context(b, 0, i, k)));
                }
            CHECK(m < 1e-12);
        }
    }
}

TEST_CASE("property: cross-attention with memory == x equals self-attention") {
    for (unsigned seed = 0; seed < 60; ++seed) {
        CAPTURE(seed);
        RandomCase c = random_case(seed);
        if (c.cross) continue;
        Bundle cross = c.bundle;
        cross.arrays["memory"] = c.bundle.arrays.at("x");
        auto a = run<double>(c.bundle, c.spec);
        auto b = run<double>(cross, c.spec);
        CHECK(maxdiff(a.weights, b.weights) == 0.0);
        CHECK(maxdiff(a.output, b.output) == 0.0);
    }
}

TEST_CASE("property: permuting keys with their values leaves the output unchanged") {
    for (unsigned seed = 0; seed < 100; ++seed) {
        CAPTURE(seed);
        RandomCase c = random_case(seed);
        if (!c.cross) continue;
        c.spec.causal = false;  // causal masks depend on key order
        std::mt19937 rng(seed);
        std::vector<std::size_t> perm(c.Tk);
        std::iota(perm.begin(), perm.end(), 0);
        std::shuffle(perm.begin(), perm.end(), rng);
        Bundle p = c.bundle;
        const Array& mem = c.bundle.arrays.at("memory");
        Array& pm = p.arrays.at("memory");
        for (std::size_t b = 0; b < c.B; ++b)
            for (std::size_t j = 0; j < c.Tk; ++j)
                for (std::size_t k = 0; k < c.Dkv; ++k)
                    pm.values[(b * c.Tk + j) * c.Dkv + k] = mem.values[(b * c.Tk + perm[j]) * c.Dkv + k];
        if (c.bundle.arrays.count("key_padding_mask")) {
            const Array& m = c.bundle.arrays.at("key_padding_mask");
            for (std::size_t b = 0; b < c.B; ++b)
                for (std::size_t j = 0; j < c.Tk; ++j)
                    p.arrays.at("key_padding_mask").values[b * c.Tk + j] = m.values[b * c.Tk + perm[j]];
        }
        auto a = run<double>(c.bundle, c.spec);
        auto b = run<double>(p, c.spec);
        CHECK(maxdiff(a.output, b.output) < 1e-12);
    }
}

TEST_CASE("property: zeroing one key vector collapses its score column to 0") {
    for (unsigned seed = 0; seed < 60; ++seed) {
        CAPTURE(seed);
        RandomCase c = random_case(seed);
        if (!c.cross) continue;
        std::size_t j0 = seed % c.Tk;
        Bundle z = c.bundle;
        for (std::size_t b = 0; b < c.B; ++b)
            for (std::size_t k = 0; k < c.Dkv; ++k) z.arrays.at("memory").values[(b * c.Tk + j0) * c.Dkv + k] = 0.0;
        auto tr = run<double>(z, c.spec);  // no b_K in random cases: the key itself is 0
        for (std::size_t b = 0; b < c.B; ++b)
            for (std::size_t h = 0; h < c.H; ++h)
                for (std::size_t i = 0; i < c.Tq; ++i) CHECK(tr.scores(b, h, i, j0) == 0.0);
    }
}

TEST_CASE("property: the scale multiplies the scores, and float32 tracks float64") {
    for (unsigned seed = 0; seed < 60; ++seed) {
        CAPTURE(seed);
        RandomCase c = random_case(seed);
        Spec unit = c.spec, half = c.spec;
        unit.scale = 1.0;
        half.scale = 0.5;
        auto a = run<double>(c.bundle, unit);
        auto b = run<double>(c.bundle, half);
        double m = 0;
        for (std::size_t k = 0; k < a.scores.size(); ++k)
            m = std::max(m, std::fabs(a.scores.data()[k] * 0.5 - b.scores.data()[k]));
        CHECK(m < 1e-12);
        auto f = run<float>(c.bundle, c.spec);
        auto d = run<double>(c.bundle, c.spec);
        CHECK(maxdiff(f.weights, d.weights) < 1e-5);
        CHECK(maxdiff(f.output, d.output) < 2e-4);
    }
}
