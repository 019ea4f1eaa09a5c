// The check of one's own tensors (analysis/check.hpp): names, axis orders, tolerances and
// the diagnosis, on cases worked out by hand here. (tests/py/test_check.py runs every
// mistake of the catalogue through students' numpy code.)
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "attnscope/analysis/check.hpp"
#include "attnscope/base/errors.hpp"
#include "test_util.hpp"

using namespace attnscope;
using namespace testutil;

namespace {

// Their array holding a reference stage's numbers as they are (our axis order).
Array stage_array(const StageView& s) {
    std::vector<double> v(s.size());
    for (std::size_t k = 0; k < v.size(); ++k) v[k] = s.at(k);
    return arr(s.shape, v, s.name);
}

// The axis order of a stage's own axes, in --axes letters.
std::string own_order(const TraceView& view, const StageView& s) {
    const bool scores_like = stage_info(s.id).over_keys();
    std::string o = view.batched ? "" : "b";
    for (const auto& a : s.axes)
        o += a == "B"                 ? 'b'
             : (a == "H" || a == "G") ? 'h'
             : a == "Tq"              ? (scores_like ? 'q' : 't')
             : a == "Tk"              ? (scores_like ? 'k' : 't')
                                      : 'd';
    if (!view.batched) o.erase(0, 1);
    return o;
}

// x = [[1, 0], [0, 2]], W_Q = W_K = W_V = I, one head: Q = K = V = x, Dk = 2, and the
// scores are x·xᵀ/√2 = [[1, 0], [0, 4]]/√2.
Bundle hand_bundle() {
    return bundle({{"x", arr({2, 2}, {1, 0, 0, 2})}, {"W_Q", eye(2)}, {"W_K", eye(2)}, {"W_V", eye(2)}});
}

CheckResult check_scores(const std::vector<double>& logits, const std::string& dtype = "float64",
                         const CheckOptions& options = {}) {
    const auto c = compute(hand_bundle(), Spec{});
    Bundle theirs = bundle({{"logits", arr({2, 2}, logits)}});
    theirs.arrays["logits"].dtype = dtype;
    return check_tensors(c->view, c->problem, hand_bundle(), theirs, options);
}

const StageCheck& scores_of(const CheckResult& r) {
    return *std::find_if(r.stages.begin(), r.stages.end(), [](auto& x) { return x.id == kScores; });
}

}  // namespace

TEST_CASE("check: stage names and their aliases, case-insensitive") {
    CHECK(stage_of_name("Q") == kQ);
    CHECK(stage_of_name("query") == kQ);
    CHECK(stage_of_name("KEY") == kK);
    CHECK(stage_of_name("v") == kV);
    CHECK(stage_of_name("logits") == kScores);
    CHECK(stage_of_name("Attn_Scores") == kMaskedScores);  // TransformerLens records them after the mask
    for (const char* w : {"attn", "attn_weights", "probs", "p_attn", "attention", "weights", "pattern"})
        CHECK(stage_of_name(w) == kWeights);
    for (const char* w : {"z", "context", "attn_output_per_head"}) CHECK(stage_of_name(w) == kContext);
    for (const char* w : {"out", "attn_output", "output"}) CHECK(stage_of_name(w) == kOutput);
    CHECK(stage_of_name("masked_scores") == kMaskedScores);
    CHECK_FALSE(stage_of_name("attn_probabilities"));
    CHECK_FALSE(stage_of_name("x"));
}

TEST_CASE("check: TransformerLens's hook names, with and without their prefix") {
    CHECK(stage_of_name("blocks.0.attn.hook_q") == kQ);
    CHECK(stage_of_name("blocks.11.attn.hook_k") == kK);
    CHECK(stage_of_name("hook_v") == kV);
    CHECK(stage_of_name("blocks.0.attn.hook_rot_q") == kQRot);
    CHECK(stage_of_name("blocks.0.attn.hook_attn_scores") == kMaskedScores);
    CHECK(stage_of_name("blocks.0.attn.hook_pattern") == kWeights);
    CHECK(stage_of_name("hook_z") == kContext);
    CHECK(stage_of_name("blocks.0.attn.hook_result") == kHeadOutput);
    CHECK(stage_of_name("blocks.0.hook_attn_out") == kOutput);
    CHECK_FALSE(stage_of_name("blocks.0.hook_resid_pre"));
    CHECK_FALSE(stage_of_name("blocks.attn.hook_x"));
}

TEST_CASE("check: the catalogue has every required id, once") {
    std::set<std::string> ids;
    for (const Mistake& m : mistake_catalogue()) {
        CHECK(ids.insert(std::string(m.id)).second);
        CHECK_FALSE(m.explanation.empty());
        CHECK_FALSE(m.fix.empty());
    }
    for (const char* id :
         {"no-scale", "scale-by-dk", "scale-multiplied", "softmax-over-queries", "mask-inverted", "mask-fill-zero",
          "mask-after-softmax", "causal-includes-next", "causal-excludes-self", "causal-upper", "padding-on-queries",
          "weights-transposed", "heads-reshaped-not-transposed", "scores-transposed", "values-are-keys",
          "no-output-projection", "bias-missing", "scale-by-dmodel", "heads-interleaved"})
        CHECK(ids.count(id) == 1);
}

