// Terminal heatmaps: masked, one-hot and blank cells, colour escapes, heads side by side
// or stacked.
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

// UTF-8 code points of a string, one string each.
std::vector<std::string> code_points(const std::string& s) {
    std::vector<std::string> out;
    for (std::size_t i = 0; i < s.size();) {
        std::size_t n = 1;
        while (i + n < s.size() && (static_cast<unsigned char>(s[i + n]) & 0xC0) == 0x80) ++n;
        out.push_back(s.substr(i, n));
        i += n;
    }
    return out;
}

}  // namespace

// ---------------------------------------------------------------------------
// Heatmaps
// ---------------------------------------------------------------------------

namespace {

// The cells of one heatmap panel drawn alone (one batch item, one head, no colour):
// cells[i][j] is the two-column cell of query i and key j. Rows are labelled q0, q1, ...
std::vector<std::vector<std::string>> panel_cells(const std::string& text, std::size_t Tq, std::size_t Tk) {
    const std::size_t label_w = ("q" + std::to_string(Tq - 1)).size();
    std::vector<std::vector<std::string>> cells(Tq);
    for (std::size_t i = 0; i < Tq; ++i) {
        std::string label = "q" + std::to_string(i);
        label += std::string(label_w - label.size(), ' ');
        const std::string prefix = "  " + label + " ";
        std::vector<std::string> found;
        for (const auto& l : lines_of(text))
            if (l.rfind(prefix, 0) == 0) found.push_back(l);
        INFO("row " << i << " in:\n" << text);
        REQUIRE(found.size() == 1);
        const auto cp = code_points(found[0].substr(prefix.size()));
        REQUIRE(cp.size() >= 2 * Tk);
        for (std::size_t j = 0; j < Tk; ++j) cells[i].push_back(cp[2 * j] + cp[2 * j + 1]);
    }
    return cells;
}

std::string heatmap(const Computed& c, const std::string& stage, std::size_t b, std::size_t h, ColorMode mode,
                    std::size_t width = 80) {
    TextOptions o;
    o.batches = {b};
    o.heads = {h};
    o.color = mode;
    o.width = width;
    std::ostringstream out;
    write_heatmaps(out, c.view, c.view.stage(stage), o);
    return out.str();
}

// A problem whose weights are exactly 0 or 1 on most rows: scale 1e3 makes every
// score gap underflow exp. Padding and a causal mask hide some keys.
std::unique_ptr<Computed> sharp_problem(unsigned seed) {
    std::mt19937 rng(seed);
    Bundle b = bundle({{"x", random_array(rng, {2, 5, 3})},
                       {"W_Q", random_array(rng, {3, 4})},
                       {"W_K", random_array(rng, {3, 4})},
                       {"W_V", random_array(rng, {3, 4})},
                       {"key_padding_mask", arr({2, 5}, {0, 0, 0, 1, 0, 1, 1, 1, 1, 1})}});
    Spec s;
    s.heads = 2;
    s.causal = true;
    s.scale = 1e3;
    return compute(b, s);
}

const std::string kRamp = ".,:-=+*#%@";  // the lowest is a dot: a real minimum never looks empty

}  // namespace

