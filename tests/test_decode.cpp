// KV-cache decoding (core/decode.hpp): properties over seeded random problems. Every
// step's rows equal the same rows of one full causal attend(); the cache grows by one
// position per step and the prefix is never projected again.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "attnscope/core/decode.hpp"
#include "test_util.hpp"

using namespace attnscope;
using namespace testutil;

namespace {

struct DecodeCase {
    Bundle bundle;
    Spec spec;
    std::size_t B, T, H, G, Dk, Dv;
};

// A random causal self-attention problem with any of the modern variants.
DecodeCase random_decode_case(unsigned seed) {
    std::mt19937 rng(seed);
    auto pick = [&](std::size_t lo, std::size_t hi) { return std::uniform_int_distribution<std::size_t>(lo, hi)(rng); };
    DecodeCase c;
    c.B = pick(1, 3);
    c.T = pick(1, 9);
    const std::size_t Dm = pick(1, 6);
    c.G = pick(1, 2);
    c.H = c.G * pick(1, 3);
    c.Dk = 2 * pick(1, 3);
    c.Dv = pick(1, 3);
    Bundle& b = c.bundle;
    b.source = "random";
    b.arrays["x"] = random_array(rng, {c.B, c.T, Dm});
    b.arrays["W_Q"] = random_array(rng, {Dm, c.H * c.Dk});
    b.arrays["W_K"] = random_array(rng, {Dm, c.G * c.Dk});
    b.arrays["W_V"] = random_array(rng, {Dm, c.G * c.Dv});
    if (pick(0, 1)) b.arrays["b_K"] = random_array(rng, {c.G * c.Dk});
    if (pick(0, 1)) b.arrays["W_O"] = random_array(rng, {c.H * c.Dv, pick(1, 4)});
    if (pick(0, 1)) b.arrays["sinks"] = random_array(rng, {c.H});
    if (pick(0, 1)) {
        std::vector<double> pad(c.B * c.T);
        for (double& v : pad) v = pick(0, 3) == 0 ? 1.0 : 0.0;
        b.arrays["key_padding_mask"] = arr({c.B, c.T}, pad);
    }
    c.spec.heads = c.H;
    c.spec.kv_heads = c.G;
    c.spec.causal = true;
    if (pick(0, 1)) c.spec.rope = Rope{};
    c.spec.alibi = pick(0, 1) == 1;
    if (pick(0, 1)) c.spec.window = pick(1, 4);
    if (pick(0, 2) == 0) c.spec.softcap = 1.5;
    return c;
}

double max_abs(double a, double b) { return std::fabs(a - b); }

}  // namespace

TEST_CASE("decode: every step equals row t of the full causal attend(), for every prefill length") {
    for (unsigned seed = 0; seed < 60; ++seed) {
        CAPTURE(seed);
        const DecodeCase c = random_decode_case(seed);
        const Problem<double> p = make_problem<double>(c.bundle, c.spec);
        const Trace<double> full = attend(p);  // computed here, not by decode()
        for (std::size_t P = 0; P <= c.T; ++P) {
            CAPTURE(P);
            Decoder<double> dec(p);
            const Trace<double> pre = dec.prefill(P);
            double worst = 0;
            for (std::size_t b = 0; b < c.B && P; ++b)
                for (std::size_t h = 0; h < c.H; ++h)
                    for (std::size_t i = 0; i < P; ++i)
                        for (std::size_t j = 0; j < P; ++j)
                            worst = std::max(worst, max_abs(pre.weights(b, h, i, j), full.weights(b, h, i, j)));
            for (std::size_t t = P; t < c.T; ++t) {
                const DecodeStep<double> s = dec.step();
                REQUIRE(s.t == t);
                REQUIRE(s.cache_length == t + 1);
                for (std::size_t b = 0; b < c.B; ++b) {
                    for (std::size_t h = 0; h < c.H; ++h) {
                        double sum = s.sink_weight.size() ? s.sink_weight(b, h, 0) : 0.0;
                        for (std::size_t j = 0; j <= t; ++j) {
                            worst = std::max(worst, max_abs(s.weights(b, h, 0, j), full.weights(b, h, t, j)));
                            REQUIRE(s.mask(b, 0, j) == p.mask.visible(b, t, j));
                            if (!s.mask(b, 0, j)) REQUIRE(s.weights(b, h, 0, j) == 0.0);
                            sum += s.weights(b, h, 0, j);
                        }
                        const bool seen =
                            std::find(s.fully_masked.begin(), s.fully_masked.end(), b) == s.fully_masked.end();
                        REQUIRE(std::fabs(sum - (seen || s.sink_weight.size() ? 1.0 : 0.0)) < 1e-12);
                        for (std::size_t k = 0; k < c.Dv; ++k)
                            worst = std::max(worst, max_abs(s.context(b, h, 0, k), full.context(b, h, t, k)));
                    }
                    for (std::size_t k = 0; k < s.output.shape(2); ++k)
                        worst = std::max(worst, max_abs(s.output(b, 0, k), full.output(b, t, k)));
                }
            }
            CAPTURE(worst);
            REQUIRE(worst <= 1e-12);
        }
    }
}

TEST_CASE("decode: decode() reports each step's difference from the full run, and it is rounding") {
    for (unsigned seed = 100; seed < 130; ++seed) {
        CAPTURE(seed);
        const DecodeCase c = random_decode_case(seed);
        const Problem<double> p = make_problem<double>(c.bundle, c.spec);
        const DecodeRun<double> run = decode(p, c.T / 2);
        REQUIRE(run.steps.size() == c.T - c.T / 2);
        REQUIRE(run.max_diff <= 1e-12);
        const Problem<float> pf = make_problem<float>(c.bundle, c.spec);
        REQUIRE(decode(pf, c.T / 2).max_diff <= 1e-5);
    }
}

