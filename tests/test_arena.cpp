// The arena attend() takes its stages and working buffers from (core/arena.hpp): slices
// distinct and aligned, the block reused once everything taken is released, and the
// numbers of a run the same bit for bit with an arena lent or not, run after run.
// Expected values are those of a run without any arena (the memory a stage lives in
// must never change a number), never numbers of the code under test written down.
#include <doctest/doctest.h>

#include <cstdint>
#include <random>

#include "attnscope/core/arena.hpp"
#include "attnscope/core/attention.hpp"
#include "test_util.hpp"

using namespace attnscope;
using namespace testutil;

namespace {
constexpr std::size_t kMiB = std::size_t{1} << 20;

bool aligned(const std::shared_ptr<Placement>& p) { return reinterpret_cast<std::uintptr_t>(p->data()) % 64 == 0; }

// B=1, T=256, Dm=64, H=4: every stage kept is 3 MiB and more in float64, over the 4 MiB
// an arena starts at.
Bundle case_bundle(unsigned seed) {
    std::mt19937 rng(seed);
    return bundle({{"x", random_array(rng, {1, 256, 64})},
                   {"W_Q", random_array(rng, {64, 64}, 0.125)},
                   {"W_K", random_array(rng, {64, 64}, 0.125)},
                   {"W_V", random_array(rng, {64, 64}, 0.125)},
                   {"W_O", random_array(rng, {64, 64}, 0.125)}});
}
}  // namespace

TEST_CASE("core: an Arena gives distinct aligned slices and reuses its block once they are released") {
    Arena a;
    a.reserve(kMiB, 1);  // under 4 MiB: not worth a block
    CHECK(a.capacity() == 0);
    CHECK(a.take(100) == nullptr);
    a.reserve(5 * kMiB, 2);
    if (a.capacity() == 0) return;    // sanitizer build: every allocation stays its own
    CHECK(a.capacity() == 6 * kMiB);  // rounded up to 2 MiB
    auto s1 = a.take(100), s2 = a.take(3 * kMiB);
    REQUIRE(s1);
    REQUIRE(s2);
    CHECK(aligned(s1));
    CHECK(aligned(s2));
    CHECK(static_cast<char*>(s2->data()) >= static_cast<char*>(s1->data()) + 100);
    CHECK(s2->bytes() == 3 * kMiB);
    CHECK(a.used() == Arena::footprint(100) + 3 * kMiB);
    CHECK(a.take(3 * kMiB) == nullptr);  // does not fit: the caller allocates as usual
    a.reserve(64 * kMiB, 2);             // in use: kept
    CHECK(a.capacity() == 6 * kMiB);
    void* first = s1->data();
    s1.reset();
    CHECK(a.take(3 * kMiB) == nullptr);  // s2 alive: nothing is rewound
    s2.reset();
    auto again = a.take(4 * kMiB);
    REQUIRE(again);
    CHECK(again->data() == first);  // everything released: from the start again
}

TEST_CASE("core: attend() with a lent arena keeps every number, and reuses the arena run after run") {
    const Bundle b = case_bundle(7);
    Spec spec;
    spec.heads = 4;
    spec.causal = true;
    const Problem<double> p = make_problem<double>(b, spec);
    Compute plain;
    plain.keep = stages_of(p);
    const Trace<double> expected = attend(p, plain);

    Arena arena;
    Compute lent = plain;
    lent.arena = &arena;
    const void* weights_at = nullptr;
    for (int run = 0; run < 3; ++run) {
        const Trace<double> t = attend(p, lent);
        CHECK(maxdiff(t.Q, expected.Q) == 0);
        CHECK(maxdiff(t.scores, expected.scores) == 0);
        CHECK(maxdiff(t.masked_scores, expected.masked_scores) == 0);
        CHECK(maxdiff(t.weights, expected.weights) == 0);
        CHECK(maxdiff(t.context, expected.context) == 0);
        CHECK(maxdiff(t.head_output, expected.head_output) == 0);
        CHECK(maxdiff(t.output, expected.output) == 0);
        CHECK(t.mask == expected.mask);
        if (arena.capacity() == 0) continue;  // sanitizer build
        if (!weights_at) weights_at = t.weights.data();
        CHECK(t.weights.data() == weights_at);  // the same block, touched once
        CHECK(arena.used() > 6 * kMiB);
    }
    // A trace still alive keeps its part of the block: the next run computes elsewhere.
    if (arena.capacity() == 0) return;
    const std::size_t capacity = arena.capacity();
    const Trace<double> held = attend(p, lent);
    const Trace<double> next = attend(p, lent);
    CHECK(arena.capacity() == capacity);
    CHECK(next.weights.data() != held.weights.data());
    CHECK(maxdiff(next.weights, expected.weights) == 0);
    CHECK(maxdiff(held.output, expected.output) == 0);
}
