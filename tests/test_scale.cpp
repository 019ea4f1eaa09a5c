// The views' shared rules: one colour scale per stage (terminal heatmaps and --panels),
// --range and --log-scale, and display widths (CJK and emoji take two columns).
// Expected ramp characters are computed here from the stored stages and the rule as the
// docs/usage.md states it ("One colour-scale rule"), never taken from the code that prints them.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "attnscope/base/errors.hpp"
#include "attnscope/base/text.hpp"
#include "attnscope/report/report.hpp"
#include "test_util.hpp"

using namespace attnscope;
using namespace testutil;

namespace {

const std::string kRamp = ".,:-=+*#%@";

Array tokens(std::vector<std::string> t) {
    Array a;
    a.shape = {t.size()};
    a.strings = std::move(t);
    a.dtype = "text";
    a.origin = "test: tokens";
    return a;
}

std::unique_ptr<Computed> problem(unsigned seed, std::size_t T, std::size_t heads, bool causal,
                                  std::vector<std::string> labels = {}) {
    std::mt19937 rng(seed);
    Bundle b = bundle({{"x", random_array(rng, {T, 8})},
                       {"W_Q", random_array(rng, {8, 8})},
                       {"W_K", random_array(rng, {8, 8})},
                       {"W_V", random_array(rng, {8, 8})}});
    if (!labels.empty()) b.arrays["query_tokens"] = b.arrays["key_tokens"] = tokens(labels);
    Spec s;
    s.heads = heads;
    s.causal = causal;
    return compute(b, s);
}

// The ramp character of x on lo..hi (positions rounded to the nearest of 10).
char ramp(double x, double lo, double hi) {
    const double t = hi > lo ? std::clamp((x - lo) / (hi - lo), 0.0, 1.0) : 0.5;
    return kRamp[std::size_t(std::lround(t * 9))];
}

// The code points of s, one string each.
std::vector<std::string> glyph_list(const std::string& s) {
    std::vector<std::string> out;
    for (std::size_t k = 0; k < s.size();) {
        char32_t cp = 0;
        const std::size_t n = next_code_point(s, k, cp);
        out.push_back(s.substr(k, n));
        k += n;
    }
    return out;
}

}  // namespace

TEST_CASE("views: display width: CJK and emoji take two columns, combining marks none") {
    CHECK(column_width(U'a') == 1);
    CHECK(column_width(U'é') == 1);
    CHECK(column_width(U'\u0301') == 0);  // combining acute
    CHECK(column_width(U'\u200D') == 0);  // zero-width joiner
    CHECK(column_width(U'\uFE0F') == 0);  // variation selector 16
    CHECK(column_width(U'日') == 2);
    CHECK(column_width(U'한') == 2);          // Hangul syllable
    CHECK(column_width(U'カ') == 2);          // katakana
    CHECK(column_width(U'\uFF76') == 1);      // halfwidth katakana
    CHECK(column_width(U'\uFF0C') == 2);      // fullwidth comma
    CHECK(column_width(U'\U0001F600') == 2);  // grinning face
    CHECK(column_width(U'\U0001F680') == 2);  // rocket
    CHECK(column_width(U'\u2764') == 1);      // heavy black heart: text by default
    CHECK(display_width("日本語") == 6);
    CHECK(display_width("e\xcc\x81t\xc3\xa9") == 3);  // e + combining acute, t, é
    CHECK(display_width("a😀b") == 4);
    CHECK(display_width("\xff") == 1);  // not UTF-8: one column, as escape_control shows it
}