TEST_CASE("check: tolerance follows the dtype") {
    CHECK(default_tolerance("float64").atol == 1e-9);
    CHECK(default_tolerance("json").rtol == 1e-9);
    CHECK(default_tolerance("float32").atol == 2e-5);
    CHECK(default_tolerance("float16").atol == 1e-2);  // not float32's: its rounding alone is 5e-4
    CHECK(default_tolerance("bfloat16").rtol == 1e-1);
    // {dtype} says what theirs was computed in; an array stored coarser keeps its own.
    CHECK(precision_of("float64", "float32") == "float32");
    CHECK(precision_of("json", "float32") == "float32");
    CHECK(precision_of("float16", "float32") == "float16");
    CHECK(precision_of("float32", "float64") == "float32");
    CHECK(precision_of("json", "float64") == "json");
}

TEST_CASE("check: an infinite difference makes the relative error infinite, never small") {
    const double r2 = std::sqrt(2.0), inf = std::numeric_limits<double>::infinity();
    // One cell -inf where the reference has 0 (a broken mask), the rest exact.
    const CheckResult r = check_scores({1 / r2, -inf, 0, 4 / r2});
    const StageCheck& s = scores_of(r);
    CHECK_FALSE(r.matches());
    CHECK(s.nonfinite == 1);
    CHECK(std::isinf(s.max_abs_diff));
    CHECK(std::isinf(s.relative_error));
    CHECK(std::isinf(s.rtol_needed));
    CHECK_FALSE(s.rounding_level);
    const CheckResult nan = check_scores({1 / r2, 0, std::nan(""), 4 / r2});
    CHECK(std::isinf(scores_of(nan).relative_error));
}

TEST_CASE("check: a difference at the rounding level of float32 says so, with the rtol needed") {
    const double r2 = std::sqrt(2.0);
    const std::vector<double> off = {1 / r2, 0, 0, 4 / r2 * (1 + 5e-5)};  // 1.4e-4 off at (1, 1)
    const StageCheck f32 = scores_of(check_scores(off, "float32"));
    CHECK_FALSE(f32.match);
    CHECK(f32.precision == "float32");
    CHECK(f32.rounding_level);
    CHECK(f32.rtol_needed == doctest::Approx(5e-5).epsilon(1e-9));  // |Δ| / |ref|
    // float64 numbers are no rounding at 5e-5; unless {dtype} says they were float32.
    CHECK_FALSE(scores_of(check_scores(off)).rounding_level);
    CheckOptions o;
    o.computed = "float32";
    const StageCheck said = scores_of(check_scores(off, "float64", o));
    CHECK(said.precision == "float32");
    CHECK(said.tol.atol == 2e-5);
    CHECK(said.rounding_level);
    // float16 numbers are held to float16's tolerance: 5e-5 matches.
    CHECK(scores_of(check_scores(off, "float16")).match);
    // {rtol} alone is the absolute tolerance too.
    o = {};
    o.rtol = 6e-5;
    CHECK(check_scores(off, "float32", o).matches());
}

TEST_CASE("check: THEIRS without a stage is refused, never a match") {
    const auto c = compute(hand_bundle(), Spec{});
    const auto refused = [&](const Bundle& theirs) {
        CHECK_THROWS_WITH_AS(check_tensors(c->view, c->problem, hand_bundle(), theirs, {}),
                             doctest::Contains("no stage to compare"), InputError);
    };
    refused(hand_bundle());  // the bundle itself: only inputs
    refused(bundle({}));
}

TEST_CASE("check: unscaled, /Dk and x sqrt(Dk) scores by hand are named") {
    const double r2 = std::sqrt(2.0);
    struct Case {
        std::vector<double> logits;
        const char* id;
        double max_diff;  // |theirs - reference| at (1, 1), the largest
    };
    const Case cases[] = {{{1, 0, 0, 4}, "no-scale", 4 - 4 / r2},
                          {{0.5, 0, 0, 2}, "scale-by-dk", 4 / r2 - 2},
                          {{r2, 0, 0, 4 * r2}, "scale-multiplied", 4 * r2 - 4 / r2}};
    for (const Case& c : cases) {
        CAPTURE(c.id);
        const CheckResult r = check_scores(c.logits);
        REQUIRE(r.first_divergent == kScores);
        REQUIRE_FALSE(r.diagnosis.empty());
        CHECK(r.diagnosis[0].id == c.id);
        const StageCheck& s = *std::find_if(r.stages.begin(), r.stages.end(), [](auto& x) { return x.id == kScores; });
        CHECK(s.given);
        CHECK_FALSE(s.match);
        CHECK(s.axes == "qk");
        CHECK(s.max_abs_diff == doctest::Approx(c.max_diff).epsilon(1e-12));
        CHECK(s.at == std::vector<std::size_t>{1, 1});
        CHECK(s.mismatched == 2);  // the two zeros agree
    }
    // The right scores match; 1e-3 off is no mistake of the catalogue.
    CHECK(check_scores({1 / r2, 0, 0, 4 / r2}).matches());
    const CheckResult noisy = check_scores({1 / r2 + 1e-3, 0, 0, 4 / r2});
    CHECK(noisy.first_divergent == kScores);
    CHECK(noisy.diagnosis.empty());
    CHECK_FALSE(noisy.where.empty());
}

