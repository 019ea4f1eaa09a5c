// The experiments the views are meant for: --zero-key and --temperature.
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

// ---------------------------------------------------------------------------
// Experiments
// ---------------------------------------------------------------------------

TEST_CASE("views: zero_key sets key j to 0, so its score column is exactly 0 before masking") {
    for (unsigned seed = 0; seed < 60; ++seed) {
        CAPTURE(seed);
        ViewCase rc = random_view_case(seed);
        std::mt19937 rng(seed);
        const Dims d0 = make_problem<double>(rc.bundle, rc.spec).dims;
        rc.bundle.arrays["b_K"] = random_array(rng, {d0.H * d0.Dk});  // the bias is zeroed too
        const std::size_t j = seed % d0.Tk;
        CAPTURE(j);
        const auto base = compute(rc.bundle, rc.spec);
        Spec s = rc.spec;
        s.zero_key = j;
        const auto c = compute(rc.bundle, s);
        const Trace<double>& tr = c->trace;
        const Trace<double>& ref = base->trace;
        const Dims& d = tr.dims;
        CHECK(contains(c->view.stage("K").formula, "--zero-key"));
        for (std::size_t b = 0; b < d.B; ++b)
            for (std::size_t h = 0; h < d.H; ++h) {
                for (std::size_t k = 0; k < d.Dk; ++k) CHECK(tr.K(b, h, j, k) == 0.0);
                for (std::size_t i = 0; i < d.Tq; ++i) {
                    CAPTURE(b);
                    CAPTURE(h);
                    CAPTURE(i);
                    CHECK(tr.scores(b, h, i, j) == 0.0);
                    CHECK(tr.masked()(b, h, i, j) == (tr.mask(b, i, j) ? 0.0 : -kInf));
                    for (std::size_t k = 0; k < d.Tk; ++k)
                        if (k != j) CHECK(tr.scores(b, h, i, k) == ref.scores(b, h, i, k));  // other keys untouched
                }
            }
        CHECK(maxdiff(tr.V, ref.V) == 0.0);  // values are the payload, not touched
    }
}

TEST_CASE("views: temperature T scales the scores by 1/(sqrt(Dk) T)") {
    for (unsigned seed = 0; seed < 40; ++seed) {
        CAPTURE(seed);
        ViewCase rc = random_view_case(seed);
        rc.spec.scale.reset();
        for (double t : {0.25, 1.0, 2.0, 10.0}) {
            CAPTURE(t);
            Spec s = rc.spec;
            s.temperature = t;
            const auto c = compute(rc.bundle, s);
            const double want = 1.0 / (std::sqrt(double(c->trace.dims.Dk)) * t);
            CHECK(c->trace.scale == doctest::Approx(want).epsilon(1e-15));
            CHECK(c->view.scale == doctest::Approx(want).epsilon(1e-15));
            Spec explicit_scale = rc.spec;
            explicit_scale.scale = want;
            const auto e = compute(rc.bundle, explicit_scale);
            const double md = maxdiff(c->trace.weights, e->trace.weights);
            CAPTURE(md);
            CHECK(maxdiff(c->trace.scores, e->trace.scores) <= 1e-12);
            CHECK(md <= 1e-12);
            if (t != 1.0) CHECK(contains(c->view.scale_source, "temperature"));
        }
        Spec bad = rc.spec;
        for (double t : {0.0, -1.0, std::nan(""), double(kInf)}) {
            CAPTURE(t);
            bad.temperature = t;
            CHECK_THROWS_AS(make_problem<double>(rc.bundle, bad), UsageError);
        }
    }
}