TEST_CASE("views: heatmap rows and key labels line up with CJK and emoji tokens") {
    const std::vector<std::string> labels = {"日本", "a", "😀x", "nai\xcc\x88ve", "東京都", "b"};
    auto c = problem(3, labels.size(), 1, false, labels);
    for (std::size_t width : {80, 30}) {
        CAPTURE(width);
        TextOptions o;
        o.color = ColorMode::none;
        o.width = width;
        std::ostringstream out;
        write_heatmaps(out, c->view, c->view.stage("weights"), o);
        INFO(out.str());
        // Every row: label column of the widest label (6: 東京都), a space, then the cells.
        std::size_t rows = 0, row_width = 0;
        for (const auto& l : lines_of(out.str())) {
            if (l.rfind("  ", 0) != 0 || contains(l, "legend") || contains(l, "weights")) continue;
            const std::string body = l.substr(2);
            bool is_row = false;
            for (const auto& label : labels)
                if (body.rfind(label, 0) == 0 && display_width(label) <= 8) is_row = true;
            if (!is_row) continue;
            ++rows;
            if (row_width == 0) row_width = display_width(body);
            CHECK(display_width(body) == row_width);
            // The cells start at column 7 (6 for the labels, one space).
            std::size_t col = 0, k = 0;
            for (; k < body.size() && col < 7;) {
                char32_t cp = 0;
                k += next_code_point(body, k, cp);
                col += column_width(cp);
            }
            CHECK(col == 7);
            const std::string cells = body.substr(k);
            CHECK(display_width(cells) == 2 * labels.size());
            for (char ch : cells) CHECK(kRamp.find(ch) != std::string::npos);
        }
        CHECK(rows == labels.size());
        // The vertical key labels: each line as wide as the rows, a wide character in a
        // 2-column cell.
        std::size_t label_lines = 0;
        bool in_labels = false;
        for (const auto& l : lines_of(out.str())) {
            if (contains(l, "weights, head 0")) {
                in_labels = true;
                continue;
            }
            if (!in_labels) continue;
            if (l.rfind("  日本", 0) == 0) break;  // the first row
            ++label_lines;
            CHECK(display_width(l.substr(2)) <= row_width);
        }
        CHECK(label_lines == 5);  // "naïve" (its ï one character with its combining mark) is the longest
    }
}

TEST_CASE("views: --panels: one scale per stage, shared by heads and panels; scores and masked_scores share it") {
    auto c = problem(5, 6, 2, true);
    const Trace<double>& tr = c->trace;
    TextOptions o;
    o.color = ColorMode::none;
    o.width = 120;
    std::ostringstream out;
    write_panels(out, c->view, o);
    const std::string text = out.str();
    INFO(text);
    // The shared range of the logits: every finite scores and masked_scores value of both heads.
    double lo = kInf, hi = -kInf;
    for (std::size_t h = 0; h < 2; ++h)
        for (std::size_t i = 0; i < 6; ++i)
            for (std::size_t j = 0; j < 6; ++j)
                lo = std::min(lo, tr.scores(0, h, i, j)), hi = std::max(hi, tr.scores(0, h, i, j));
    // One labelled, aligned legend per stage, printed once.
    std::vector<std::string> legend;
    for (const auto& l : lines_of(text))
        if (contains(l, ".,:-=+*#%@") || contains(l, "..,,::--==++**##%%@@")) legend.push_back(l);
    REQUIRE(legend.size() == 3);
    CHECK(legend[0].rfind("  legend  scores ", 0) == 0);
    CHECK(legend[1].rfind("          masked_scores ", 0) == 0);
    CHECK(legend[2].rfind("          weights ", 0) == 0);
    const std::size_t ramp_at = legend[0].find("..,,::");
    for (const auto& l : legend) CHECK(l.find("..,,::") == ramp_at);  // aligned
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.4g", lo);
    CHECK(contains(legend[0], std::string(buf) + " ..,,"));
    CHECK(contains(legend[1], std::string(buf) + " ..,,"));
    std::snprintf(buf, sizeof buf, "%.4g", hi);
    CHECK(contains(legend[0], std::string("@@ ") + buf));
    CHECK(contains(legend[1], std::string("@@ ") + buf));
    CHECK(contains(text, "(they share"));
    // Each panel row: scores | masked_scores | weights; a visible score has the same
    // character in the first two panels, that of its place on the shared range.
    for (std::size_t h = 0; h < 2; ++h) {
        std::size_t seen = 0;
        std::vector<std::string> rows;
        bool in_head = false;
        for (const auto& l : lines_of(text)) {
            if (contains(l, "== head ")) in_head = contains(l, "head " + std::to_string(h) + ":");
            if (in_head && l.rfind("  q", 0) == 0) rows.push_back(l);
        }
        REQUIRE(rows.size() == 6);
        for (std::size_t i = 0; i < 6; ++i) {
            // "  qI CELLS   qI CELLS   qI CELLS"
            std::vector<std::string> parts;
            std::size_t at = 0;
            for (int k = 0; k < 3; ++k) {
                at = rows[i].find("q" + std::to_string(i) + " ", at);
                REQUIRE(at != std::string::npos);
                std::string cells;
                for (const std::string& g : glyph_list(rows[i].substr(at + 3))) cells += g == "×" ? "x" : g;
                parts.push_back(cells);
                at += 3;
            }
            for (std::size_t j = 0; j < 6; ++j) {
                CAPTURE(h);
                CAPTURE(i);
                CAPTURE(j);
                const std::string s_cell = parts[0].substr(2 * j, 2);
                const std::string want(2, ramp(tr.scores(0, h, i, j), lo, hi));
                CHECK(s_cell == want);
                if (j <= i) {
                    CHECK(parts[1].substr(2 * j, 2) == want);  // the same number, the same look
                    ++seen;
                } else {
                    CHECK(parts[1].substr(2 * j, 2) == "xx");
                }
            }
        }
        CHECK(seen == 21);
    }
}

