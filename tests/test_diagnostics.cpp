// Diagnostics: entropy, effective keys, one-hot and masked rows, agreement with the
// stages over seeded random problems, and the raw score spread.
// Every expected number is computed here from the stored stages (or by hand), never
// taken from the code that prints it.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "attnscope/analysis/diagnostics.hpp"
#include "attnscope/base/errors.hpp"
#include "attnscope/report/report.hpp"
#include "test_util.hpp"

using namespace attnscope;
using namespace testutil;

namespace {

Array zeros(std::vector<std::size_t> shape) { return arr(shape, std::vector<double>(element_count(shape), 0.0)); }

const RowDiagnostics& row_of(const std::vector<RowDiagnostics>& rows, std::size_t b, std::size_t h, std::size_t i) {
    for (const auto& r : rows)
        if (r.batch == b && r.head == h && r.query == i) return r;
    FAIL("no diagnostics row for batch " << b << ", head " << h << ", query " << i);
    return rows.front();
}

}  // namespace

// ---------------------------------------------------------------------------
// Diagnostics
// ---------------------------------------------------------------------------

TEST_CASE("views: a uniform row has entropy ln n and n effective keys") {
    // W_K = 0: every score is 0, so each row is uniform over its visible keys. Batch item
    // 0 sees all 5 keys, item 1 has keys 1 and 3 padded; the causal variant sees j <= i.
    std::mt19937 rng(7);
    const std::size_t B = 2, T = 5, D = 3;
    for (bool causal : {false, true}) {
        CAPTURE(causal);
        Bundle b = bundle({{"x", random_array(rng, {B, T, D})},
                           {"W_Q", random_array(rng, {D, 2 * D})},
                           {"W_K", zeros({D, 2 * D})},
                           {"W_V", random_array(rng, {D, 2 * D})},
                           {"key_padding_mask", arr({B, T}, {0, 0, 0, 0, 0, 0, 1, 0, 1, 0})}});
        Spec s;
        s.heads = 2;
        s.causal = causal;
        auto c = compute(b, s);
        const auto rows = diagnose(c->view);
        REQUIRE(rows.size() == B * 2 * T);
        for (std::size_t bi = 0; bi < B; ++bi)
            for (std::size_t h = 0; h < 2; ++h)
                for (std::size_t i = 0; i < T; ++i) {
                    CAPTURE(bi);
                    CAPTURE(h);
                    CAPTURE(i);
                    std::size_t n = 0;
                    for (std::size_t j = 0; j < T; ++j) n += c->trace.mask(bi, i, j);
                    const RowDiagnostics& r = row_of(rows, bi, h, i);
                    REQUIRE(n >= 1);
                    CHECK(r.visible_keys == n);
                    CHECK(std::fabs(r.entropy - std::log(double(n))) <= 1e-12);
                    CHECK(std::fabs(r.effective_keys - double(n)) <= 1e-12 * double(n));
                    CHECK(r.nearly_uniform == (n >= 2));
                    CHECK(!r.nearly_one_hot);
                    CHECK(r.max_weight == doctest::Approx(1.0 / double(n)).epsilon(1e-14));
                    CHECK(!r.fully_masked);
                    CHECK(r.score_spread_raw == 0.0);
                    CHECK(r.score_spread_scaled == 0.0);
                    for (std::size_t j = 0; j < T; ++j)
                        if (!c->trace.mask(bi, i, j)) CHECK(r.contribution[j] == 0.0);
                }
    }
}

TEST_CASE("views: a huge score makes a one-hot row") {
    // x = W_Q = W_K = I (n x n): scores = scale * I. With scale 100 the diagonal weight
    // is 1 / (1 + (n-1) e^-100), 1 in double precision; the entropy is ~(n-1)·100·e^-100.
    const std::size_t n = 4;
    Bundle b = bundle({{"x", eye(n)}, {"W_Q", eye(n)}, {"W_K", eye(n)}, {"W_V", eye(n)}});
    Spec s;
    s.scale = 100;
    auto c = compute(b, s);
    const auto rows = diagnose(c->view);
    REQUIRE(rows.size() == n);
    for (std::size_t i = 0; i < n; ++i) {
        CAPTURE(i);
        const RowDiagnostics& r = row_of(rows, 0, 0, i);
        CHECK(r.visible_keys == n);
        CHECK(r.entropy >= 0.0);
        CHECK(r.entropy < 1e-40);
        CHECK(r.effective_keys == doctest::Approx(1.0).epsilon(1e-15));
        CHECK(r.max_weight == doctest::Approx(1.0).epsilon(1e-15));
        CHECK(r.max_key == i);
        CHECK(r.max_contribution_key == i);  // V = I: ||w_ij v_j|| = w_ij
        CHECK(r.nearly_one_hot);
        CHECK(!r.nearly_uniform);
        CHECK(r.score_spread_raw == doctest::Approx(1.0).epsilon(1e-15));  // q·k in {0, 1}
        CHECK(r.score_spread_scaled == doctest::Approx(100.0).epsilon(1e-15));
    }
}

