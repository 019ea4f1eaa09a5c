// explain_stage: shapes with their numbers, visible and hidden pairs, score ranges.
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

std::string tup(std::initializer_list<std::size_t> dims) {
    std::string s = "(";
    for (std::size_t d : dims) s += (s.size() > 1 ? ", " : "") + std::to_string(d);
    return s + ")";
}

std::string joined(const std::vector<std::string>& lines) {
    std::string s;
    for (const auto& l : lines) s += l + "\n";
    return s;
}

}  // namespace

// ---------------------------------------------------------------------------
// Explanations
// ---------------------------------------------------------------------------

TEST_CASE("views: explain_stage shows the shapes with their numbers") {
    std::mt19937 rng(8);
    struct Case {
        const char* name;
        std::size_t B, Tq, Tk, Dm, Dkv, H, Dk, Dv, Dout;
        bool batched, cross, w_o;
    };
    const Case cases[] = {
        {"2-D self, 2 heads", 1, 6, 6, 8, 8, 2, 4, 4, 8, false, false, false},
        {"batched self, 2 heads, W_O", 2, 6, 6, 8, 8, 2, 4, 4, 5, true, false, true},
        {"batched cross, 3 heads, Dk != Dv", 3, 2, 5, 4, 6, 3, 2, 3, 9, true, true, false},
    };
    for (const Case& k : cases) {
        CAPTURE(k.name);
        Bundle b;
        b.source = "test";
        b.arrays["x"] = k.batched ? random_array(rng, {k.B, k.Tq, k.Dm}) : random_array(rng, {k.Tq, k.Dm});
        if (k.cross)
            b.arrays["memory"] = k.batched ? random_array(rng, {k.B, k.Tk, k.Dkv}) : random_array(rng, {k.Tk, k.Dkv});
        b.arrays["W_Q"] = random_array(rng, {k.Dm, k.H * k.Dk});
        b.arrays["W_K"] = random_array(rng, {k.Dkv, k.H * k.Dk});
        b.arrays["W_V"] = random_array(rng, {k.Dkv, k.H * k.Dv});
        if (k.w_o) b.arrays["W_O"] = random_array(rng, {k.H * k.Dv, k.Dout});
        Spec s;
        s.heads = k.H;
        auto c = compute(b, s);
        const TraceView& v = c->view;
        // (B, ...) for a batched input, (...) for a 2-D one.
        auto shape = [&](std::initializer_list<std::size_t> rest) {
            std::string t = tup(rest);
            return k.batched ? "(" + std::to_string(k.B) + ", " + t.substr(1) : t;
        };
        const std::string src = k.cross ? "memory" : "x";
        const std::string q = joined(explain_stage(v, v.stage("Q")));
        CHECK(contains(q, "x · W_Q: " + shape({k.Tq, k.Dm}) + " @ " + tup({k.Dm, k.H * k.Dk}) + " -> " +
                              shape({k.Tq, k.H * k.Dk})));
        CHECK(contains(q, "H = " + std::to_string(k.H) + " heads of Dk = " + std::to_string(k.Dk)));
        CHECK(contains(q, "-> " + shape({k.H, k.Tq, k.Dk}) + "."));
        const std::string kk = joined(explain_stage(v, v.stage("K")));
        CHECK(contains(kk, src + " · W_K: " + shape({k.Tk, k.Dkv}) + " @ " + tup({k.Dkv, k.H * k.Dk}) + " -> " +
                               shape({k.Tk, k.H * k.Dk})));
        CHECK(contains(kk, k.cross ? "encoder memory" : "same sequence"));
        const std::string vv = joined(explain_stage(v, v.stage("V")));
        CHECK(contains(vv, src + " · W_V: " + shape({k.Tk, k.Dkv}) + " @ " + tup({k.Dkv, k.H * k.Dv}) + " -> " +
                               shape({k.Tk, k.H * k.Dv})));
        CHECK(contains(vv, "-> " + shape({k.H, k.Tk, k.Dv}) + "."));
        const std::string sc = joined(explain_stage(v, v.stage("scores")));
        CHECK(contains(sc, "per head " + tup({k.Tq, k.Dk}) + " @ " + tup({k.Dk, k.Tk}) + " -> " + tup({k.Tq, k.Tk})));
        CHECK(contains(sc, "all heads " + shape({k.H, k.Tq, k.Dk}) + " @ " + shape({k.H, k.Dk, k.Tk}) + " -> " +
                               shape({k.H, k.Tq, k.Tk})));
        CHECK(contains(sc, "Dk = " + std::to_string(k.Dk)));
        const std::string w = joined(explain_stage(v, v.stage("weights")));
        CHECK(contains(w, "along each row of " + std::to_string(k.Tk) + " keys"));
        const std::string cx = joined(explain_stage(v, v.stage("context")));
        CHECK(contains(cx, "per head " + tup({k.Tq, k.Tk}) + " @ " + tup({k.Tk, k.Dv}) + " -> " + tup({k.Tq, k.Dv})));
        CHECK(contains(cx, "all heads " + shape({k.H, k.Tq, k.Tk}) + " @ " + shape({k.H, k.Tk, k.Dv}) + " -> " +
                               shape({k.H, k.Tq, k.Dv})));
        const std::string out = joined(explain_stage(v, v.stage("output")));
        const std::string concat = shape({k.Tq, k.H * k.Dv});
        CHECK(contains(out, shape({k.H, k.Tq, k.Dv}) + " -> " + concat));
        if (k.w_o) CHECK(contains(out, concat + " @ " + tup({k.H * k.Dv, k.Dout}) + " -> " + shape({k.Tq, k.Dout})));
    }
}

