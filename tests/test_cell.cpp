// One cell's arithmetic, printed number by number, and the errors for a cell that does
// not exist.
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

// The one line holding `fragment` (REQUIREd to be exactly one).
std::string line_with(const std::string& text, const std::string& fragment) {
    std::vector<std::string> found;
    for (const auto& l : lines_of(text))
        if (l.find(fragment) != std::string::npos) found.push_back(l);
    INFO("looking for '" << fragment << "' in:\n" << text);
    REQUIRE(found.size() == 1);
    return found[0];
}

// The numbers of a line from position `from` on, read one after another.
std::vector<double> numbers_from(const std::string& line, std::size_t from) {
    std::vector<double> out;
    const char* p = line.c_str() + from;
    for (char* end = nullptr;; p = end) {
        const double v = std::strtod(p, &end);
        if (end == p) break;
        out.push_back(v);
    }
    return out;
}

// A number printed with `decimals` decimals stands for the true value within half a unit
// in the last place.
void check_printed(double printed, double expected, int decimals, const char* what) {
    CAPTURE(what);
    CAPTURE(printed);
    CAPTURE(expected);
    if (std::isinf(expected)) {
        CHECK(printed == expected);
        return;
    }
    CHECK(std::fabs(printed - expected) <= 0.5 * std::pow(10.0, -decimals) * (1 + 1e-9) + 1e-12);
}

}  // namespace

// ---------------------------------------------------------------------------
// One cell's arithmetic
// ---------------------------------------------------------------------------

namespace {

// Writes one cell and checks every printed number against the stages.
void check_cell(const Computed& c, const CellRef& cell, int decimals) {
    CAPTURE(cell.batch);
    CAPTURE(cell.head);
    CAPTURE(cell.query);
    CAPTURE(cell.key);
    CAPTURE(decimals);
    const Trace<double>& tr = c.trace;
    const Dims& d = tr.dims;
    const std::size_t b = cell.batch, h = cell.head, i = cell.query, j = cell.key;
    std::ostringstream out;
    write_cell(out, c.view, cell, decimals);
    const std::string text = out.str();
    INFO(text);

    // 1) q_i · k_j term by term, and the sum
    double dot = 0;
    for (std::size_t k = 0; k < d.Dk; ++k) {
        const double q = tr.Q(b, h, i, k), key = tr.K(b, h, j, k);
        dot += q * key;
        const std::string l = line_with(text, "d" + std::to_string(k) + ":");
        const auto nums = numbers_from(l, l.find(':') + 1);
        REQUIRE(nums.size() >= 1);
        check_printed(nums[0], q, decimals, "q_i[k]");
        check_printed(number_after(l, "×"), key, decimals, "k_j[k]");
        check_printed(number_after(l, "= "), q * key, decimals, "q_i[k] k_j[k]");
    }
    check_printed(number_after(line_with(text, "sum = "), "sum = "), dot, decimals, "q_i · k_j");
    // 2) × scale, beside the stored score
    const std::string l2 = line_with(text, "2) × scale");
    check_printed(number_after(l2, " = ", l2.rfind(" = ")), dot * tr.scale, decimals, "scaled score");
    const std::string stored = line_with(text, "stored: scores");
    check_printed(number_after(stored, "] = "), tr.scores(b, h, i, j), decimals, "scores[...]");
    const std::string index = std::string(c.view.batched ? "[" + std::to_string(b) + "]" : "") + "[" +
                              std::to_string(h) + "][" + std::to_string(i) + "][" + std::to_string(j) + "]";
    CHECK(contains(stored, "stored: scores" + index + " = "));
    // 3) the mask
    const bool visible = tr.mask(b, i, j);
    CHECK(contains(line_with(text, "3) mask:"), visible ? "is visible to query" : "is hidden from query"));
    // 4) row max, exp, row sum, weight
    double row_max = -kInf;
    for (std::size_t k = 0; k < d.Tk; ++k) row_max = std::max(row_max, tr.masked()(b, h, i, k));
    if (row_max == -kInf) {
        CHECK(contains(text, "every key of query " + std::to_string(i) + " is masked"));
        CHECK(!contains(text, "weight = "));
        CHECK(tr.weights(b, h, i, j) == 0.0);
    } else {
        double row_sum = 0;
        for (std::size_t k = 0; k < d.Tk; ++k) row_sum += std::exp(tr.masked()(b, h, i, k) - row_max);
        const double e = visible ? std::exp(tr.scores(b, h, i, j) - row_max) : 0.0;
        check_printed(number_after(line_with(text, "4) row max"), "keys = "), row_max, decimals, "row max");
        check_printed(number_after(line_with(text, "row sum of exp"), " = "), row_sum, decimals, "row sum");
        std::size_t seen = 0;  // the keys the sum runs over: the visible ones
        for (std::size_t k = 0; k < d.Tk; ++k) seen += tr.mask(b, i, k);
        CHECK(contains(line_with(text, "row sum of exp"), "over the " + std::to_string(seen) +
                                                              (seen < d.Tk ? " visible" : "") +
                                                              (seen == 1 ? " key = " : " keys = ")));
        const std::string lw = line_with(text, "weight = ");
        check_printed(number_after(lw, "weight = "), e, decimals, "exp(m - max)");
        check_printed(number_after(lw, " / "), row_sum, decimals, "row sum (weight line)");
        const std::size_t wb = lw.find("    [weights = ");
        REQUIRE(wb != std::string::npos);
        check_printed(number_after(lw, " = ", lw.rfind(" = ", wb)), e / row_sum, decimals, "weight");
        check_printed(number_after(lw, "[weights = "), tr.weights(b, h, i, j), decimals, "weights[...]");
        if (!visible) CHECK(contains(lw, "[weights = 0]"));  // exactly 0 prints as 0
    }
    // 5) v_j, w_ij · v_j and context row i
    const std::vector<std::string> lines = lines_of(text);
    const auto head5 =
        std::find_if(lines.begin(), lines.end(), [](const std::string& l) { return l.rfind("  5) ", 0) == 0; });
    REQUIRE(head5 != lines.end());
    REQUIRE(std::size_t(lines.end() - head5) >= 2 + d.Dv);
    const double w = tr.weights(b, h, i, j);
    for (std::size_t k = 0; k < d.Dv; ++k) {
        CAPTURE(k);
        const std::string& l = *(head5 + 2 + std::ptrdiff_t(k));
        const std::string tag = "d" + std::to_string(k);
        REQUIRE(l.find(tag) != std::string::npos);
        const auto nums = numbers_from(l, l.find(tag) + tag.size());
        REQUIRE(nums.size() == 3);
        check_printed(nums[0], tr.V(b, h, j, k), decimals, "v_j");
        check_printed(nums[1], w * tr.V(b, h, j, k), decimals, "w_ij v_j");
        check_printed(nums[2], tr.context(b, h, i, k), decimals, "context");
    }
}

}  // namespace

