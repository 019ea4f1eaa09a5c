// Per-row summaries (core/summary.hpp) on rows worked out by hand: ties to the lower key,
// -1 slots, masses by position, the entropy without a logarithm per key; and the online
// softmax: a row absorbed in blocks, in any cut, gives what it gives in one.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "attnscope/core/summary.hpp"

using attnscope::Summary;
namespace sd = attnscope::summary_detail;

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

// Absorbs keys [0, x.size()) of one row in blocks cut at `cuts`, then finishes it.
template <typename T>
std::vector<double> summarize(Summary& s, const std::vector<T>& x, const bool* visible, long long q,
                              std::vector<std::size_t> cuts, const double* sink = nullptr) {
    sd::RowState st;
    std::vector<double> row_bins(s.bins, 0.0), bins(s.bins, 0.0);
    const sd::RowSlots r = sd::row_slots(s, 0, st, row_bins.data());
    std::vector<T> e(x.size());
    cuts.push_back(x.size());
    std::size_t lo = 0;
    for (std::size_t hi : cuts) {
        sd::absorb(x.data() + lo, visible ? visible + lo : nullptr, lo, hi, q, nullptr, s, r, e.data());
        lo = hi;
    }
    sd::finish(r, sink, s, 0, bins.data());
    return bins;
}

}  // namespace

