// Per-row summaries (core/summary.hpp) on rows worked out by hand: ties to the lower key,
// -1 slots, masses by position, the entropy without a logarithm per key.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "attnscope/core/summary.hpp"

using attnscope::Summary;
using attnscope::summary_detail::summarize_row;

namespace {

Summary one_row(std::size_t K, std::size_t bins) {
    Summary s;
    s.B = s.H = s.Tq = 1, s.Tk = 64, s.K = K, s.bins = bins;
    s.spec.topk = K, s.spec.sink_keys = 2, s.spec.local = 2;
    for (auto* v :
         {&s.entropy, &s.effective_keys, &s.max_weight, &s.sink_mass, &s.local_mass, &s.mean_distance, &s.row_sum})
        v->assign(1, 0.0);
    s.max_key.assign(1, 0), s.visible_keys.assign(1, 0);
    s.topk_index.assign(K, 0), s.topk_weight.assign(K, 0.0);
    return s;
}

}  // namespace

TEST_CASE("summary of a row by hand: ties to the lower key, masses, distance, entropy") {
    // query at position 3 sees keys 0..3 with logits ln(1), ln(2), ln(1), ln(4): w = 1/8, 2/8, 1/8, 4/8
    const std::vector<double> x = {0.0, std::log(2.0), 0.0, std::log(4.0)};
    const std::vector<double> w = {0.125, 0.25, 0.125, 0.5};
    Summary s = one_row(6, 4);
    std::vector<double> bins(4, 0.0);
    summarize_row(w.data(), x.data(), nullptr, 0, 4, 3, nullptr, false, s, 0, bins.data());
    CHECK(s.topk_index == std::vector<std::int64_t>{3, 1, 0, 2, -1, -1});  // 0 before 2 (a tie)
    CHECK(s.topk_weight == std::vector<double>{0.5, 0.25, 0.125, 0.125, 0, 0});
    CHECK(s.max_key[0] == 3);
    CHECK(s.visible_keys[0] == 4);
    CHECK(s.sink_mass[0] == doctest::Approx(0.375));   // keys 0, 1
    CHECK(s.local_mass[0] == doctest::Approx(0.625));  // 3 - 2 < k <= 3: keys 2, 3
    CHECK(s.mean_distance[0] == doctest::Approx(0.125 * 3 + 0.25 * 2 + 0.125 * 1));
    const double H = -(0.25 * std::log(0.125) + 0.25 * std::log(0.25) + 0.5 * std::log(0.5));
    CHECK(s.entropy[0] == doctest::Approx(H).epsilon(1e-14));
    CHECK(s.effective_keys[0] == doctest::Approx(std::exp(H)));
    CHECK(s.row_sum[0] == doctest::Approx(1.0));
    // bins: distance 0 -> 0.5; 1 -> 0.125; 2-3 -> 0.25 + 0.125
    CHECK(bins[0] == doctest::Approx(0.5));
    CHECK(bins[1] == doctest::Approx(0.125));
    CHECK(bins[2] == doctest::Approx(0.375));
    CHECK(bins[3] == 0.0);
}

TEST_CASE("summary: hidden keys never enter the top-k; a row with no key is all zero and -1") {
    const std::vector<float> x = {0.f, 0.f, 0.f};
    const std::vector<float> w = {0.5f, 0.f, 0.5f};
    const bool visible[3] = {true, false, true};
    Summary s = one_row(3, 3);
    std::vector<double> bins(3, 0.0);
    summarize_row(w.data(), x.data(), visible, 0, 3, 2, nullptr, false, s, 0, bins.data());
    CHECK(s.topk_index == std::vector<std::int64_t>{0, 2, -1});
    CHECK(s.visible_keys[0] == 2);
    const bool none[3] = {false, false, false};
    const std::vector<float> zero = {0.f, 0.f, 0.f};
    summarize_row(zero.data(), x.data(), none, 0, 3, 2, nullptr, false, s, 0, bins.data());
    CHECK(s.topk_index == std::vector<std::int64_t>{-1, -1, -1});
    CHECK(s.max_key[0] == -1);
    CHECK(s.entropy[0] == 0.0);
    CHECK(s.effective_keys[0] == 0.0);
    CHECK(s.visible_keys[0] == 0);
}