TEST_CASE("check: a reference's own stages match in their own order and in (B, T, H, D)") {
    for (unsigned seed = 0; seed < 40; ++seed) {
        CAPTURE(seed);
        const ViewCase vc = random_view_case(seed);
        const auto c = compute(vc.bundle, vc.spec);
        Bundle theirs;
        theirs.source = "theirs";
        CheckOptions o;
        for (const StageView& s : c->view.stages) {
            if (s.id == kMask) continue;
            theirs.arrays[s.name] = stage_array(s);
            o.axes[s.name] = own_order(c->view, s);
        }
        // Q as (B, Tq, H, Dk) too, named by its alias.
        const StageView& Q = c->view.stage(kQ);
        const std::size_t B = Q.shape[0], H = Q.shape[1], T = Q.shape[2], D = Q.shape[3];
        std::vector<double> bthd(Q.size());
        for (std::size_t b = 0; b < B; ++b)
            for (std::size_t h = 0; h < H; ++h)
                for (std::size_t t = 0; t < T; ++t)
                    for (std::size_t d = 0; d < D; ++d)
                        bthd[((b * T + t) * H + h) * D + d] = Q.at(((b * H + h) * T + t) * D + d);
        theirs.arrays.erase("Q");
        o.axes.erase("Q");
        theirs.arrays["query"] = arr({B, T, H, D}, bthd);
        o.axes["query"] = "bthd";
        const CheckResult r = check_tensors(c->view, c->problem, vc.bundle, theirs, o);
        CHECK(r.matches());
        for (const auto& s : r.stages) CHECK((s.id == kMask || s.id == kHeadOutput ? !s.given || s.match : s.match));
    }
}

TEST_CASE("check: values computed from the keys are named") {
    std::mt19937 rng(5);
    Bundle b = bundle({{"x", random_array(rng, {2, 3, 4})},
                       {"W_Q", random_array(rng, {4, 4})},
                       {"W_K", random_array(rng, {4, 4})},
                       {"W_V", random_array(rng, {4, 4})}});
    Spec spec;
    spec.heads = 2;
    const auto c = compute(b, spec);
    // context = weights · K, by hand from the reference's own weights and K.
    const StageView &W = c->view.stage(kWeights), &K = c->view.stage(kK);
    std::vector<double> z(2 * 2 * 3 * 2, 0.0);
    for (std::size_t bh = 0; bh < 4; ++bh)
        for (std::size_t i = 0; i < 3; ++i)
            for (std::size_t j = 0; j < 3; ++j)
                for (std::size_t d = 0; d < 2; ++d)
                    z[(bh * 3 + i) * 2 + d] += W.at((bh * 3 + i) * 3 + j) * K.at((bh * 3 + j) * 2 + d);
    const CheckResult r = check_tensors(c->view, c->problem, b, bundle({{"z", arr({2, 2, 3, 2}, z)}}), {});
    REQUIRE(r.first_divergent == kContext);
    REQUIRE_FALSE(r.diagnosis.empty());
    CHECK(r.diagnosis[0].id == "values-are-keys");
}

TEST_CASE("check: bad input is refused naming the array") {
    const auto c = compute(hand_bundle(), Spec{});
    auto refused = [&](const Bundle& theirs, const std::vector<std::string>& phrases, CheckOptions o = {}) {
        try {
            check_tensors(c->view, c->problem, hand_bundle(), theirs, o);
            FAIL("accepted");
        } catch (const InputError& e) {
            check_message(e.what(), phrases);
        }
    };
    refused(bundle({{"probabilities", arr({2, 2}, {1, 0, 0, 1}, "probabilities")}}),
            {"test: probabilities", "not a stage name"});
    refused(bundle({{"logits", arr({3, 2}, {1, 0, 0, 1, 0, 0}, "logits")}}),
            {"test: logits", "fits no axis order of scores", "(3, 2)", "qk (2, 2)"});
    refused(bundle({{"q", arr({2, 2}, {1, 0, 0, 2})}, {"Q", arr({2, 2}, {1, 0, 0, 2})}}), {"names the stage Q"});
    refused(bundle({{"x", arr({2, 2}, {1, 0, 0, 3}, "x")}}), {"test: x", "differs from x of test"});
    CheckOptions o;
    o.axes["q"] = "bxd";
    refused(bundle({{"q", arr({2, 2}, {1, 0, 0, 2})}}), {"axes q=bxd", "not an axis order of Q"}, o);
    // Q = (Tq, Dk) = (2, 2): (t, d) and (d, t) are both shapes of Q only with --axes.
    o.axes["q"] = "dt";
    const CheckResult r =
        check_tensors(c->view, c->problem, hand_bundle(), bundle({{"q", arr({2, 2}, {1, 0, 0, 2})}}), o);
    CHECK(r.matches());  // x is symmetric
}