TEST_CASE("views: heatmaps without colour mark masked cells ××, weight 1 @@ and weight 0 with a dot, never blank") {
    for (unsigned seed = 0; seed < 5; ++seed) {
        CAPTURE(seed);
        auto c = sharp_problem(seed);
        const Trace<double>& tr = c->trace;
        const Dims& d = tr.dims;
        std::size_t ones = 0, zeros_seen = 0;
        for (std::size_t b = 0; b < d.B; ++b)
            for (std::size_t h = 0; h < d.H; ++h) {
                CAPTURE(b);
                CAPTURE(h);
                for (const char* stage : {"mask", "masked_scores", "weights"}) {
                    CAPTURE(stage);
                    const std::string text = heatmap(*c, stage, b, h, ColorMode::none);
                    CHECK(!contains(text, "\033"));
                    const auto cells = panel_cells(text, d.Tq, d.Tk);
                    for (std::size_t i = 0; i < d.Tq; ++i)
                        for (std::size_t j = 0; j < d.Tk; ++j) {
                            CAPTURE(i);
                            CAPTURE(j);
                            const std::string& cell = cells[i][j];
                            CHECK((cell == "××") == !tr.mask(b, i, j));
                            if (!tr.mask(b, i, j)) continue;
                            if (std::string(stage) == "mask") CHECK(cell == "@@");
                            if (std::string(stage) != "weights") continue;
                            const double w = tr.weights(b, h, i, j);
                            if (w == 1.0) {
                                CHECK(cell == "@@");
                                ++ones;
                            }
                            if (w == 0.0) {
                                CHECK(cell == "..");
                                ++zeros_seen;
                            }
                            // Two equal characters of the ramp, denser for larger weights.
                            REQUIRE(cell.size() == 2);
                            CHECK(cell[0] == cell[1]);
                            CHECK(kRamp.find(cell[0]) != std::string::npos);
                        }
                    if (std::string(stage) == "weights")
                        for (std::size_t i = 0; i < d.Tq; ++i)
                            for (std::size_t j = 0; j < d.Tk; ++j)
                                for (std::size_t k = 0; k < d.Tk; ++k)
                                    if (tr.mask(b, i, j) && tr.mask(b, i, k) &&
                                        tr.weights(b, h, i, j) < tr.weights(b, h, i, k))
                                        CHECK(kRamp.find(cells[i][j][0]) <= kRamp.find(cells[i][k][0]));
                }
            }
        CHECK(ones > 0);  // the case exercises both ends
        CHECK(zeros_seen > 0);
    }
}

TEST_CASE("views: heatmap colour escapes only in colour modes") {
    auto c = sharp_problem(1);
    for (const char* stage : {"scores", "mask", "masked_scores", "weights"}) {
        CAPTURE(stage);
        const std::string none = heatmap(*c, stage, 0, 0, ColorMode::none);
        const std::string c256 = heatmap(*c, stage, 0, 0, ColorMode::c256);
        const std::string tc = heatmap(*c, stage, 0, 0, ColorMode::truecolor);
        CHECK(!contains(none, "\033"));
        CHECK(contains(c256, "\033[48;5;"));
        CHECK(!contains(c256, "\033[48;2;"));
        CHECK(contains(tc, "\033[48;2;"));
        CHECK(!contains(tc, "\033[48;5;"));
    }
    TextOptions o;
    o.color = ColorMode::none;
    std::ostringstream panels;
    write_panels(panels, c->view, o);
    CHECK(!contains(panels.str(), "\033"));
    CHECK(contains(panels.str(), "××"));
}

TEST_CASE("views: heads sit side by side when the width allows, stacked when narrow") {
    // 4 heads over 6 keys: each panel is 15 columns wide ("weights, head 0", and
    // "q5" + 1 + 6 cells of 2). A line holds k panels when 2 + 15k + 3(k-1) <= width.
    std::mt19937 rng(12);
    Bundle b = bundle({{"x", random_array(rng, {6, 8})},
                       {"W_Q", random_array(rng, {8, 8})},
                       {"W_K", random_array(rng, {8, 8})},
                       {"W_V", random_array(rng, {8, 8})}});
    Spec s;
    s.heads = 4;
    auto c = compute(b, s);
    struct Want {
        std::size_t width, per_line;
    };
    for (Want want : {Want{200, 4}, Want{71, 4}, Want{70, 3}, Want{40, 2}, Want{34, 1}, Want{20, 1}}) {
        CAPTURE(want.width);
        TextOptions o;
        o.color = ColorMode::none;
        o.width = want.width;
        std::ostringstream out;
        write_heatmaps(out, c->view, c->view.stage("weights"), o);
        INFO(out.str());
        std::vector<std::size_t> per_line;
        for (const auto& l : lines_of(out.str())) {
            std::size_t n = 0;
            for (std::size_t at = l.find("weights, head "); at != std::string::npos;
                 at = l.find("weights, head ", at + 1))
                ++n;
            if (n) per_line.push_back(n);
            if (!contains(l, "legend")) CHECK(code_points(l).size() <= want.width);
        }
        std::size_t total = 0;
        for (std::size_t n : per_line) {
            total += n;
            CHECK(n <= want.per_line);
        }
        CHECK(total == 4);
        CHECK(per_line.front() == want.per_line);
    }
}