TEST_CASE("views: heatmaps share one scale across heads; --range row, LO,HI and --log-scale") {
    auto c = problem(9, 7, 2, false);
    const Trace<double>& tr = c->trace;
    const auto draw = [&](const std::string& stage, ColourRange range) {
        TextOptions o;
        o.color = ColorMode::none;
        o.width = 200;
        o.range = range;
        std::ostringstream out;
        write_heatmaps(out, c->view, c->view.stage(stage), o);
        return out.str();
    };
    // Cells of head h, row i, from a side-by-side heatmap of two heads.
    const auto cells = [](const std::string& text, std::size_t h, std::size_t i) {
        for (const auto& l : lines_of(text)) {
            std::size_t at = 0;
            for (std::size_t k = 0; k <= h; ++k, at += 3) {
                at = l.find("q" + std::to_string(i) + " ", at);
                if (at == std::string::npos) break;
            }
            if (at != std::string::npos && l.rfind("  q" + std::to_string(i), 0) == 0) return l.substr(at);
        }
        return std::string();
    };
    // auto scores: min..max over both heads.
    double lo = kInf, hi = -kInf;
    for (std::size_t h = 0; h < 2; ++h)
        for (std::size_t i = 0; i < 7; ++i)
            for (std::size_t j = 0; j < 7; ++j)
                lo = std::min(lo, tr.scores(0, h, i, j)), hi = std::max(hi, tr.scores(0, h, i, j));
    const std::string scores = draw("scores", {});
    for (std::size_t h = 0; h < 2; ++h)
        for (std::size_t i = 0; i < 7; ++i)
            for (std::size_t j = 0; j < 7; ++j) {
                CAPTURE(h);
                CAPTURE(i);
                CAPTURE(j);
                CHECK(cells(scores, h, i)[2 * j] == ramp(tr.scores(0, h, i, j), lo, hi));
            }
    // row: each row of weights from 0 to its own largest weight; its largest is "@@".
    ColourRange row;
    row.mode = ColourRange::row;
    const std::string rows = draw("weights", row);
    CHECK(contains(rows, "each query row on its own scale"));
    CHECK(contains(rows, "row min") == true);
    for (std::size_t h = 0; h < 2; ++h)
        for (std::size_t i = 0; i < 7; ++i) {
            double top = 0;
            for (std::size_t j = 0; j < 7; ++j) top = std::max(top, tr.weights(0, h, i, j));
            for (std::size_t j = 0; j < 7; ++j) {
                CAPTURE(h);
                CAPTURE(i);
                CAPTURE(j);
                CHECK(cells(rows, h, i)[2 * j] == ramp(tr.weights(0, h, i, j), 0, top));
            }
        }
    // LO,HI given: values beyond are drawn at the ends.
    const ColourRange given = parse_range("-0.5,0.5");
    const std::string clamped = draw("scores", given);
    CHECK(contains(clamped, "-0.5..0.5 as given"));
    for (std::size_t i = 0; i < 7; ++i)
        for (std::size_t j = 0; j < 7; ++j)
            CHECK(cells(clamped, 0, i)[2 * j] == ramp(tr.scores(0, 0, i, j), -0.5, 0.5));
    // --log-scale: weights by log10, from the smallest positive weight drawn to 1.
    const std::string logged = draw("weights", parse_range("auto", true));
    double small = 1;
    for (std::size_t h = 0; h < 2; ++h)
        for (std::size_t i = 0; i < 7; ++i)
            for (std::size_t j = 0; j < 7; ++j)
                if (tr.weights(0, h, i, j) > 0) small = std::min(small, tr.weights(0, h, i, j));
    CHECK(contains(logged, "log10"));
    for (std::size_t i = 0; i < 7; ++i)
        for (std::size_t j = 0; j < 7; ++j)
            CHECK(cells(logged, 1, i)[2 * j] == ramp(std::log10(tr.weights(0, 1, i, j)), std::log10(small), 0.0));
}