TEST_CASE("views: masked keys count as unseen and a fully masked row is 0, not NaN") {
    // Batch item 0: keys 2 and 3 are PAD; item 1: every key is PAD.
    std::mt19937 rng(11);
    const std::size_t B = 2, T = 4, D = 2;
    Bundle b = bundle({{"x", random_array(rng, {B, T, D})},
                       {"W_Q", random_array(rng, {D, D})},
                       {"W_K", random_array(rng, {D, D})},
                       {"W_V", random_array(rng, {D, D})},
                       {"key_padding_mask", arr({B, T}, {0, 0, 1, 1, 1, 1, 1, 1})}});
    auto c = compute(b, Spec{});
    const auto rows = diagnose(c->view);
    for (std::size_t i = 0; i < T; ++i) {
        CAPTURE(i);
        const RowDiagnostics& r = row_of(rows, 0, 0, i);
        CHECK(r.visible_keys == 2);
        CHECK(!r.fully_masked);
        CHECK(std::fabs(r.row_sum - 1.0) <= 1e-12);
        CHECK(r.contribution[2] == 0.0);
        CHECK(r.contribution[3] == 0.0);
        CHECK(r.entropy <= std::log(2.0) + 1e-12);
        CHECK(r.max_key < 2);
        const RowDiagnostics& z = row_of(rows, 1, 0, i);
        CHECK(z.fully_masked);
        CHECK(z.visible_keys == 0);
        CHECK(z.row_sum == 0.0);
        CHECK(z.entropy == 0.0);
        CHECK(z.effective_keys == 0.0);
        CHECK(!z.nearly_uniform);
        CHECK(!z.nearly_one_hot);
        for (double x :
             {z.entropy, z.effective_keys, z.max_weight, z.row_sum, z.score_spread_raw, z.score_spread_scaled})
            CHECK(std::isfinite(x));
        for (double x : z.contribution) CHECK(x == 0.0);
    }
}

TEST_CASE("views: diagnostics agree with the stages over seeded random problems") {
    for (unsigned seed = 0; seed < 150; ++seed) {
        CAPTURE(seed);
        ViewCase rc = random_view_case(seed);
        auto c = compute(rc.bundle, rc.spec);
        const Trace<double>& tr = c->trace;
        const Dims& d = tr.dims;
        const auto rows = diagnose(c->view);
        REQUIRE(rows.size() == d.B * d.H * d.Tq);
        for (std::size_t b = 0; b < d.B; ++b)
            for (std::size_t h = 0; h < d.H; ++h)
                for (std::size_t i = 0; i < d.Tq; ++i) {
                    CAPTURE(b);
                    CAPTURE(h);
                    CAPTURE(i);
                    const RowDiagnostics& r = row_of(rows, b, h, i);
                    std::size_t visible = 0;
                    double sum = 0, entropy = 0, max_w = -1, lo = kInf, hi = -kInf;
                    std::size_t max_j = 0;
                    for (std::size_t j = 0; j < d.Tk; ++j) {
                        const double w = tr.weights(b, h, i, j);
                        sum += w;
                        if (w > 0) entropy -= w * std::log(w);
                        if (w > max_w) max_w = w, max_j = j;
                        if (tr.mask(b, i, j)) {
                            ++visible;
                            lo = std::min(lo, tr.scores(b, h, i, j));
                            hi = std::max(hi, tr.scores(b, h, i, j));
                        }
                        double norm = 0;  // ||w_ij v_j||, from the stages
                        for (std::size_t k = 0; k < d.Dv; ++k) norm += (w * tr.V(b, h, j, k)) * (w * tr.V(b, h, j, k));
                        norm = std::sqrt(norm);
                        CAPTURE(j);
                        CHECK(std::fabs(r.contribution[j] - norm) <= 1e-12 * (1 + norm));
                    }
                    REQUIRE(r.contribution.size() == d.Tk);
                    CHECK(r.visible_keys == visible);
                    CHECK(r.fully_masked == (visible == 0));
                    if (visible == 0) {
                        CHECK(r.row_sum == 0.0);
                        CHECK(r.entropy == 0.0);
                        CHECK(!r.nearly_uniform);
                        CHECK(!r.nearly_one_hot);
                        continue;
                    }
                    CHECK(std::fabs(r.row_sum - 1.0) <= 1e-12);
                    CHECK(std::fabs(r.row_sum - sum) <= 1e-12);
                    CHECK(std::fabs(r.entropy - entropy) <= 1e-12);
                    CHECK(r.entropy >= 0.0);
                    CHECK(r.entropy <= std::log(double(visible)) + 1e-12);
                    CHECK(r.effective_keys >= 1.0 - 1e-12);
                    CHECK(r.effective_keys <= double(visible) * (1 + 1e-12));
                    CHECK(r.max_weight == max_w);
                    CHECK(r.max_key == max_j);
                    CHECK(tr.mask(b, i, r.max_key));
                    const std::size_t best_c = std::size_t(
                        std::max_element(r.contribution.begin(), r.contribution.end()) - r.contribution.begin());
                    CHECK(r.contribution[r.max_contribution_key] == r.contribution[best_c]);
                    CHECK(std::fabs(r.score_spread_scaled - (hi - lo)) <= 1e-12 * (1 + hi - lo));
                    CHECK(std::fabs(r.score_spread_scaled - tr.scale * r.score_spread_raw) <=
                          1e-12 * (1 + r.score_spread_scaled));
                    // The documented thresholds (diagnostics.hpp), applied to rows of 2+ keys.
                    const bool two = visible >= 2;
                    CHECK(r.nearly_uniform == (two && r.effective_keys >= kUniformFraction * double(visible)));
                    CHECK(r.nearly_one_hot == (two && r.max_weight >= kOneHotWeight));
                }
    }
}