TEST_CASE("views: explain_stage counts the visible and hidden (query, key) pairs") {
    std::mt19937 rng(9);
    for (unsigned seed = 0; seed < 40; ++seed) {
        CAPTURE(seed);
        ViewCase rc = random_view_case(seed);
        auto c = compute(rc.bundle, rc.spec);
        const Trace<double>& tr = c->trace;
        const Dims& d = tr.dims;
        std::size_t visible = 0;
        for (std::size_t b = 0; b < d.B; ++b)
            for (std::size_t i = 0; i < d.Tq; ++i)
                for (std::size_t j = 0; j < d.Tk; ++j) visible += tr.mask(b, i, j);
        const std::size_t all = d.B * d.Tq * d.Tk;
        const std::string m = joined(explain_stage(c->view, c->view.stage("mask")));
        INFO(m);
        CHECK(contains(m, std::to_string(visible) + " of " + std::to_string(all) + " (query, key) pairs are visible, " +
                              std::to_string(all - visible) + " hidden."));
        const bool pad = rc.bundle.arrays.count("key_padding_mask") > 0;
        const std::string from = pad && rc.spec.causal ? "key padding AND causal"
                                 : pad                 ? "key padding"
                                 : rc.spec.causal      ? "causal"
                                                       : "nothing";
        CHECK(contains(m, "from " + from));
        if (!tr.fully_masked.empty())
            CHECK(contains(m, std::to_string(tr.fully_masked.size()) + " query row(s) see no key at all"));
        else
            CHECK(!contains(m, "see no key at all"));
    }
}

TEST_CASE("views: explain_stage gives the score range before and after scaling") {
    // scores = scale · (q · k): the range before scaling is [min, max] of q · k, an
    // interval with min <= max whatever the sign of the scale, and never NaN (a scale of 0
    // leaves q · k unknown from the scores alone).
    std::mt19937 rng(10);
    Bundle b = bundle({{"x", random_array(rng, {4, 2})},
                       {"W_Q", random_array(rng, {2, 2})},
                       {"W_K", random_array(rng, {2, 2})},
                       {"W_V", random_array(rng, {2, 2})}});
    for (double scale : {0.5, 2.0, -1.0, 0.0}) {
        CAPTURE(scale);
        Spec s;
        s.scale = scale;
        auto c = compute(b, s);
        const std::string text = joined(explain_stage(c->view, c->view.stage("scores")));
        INFO(text);
        CHECK(!contains(text, "nan"));
        const std::size_t at = text.find("before scaling [");
        if (scale == 0.0 && at == std::string::npos) {  // q · k cannot be read back from scores of 0
            CHECK(contains(text, "before scaling unknown"));
            continue;
        }
        REQUIRE(at != std::string::npos);
        const double lo = number_after(text, "before scaling ["), hi = number_after(text, ", ", at);
        CHECK(lo <= hi);
        double dlo = kInf, dhi = -kInf;
        for (std::size_t i = 0; i < 4; ++i)
            for (std::size_t j = 0; j < 4; ++j) {
                double dot = 0;
                for (std::size_t k = 0; k < 2; ++k) dot += c->trace.Q(0, 0, i, k) * c->trace.K(0, 0, j, k);
                dlo = std::min(dlo, dot), dhi = std::max(dhi, dot);
            }
        // Printed with 4 significant digits.
        CHECK(lo == doctest::Approx(dlo).epsilon(1e-3));
        CHECK(hi == doctest::Approx(dhi).epsilon(1e-3));
    }
}

TEST_CASE("views: explain asks the run's facts (W_O, b_O), never the formula's words") {
    std::mt19937 rng(22);
    for (int variant = 0; variant < 3; ++variant) {  // no W_O; W_O; W_O and b_O
        CAPTURE(variant);
        Bundle b;
        b.source = "test";
        b.arrays["x"] = random_array(rng, {1, 3, 4});
        b.arrays["W_Q"] = random_array(rng, {4, 4});
        b.arrays["W_K"] = random_array(rng, {4, 4});
        b.arrays["W_V"] = random_array(rng, {4, 4});
        if (variant >= 1) b.arrays["W_O"] = random_array(rng, {4, 3});
        if (variant == 2) b.arrays["b_O"] = random_array(rng, {3});
        Spec s;
        s.heads = 2;
        Compute how;
        how.keep = all_stages();
        auto c = compute(b, s, how);
        TraceView v = c->view;
        CHECK(v.has_out_proj == (variant >= 1));
        CHECK(v.has_out_bias == (variant == 2));
        // The formula is display text: rewording it changes no explanation.
        for (StageView& st : v.stages) st.formula = "reworded";
        const std::string out = joined(explain_stage(v, v.stage("output")));
        CHECK(contains(out, "then · W_O: ") == (variant >= 1));
        const std::string ho = joined(explain_stage(v, v.stage("head_output")));
        CHECK(contains(ho, "without W_O") == (variant == 0));
        CHECK(contains(ho, "is b_O[0]") == (variant == 2));
    }
}