TEST_CASE("views: one cell's arithmetic matches the stages") {
    std::mt19937 rng(3);
    SUBCASE("2-D x, causal: visible and hidden keys") {
        Bundle b = bundle({{"x", random_array(rng, {5, 4})},
                           {"W_Q", random_array(rng, {4, 4})},
                           {"W_K", random_array(rng, {4, 4})},
                           {"W_V", random_array(rng, {4, 4})}});
        Spec s;
        s.causal = true;
        auto c = compute(b, s);
        REQUIRE(!c->view.batched);
        for (int decimals : {4, 6})
            for (std::size_t i = 0; i < 5; ++i)
                for (std::size_t j = 0; j < 5; ++j) check_cell(*c, {0, 0, i, j}, decimals);
    }
    SUBCASE("batched x, two heads, padding with a fully masked item") {
        Bundle b = bundle({{"x", random_array(rng, {3, 3, 4})},
                           {"W_Q", random_array(rng, {4, 4})},
                           {"W_K", random_array(rng, {4, 4})},
                           {"W_V", random_array(rng, {4, 6})},
                           {"key_padding_mask", arr({3, 3}, {0, 0, 1, 1, 1, 1, 0, 1, 0})}});
        Spec s;
        s.heads = 2;
        auto c = compute(b, s);
        REQUIRE(c->view.batched);
        for (std::size_t bi = 0; bi < 3; ++bi)
            for (std::size_t h = 0; h < 2; ++h)
                for (std::size_t i = 0; i < 3; ++i)
                    for (std::size_t j = 0; j < 3; ++j) check_cell(*c, {bi, h, i, j}, 4);
    }
    SUBCASE("cross-attention with a custom scale") {
        Bundle b = bundle({{"x", random_array(rng, {2, 3})},
                           {"memory", random_array(rng, {4, 2})},
                           {"W_Q", random_array(rng, {3, 2})},
                           {"W_K", random_array(rng, {2, 2})},
                           {"W_V", random_array(rng, {2, 3})}});
        Spec s;
        s.scale = 1.75;
        auto c = compute(b, s);
        for (std::size_t i = 0; i < 2; ++i)
            for (std::size_t j = 0; j < 4; ++j) check_cell(*c, {0, 0, i, j}, 5);
    }
}

TEST_CASE("views: a cell that does not exist, or a missing stage, is a usage error") {
    std::mt19937 rng(4);
    Bundle b = bundle({{"x", random_array(rng, {2, 3, 4})},
                       {"W_Q", random_array(rng, {4, 4})},
                       {"W_K", random_array(rng, {4, 4})},
                       {"W_V", random_array(rng, {4, 4})}});
    Spec s;
    s.heads = 2;
    auto c = compute(b, s);
    const CellRef bad[] = {{2, 0, 0, 0}, {0, 2, 0, 0}, {0, 0, 3, 0}, {0, 0, 0, 3}, {9, 9, 9, 9}};
    for (const CellRef& cell : bad) {
        CAPTURE(cell.batch);
        CAPTURE(cell.head);
        CAPTURE(cell.query);
        CAPTURE(cell.key);
        std::ostringstream out;
        CHECK_THROWS_AS(write_cell(out, c->view, cell, 4), UsageError);
        CHECK(out.str().empty());  // nothing half-written
    }
    std::ostringstream ok;
    CHECK_NOTHROW(write_cell(ok, c->view, {1, 1, 2, 2}, 4));

    Compute weights_only;
    weights_only.keep = stage_set({"weights"});
    auto partial = compute(b, s, weights_only);
    std::ostringstream out;
    CHECK_THROWS_AS(write_cell(out, partial->view, {0, 0, 0, 0}, 4), UsageError);
    CHECK_THROWS_AS(diagnose(partial->view), UsageError);
}