TEST_CASE("decode: the cache grows by one position per step; the prefix is projected once") {
    const DecodeCase c = random_decode_case(7);
    Problem<double> p = make_problem<double>(c.bundle, c.spec);
    const std::size_t P = c.T / 2;
    const Trace<double> full = attend(p);
    Decoder<double> dec(p);
    dec.prefill(P);
    CHECK(dec.projected_tokens() == P);
    CHECK(dec.cache().length() == P);
    // The steps must not read the prefix again: poison its inputs.
    for (std::size_t b = 0; b < c.B; ++b)
        for (std::size_t t = 0; t < P; ++t)
            for (std::size_t k = 0; k < p.x.shape(2); ++k) p.x(b, t, k) = std::numeric_limits<double>::quiet_NaN();
    for (std::size_t t = P; t < c.T; ++t) {
        const DecodeStep<double> s = dec.step();
        CHECK(dec.projected_tokens() == t + 1);  // one token per step
        CHECK(dec.cache().length() == t + 1);
        CHECK(s.k_cache_shape == std::array<std::size_t, 4>{c.B, c.G, t + 1, c.Dk});
        CHECK(s.v_cache_shape == std::array<std::size_t, 4>{c.B, c.G, t + 1, c.Dv});
        for (std::size_t k = 0; k < s.output.shape(2); ++k)
            REQUIRE(std::fabs(s.output(0, 0, k) - full.output(0, t, k)) <= 1e-12);
    }
    CHECK(dec.cache().copied_positions() == 0);  // reserved for the sequence: never grew
}

TEST_CASE("KVCache: appends without quadratic copying, keys and values in order per (b, g)") {
    const std::size_t B = 2, G = 3, Dk = 2, Dv = 1, N = 1000;
    KVCache<double> cache(B, G, Dk, Dv);
    std::vector<double> k(B * G * Dk), v(B * G * Dv);
    for (std::size_t n = 0; n < N; ++n) {
        for (std::size_t i = 0; i < k.size(); ++i) k[i] = double(n * 100 + i);
        for (std::size_t i = 0; i < v.size(); ++i) v[i] = -double(n * 100 + i);
        cache.append(k.data(), G * Dk, v.data(), G * Dv);
        REQUIRE(cache.length() == n + 1);
    }
    CHECK(cache.copied_positions() <= 2 * N);  // doubling: each position moves O(1) times
    CHECK(cache.capacity() >= N);
    for (std::size_t b = 0; b < B; ++b)
        for (std::size_t g = 0; g < G; ++g)
            for (std::size_t n = 0; n < N; n += 97) {
                CHECK(cache.keys(b, g)[n * Dk + 1] == double(n * 100 + (b * G + g) * Dk + 1));
                CHECK(cache.values(b, g)[n * Dv] == -double(n * 100 + (b * G + g) * Dv));
            }
}

TEST_CASE("decode: the emulated bugs drift, each in its own way") {
    DecodeCase c = random_decode_case(3);
    c.spec.rope = Rope{};
    c.spec.window.reset();
    c.bundle.arrays.erase("key_padding_mask");
    const Problem<double> p = make_problem<double>(c.bundle, c.spec);
    for (DecodeBug bug : {DecodeBug::rope_position_zero, DecodeBug::attend_before_append, DecodeBug::off_by_one}) {
        CAPTURE(bug_name(bug));
        CHECK(find_bug(bug_name(bug)) == bug);
        const DecodeRun<double> run = decode(p, 0, bug);
        for (const auto& s : run.steps) {
            CHECK(s.query_position == (bug == DecodeBug::off_by_one ? (long long)s.t - 1 : (long long)s.t));
            if (bug != DecodeBug::rope_position_zero)
                for (std::size_t b = 0; b < c.B; ++b) {
                    CHECK_FALSE(s.mask(b, 0, s.t));  // the query cannot see its own key
                    for (std::size_t h = 0; h < c.H; ++h) CHECK(s.weights(b, h, 0, s.t) == 0.0);
                }
        }
        if (c.T > 1) CHECK(run.max_diff > 1e-6);
    }
    CHECK_FALSE(find_bug("typo").has_value());
}

TEST_CASE("decode: refuses what it cannot run, before computing") {
    DecodeCase c = random_decode_case(5);
    const Problem<double> p = make_problem<double>(c.bundle, c.spec);
    CHECK_THROWS_AS(check_decodable(p, c.T + 1, DecodeBug::none), UsageError);
    CHECK_NOTHROW(check_decodable(p, c.T, DecodeBug::none));
    Spec no_rope = c.spec;
    no_rope.rope.reset();
    const Problem<double> q = make_problem<double>(c.bundle, no_rope);
    CHECK_THROWS_AS(check_decodable(q, 0, DecodeBug::rope_position_zero), UsageError);
    Spec not_causal = c.spec;
    not_causal.causal = false;
    CHECK_THROWS_AS(decode(make_problem<double>(c.bundle, not_causal), 0), UsageError);
    Bundle cross = c.bundle;
    cross.arrays["memory"] = cross.arrays["x"];
    CHECK_THROWS_AS(decode(make_problem<double>(cross, c.spec), 0), UsageError);
}