TEST_CASE("summary of a row by hand: ties to the lower key, masses, distance, entropy") {
    // query at position 3 sees keys 0..3 with logits ln(1), ln(2), ln(1), ln(4): w = 1/8, 2/8, 1/8, 4/8
    const std::vector<double> x = {0.0, std::log(2.0), 0.0, std::log(4.0)};
    for (const auto& cuts : {std::vector<std::size_t>{}, {1}, {2}, {1, 2, 3}}) {
        CAPTURE(cuts.size());
        Summary s = one_row(6, 4);
        const auto bins = summarize(s, x, nullptr, 3, cuts);
        CHECK(s.topk_index == std::vector<std::int64_t>{3, 1, 0, 2, -1, -1});  // 0 before 2 (a tie)
        for (std::size_t k = 0; k < 6; ++k)
            CHECK(s.topk_weight[k] == doctest::Approx(std::vector<double>{0.5, 0.25, 0.125, 0.125, 0, 0}[k]));
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
}

TEST_CASE("summary: hidden keys never enter the top-k; a row with no key is all zero and -1") {
    const float inf = std::numeric_limits<float>::infinity();
    const std::vector<float> x = {0.f, -inf, 0.f};
    const bool visible[3] = {true, false, true};
    Summary s = one_row(3, 3);
    summarize(s, x, visible, 2, {});
    CHECK(s.topk_index == std::vector<std::int64_t>{0, 2, -1});
    CHECK(s.topk_weight == std::vector<double>{0.5, 0.5, 0.0});
    CHECK(s.visible_keys[0] == 2);
    const bool none[3] = {false, false, false};
    const std::vector<float> hidden = {-inf, -inf, -inf};
    summarize(s, hidden, none, 2, {1});
    CHECK(s.topk_index == std::vector<std::int64_t>{-1, -1, -1});
    CHECK(s.max_key[0] == -1);
    CHECK(s.entropy[0] == 0.0);
    CHECK(s.effective_keys[0] == 0.0);
    CHECK(s.visible_keys[0] == 0);
}

TEST_CASE("summary: a block that raises the maximum rescales what came before, by any margin") {
    // The largest logit arrives last: by 3 (rescaled), and by 200 (summed again: exp(200)
    // would leave float's range). Each against the row absorbed in one block.
    for (const double jump : {3.0, 200.0}) {
        CAPTURE(jump);
        std::vector<float> x(100);
        for (std::size_t j = 0; j < x.size(); ++j) x[j] = float(std::sin(double(j)));
        x[97] = float(jump);
        Summary one = one_row(4, 8), cut = one_row(4, 8);
        const auto b1 = summarize(one, x, nullptr, 99, {});
        const auto b2 = summarize(cut, x, nullptr, 99, {17, 40, 96});
        CHECK(cut.topk_index == one.topk_index);
        CHECK(cut.max_key[0] == 97);
        using Field = std::vector<double> Summary::*;
        for (Field v : {&Summary::entropy, &Summary::sink_mass, &Summary::local_mass, &Summary::mean_distance,
                        &Summary::row_sum, &Summary::max_weight})
            CHECK((cut.*v)[0] == doctest::Approx((one.*v)[0]).epsilon(1e-6));
        for (std::size_t k = 0; k < 8; ++k) CHECK(b2[k] == doctest::Approx(b1[k]).epsilon(1e-6));
    }
}

TEST_CASE("summary: a sink's logit joins the denominator only") {
    // keys with logits 0, 0; sink ln 2: weights 1/4, 1/4, the sink 1/2
    const std::vector<double> x = {0.0, 0.0};
    const double sink = std::log(2.0);
    Summary s = one_row(2, 2);
    summarize(s, x, nullptr, 1, {1}, &sink);
    CHECK(s.row_sum[0] == doctest::Approx(0.5));
    CHECK(s.topk_weight[0] == doctest::Approx(0.25));
    CHECK(s.topk_weight[1] == doctest::Approx(0.25));
    CHECK(s.topk_index == std::vector<std::int64_t>{0, 1});
    CHECK(s.entropy[0] == doctest::Approx(std::log(2.0)));  // of w / Σ w, as --diagnose
    CHECK(s.sink_mass[0] == doctest::Approx(0.5));          // keys 0 and 1 are the sink keys
}

TEST_CASE("summary: a row with a NaN or an infinity among its logits is NaN, -1, and not finite") {
    // Issue 21: such a row reported entropy 0 and effective_keys 1 (a one-hot row's) while
    // row_sum was NaN. Its dense weights are NaN (softmax of a NaN, or of inf - inf).
    const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
    const std::vector<std::vector<double>> rows = {
        {0.0, nan, 1.0, 0.5},      // one NaN among finite logits
        {nan, nan, 1.0, 0.5},      // a first block of NaNs only (cut at 2): no largest logit in it
        {nan, nan, nan, nan},      // nothing but NaN
        {0.0, inf, 1.0, 0.5},      // +inf: inf - inf
        {-inf, -inf, -inf, -inf},  // visible keys whose logits are all -inf: 0 / 0
    };
    for (std::size_t k = 0; k < rows.size(); ++k)
        for (const auto& cuts : {std::vector<std::size_t>{}, {2}, {1, 3}}) {
            CAPTURE(k);
            CAPTURE(cuts.size());
            Summary s = one_row(3, 4);
            const auto bins = summarize(s, rows[k], nullptr, 3, cuts);
            CHECK(std::isnan(s.entropy[0]));
            CHECK(std::isnan(s.effective_keys[0]));
            CHECK(std::isnan(s.max_weight[0]));
            CHECK(std::isnan(s.row_sum[0]));
            CHECK(std::isnan(s.sink_mass[0]));
            CHECK(std::isnan(s.local_mass[0]));
            CHECK(std::isnan(s.mean_distance[0]));
            CHECK(s.max_key[0] == -1);
            CHECK(s.topk_index == std::vector<std::int64_t>{-1, -1, -1});
            for (double w : s.topk_weight) CHECK(std::isnan(w));
            CHECK(s.visible_keys[0] == 4);
            CHECK(!s.finite(0));
            CHECK(!s.counted(0));
            for (double v : bins) CHECK(v == 0.0);  // nothing of it in the head's profile
        }
    // float: the vectorised sums of the fast path
    const std::vector<float> f = {0.f, std::numeric_limits<float>::quiet_NaN(), 1.f, 0.5f};
    Summary s = one_row(3, 4);
    summarize(s, f, nullptr, 3, {});
    CHECK(std::isnan(s.entropy[0]));
    CHECK(s.max_key[0] == -1);
    // a sink logit that is NaN
    const std::vector<double> x = {0.0, 1.0};
    summarize(s, x, nullptr, 1, {}, &nan);
    CHECK(std::isnan(s.row_sum[0]));
    CHECK(!s.finite(0));
    // and a finite row stays finite
    summarize(s, x, nullptr, 1, {});
    CHECK(s.finite(0));
    CHECK(s.row_sum[0] == doctest::Approx(1.0));
}