TEST_CASE("views: --range is checked: auto, fixed, row or LO,HI") {
    CHECK(parse_range("auto").mode == ColourRange::automatic);
    CHECK(parse_range("fixed").mode == ColourRange::fixed);
    CHECK(parse_range("row").mode == ColourRange::row);
    const ColourRange r = parse_range("-2,3.5");
    CHECK(r.mode == ColourRange::given);
    CHECK(r.lo == -2);
    CHECK(r.hi == 3.5);
    for (const char* bad : {"", "max", "1", "2,1", "1,1", "a,b", "1,inf", "0,nan"}) {
        CAPTURE(bad);
        if (std::string(bad).empty()) continue;  // empty means auto (the default)
        const std::string e = error_of<UsageError>([&] { parse_range(bad); }, "UsageError");
        CHECK(contains(e, "range: expected"));
    }
    const std::string e = error_of<UsageError>([&] { parse_range("0,1", true); }, "UsageError");
    CHECK(contains(e, "with log_scale LO must be above 0"));
}

TEST_CASE("views: --range fixed takes the scale over every head of the run, auto over the heads drawn") {
    auto c = problem(13, 5, 2, false);
    const Trace<double>& tr = c->trace;
    const auto legend = [&](ColourRange::Mode mode) {
        TextOptions o;
        o.color = ColorMode::none;
        o.heads = {0};
        o.range.mode = mode;
        std::ostringstream out;
        write_heatmaps(out, c->view, c->view.stage("scores"), o);
        for (const auto& l : lines_of(out.str()))
            if (l.rfind("  legend  scores", 0) == 0) return l;
        return std::string();
    };
    const auto ends = [&](std::initializer_list<std::size_t> heads) {
        double lo = kInf, hi = -kInf;
        for (std::size_t h : heads)
            for (std::size_t i = 0; i < 5; ++i)
                for (std::size_t j = 0; j < 5; ++j)
                    lo = std::min(lo, tr.scores(0, h, i, j)), hi = std::max(hi, tr.scores(0, h, i, j));
        char buf[64];
        std::snprintf(buf, sizeof buf, "%.4g ..,,::--==++**##%%%%@@ %.4g", lo, hi);
        return std::string(buf);
    };
    CHECK(contains(legend(ColourRange::automatic), ends({0})));
    CHECK(contains(legend(ColourRange::fixed), ends({0, 1})));
    CHECK(ends({0}) != ends({0, 1}));
}