TEST_CASE("views: the raw score spread is the spread of q_i · k_j, whatever the scale") {
    // score_spread_raw is documented as max - min of the visible scores before scaling,
    // so it must not depend on the scale, a zero or negative one included.
    std::mt19937 rng(5);
    const std::size_t T = 4, D = 3;
    Bundle b = bundle({{"x", random_array(rng, {T, D})},
                       {"W_Q", random_array(rng, {D, D})},
                       {"W_K", random_array(rng, {D, D})},
                       {"W_V", random_array(rng, {D, D})}});
    for (double scale : {0.5, 3.0, -2.0, 0.0}) {
        CAPTURE(scale);
        Spec s;
        s.scale = scale;
        auto c = compute(b, s);
        const Trace<double>& tr = c->trace;
        const auto rows = diagnose(c->view);
        for (std::size_t i = 0; i < T; ++i) {
            CAPTURE(i);
            double lo = kInf, hi = -kInf;
            for (std::size_t j = 0; j < T; ++j) {
                double dot = 0;  // q_i · k_j, before scaling
                for (std::size_t k = 0; k < D; ++k) dot += tr.Q(0, 0, i, k) * tr.K(0, 0, j, k);
                lo = std::min(lo, dot), hi = std::max(hi, dot);
            }
            const RowDiagnostics& r = row_of(rows, 0, 0, i);
            CHECK(r.score_spread_raw == doctest::Approx(hi - lo).epsilon(1e-12));
            CHECK(r.score_spread_scaled == doctest::Approx(std::fabs(scale) * (hi - lo)).epsilon(1e-12));
        }
    }
}

TEST_CASE("views: the diagnostics table heads the entropy ent, not H, and gives top w·v's share") {
    // Issue 21: the legend promised the top w·v key's share of the context but the table
    // printed only the key, and headed the entropy "H", the heads' symbol. By hand: W_K = 0
    // makes every row uniform over the 3 keys; W_V = I makes v_j = x_j, of norms 5, 1 and
    // 0; so ||w_ij v_j|| = ||v_j|| / 3 and key 0's share is 5 / (5 + 1 + 0) = 83%.
    std::mt19937 rng(11);
    Bundle b = bundle({{"x", arr({3, 2}, {3, 4, 0, 1, 0, 0})},
                       {"W_Q", random_array(rng, {2, 2})},
                       {"W_K", zeros({2, 2})},
                       {"W_V", arr({2, 2}, {1, 0, 0, 1})}});
    auto c = compute(b, Spec{});
    std::ostringstream out;
    TextOptions o;
    write_diagnostics_text(out, c->view, diagnose(c->view), o);
    const std::string text = out.str();
    INFO(text);
    const auto lines = lines_of(text);
    const auto header = std::find_if(lines.begin(), lines.end(), [](const std::string& l) {
        return l.find("query") != std::string::npos && l.find("eff") != std::string::npos;
    });
    REQUIRE(header != lines.end());
    CHECK(contains(*header, "  ent  "));
    CHECK(contains(*header, "  top w·v %  "));
    CHECK(!contains(*header, "  H  "));
    for (std::size_t i = 0; i < 3; ++i) {
        const std::string& row = *(header + 1 + std::ptrdiff_t(i));
        CAPTURE(row);
        CHECK(contains(row, "k0 83  "));
        CHECK(contains(row, "1.099"));  // ln 3
    }
    CHECK(contains(text, "share of the context"));
}

TEST_CASE("views: a key hidden by a -inf bias is unseen, whatever masked_scores' formula says") {
    // One query, two keys; the float attn_mask hides key 1 (-inf), keeps key 0 (+0.5).
    Bundle b = bundle({{"x", arr({1, 1, 2}, {1, 0})},
                       {"memory", arr({1, 2, 2}, {1, 0, 0, 1})},
                       {"W_Q", eye(2)},
                       {"W_K", eye(2)},
                       {"W_V", eye(2)},
                       {"attn_mask", arr({1, 2}, {0.5, -kInf})}});
    Spec s;
    Compute how;
    how.keep = StageSet().set(kMaskedScores).set(kWeights);  // no bias stage kept
    auto c = compute(b, s, how);
    TraceView v = c->view;
    CHECK(v.has_bias());
    for (StageView& st : v.stages) st.formula = "reworded";
    CHECK(key_seen(v, 0, 0, 0, 0));
    CHECK_FALSE(key_seen(v, 0, 0, 0, 1));
}
