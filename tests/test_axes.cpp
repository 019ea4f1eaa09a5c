// The axis-order grammar of --axes NAME=ORDER (model/axes.hpp), one for `run --qkv` and
// `check`. Expectations are written from the help and the README: "NAME=ORDER: the axis
// order ... in the letters b, h, t, d (q, k for scores), (..) around merged axes, e.g.
// q=bthd, z=bt(hd), attn=bhqk"; --qkv recognises (B, H, T, D), (B, T, H, D), (B, T, H·D),
// (H, T, D), (B·H, T, D), (T, H·D), (T, D); check (B,H,T,D), (B,T,H,D), (B,T,H·D),
// (B·H,T,D), and without the batch axis when B = 1.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "attnscope/base/errors.hpp"
#include "attnscope/model/axes.hpp"
#include "test_util.hpp"

using namespace attnscope;
using Shape = std::vector<std::size_t>;

namespace {

const Axes kQKV = {{'b', 0}, {'h', 2}, {'t', 0}, {'d', 0}};  // --qkv with --heads 2

std::string why_not(const std::string& order, const Axes& axes, bool qk_as_t = false) {
    std::string why;
    CHECK_FALSE(parse_axis_order(order, axes, qk_as_t, &why));
    return why;
}

std::vector<std::string> names_and_shapes(const std::vector<AxisReading>& rs) {
    std::vector<std::string> out;
    for (const auto& r : rs) out.push_back(r.name() + " " + shape_str(r.shape));
    return out;
}

}  // namespace

TEST_CASE("axes: NAME=ORDER items are split at the first '=', the later of two for one name wins") {
    const auto m = parse_axes_option({"q=bthd", "z=bt(hd)", "attn=bhqk", "q=bhtd", "a=b=c"}, "q=bthd");
    CHECK(m.size() == 4);
    CHECK(m.at("q") == "bhtd");
    CHECK(m.at("z") == "bt(hd)");
    CHECK(m.at("attn") == "bhqk");
    CHECK(m.at("a") == "b=c");  // the order is refused later, by the grammar
    CHECK(parse_axes_option({}, "q=bthd").empty());
    for (const char* bad : {"q", "=bthd", "q=", ""}) {
        CAPTURE(bad);
        try {
            parse_axes_option({bad}, "q=bthd or k=bt(hd)");
            FAIL("accepted");
        } catch (const UsageError& e) {
            CHECK(std::string(e.what()) ==
                  "axes " + std::string(bad) + ": expected NAME=ORDER, e.g. q=bthd or k=bt(hd)");
        }
    }
}

TEST_CASE("axes: accepted spellings, any case, merged axes in parentheses") {
    struct Case {
        const char* text;
        std::vector<std::string> groups;
        const char* name;
    };
    const Case cases[] = {{"bthd", {"b", "t", "h", "d"}, "bthd"},
                          {"BHTD", {"b", "h", "t", "d"}, "bhtd"},
                          {"bt(hd)", {"b", "t", "hd"}, "bt(hd)"},
                          {"Bt(Hd)", {"b", "t", "hd"}, "bt(hd)"},
                          {"(bh)td", {"bh", "t", "d"}, "(bh)td"},
                          {"t(hd)", {"t", "hd"}, "t(hd)"},
                          {"td", {"t", "d"}, "td"},
                          {"dt", {"d", "t"}, "dt"},
                          {"(b)t(h)d", {"b", "t", "h", "d"}, "bthd"},
                          {"(bthd)", {"bthd"}, "(bthd)"}};
    for (const Case& c : cases) {
        CAPTURE(c.text);
        const auto o = parse_axis_order(c.text, kQKV, false, nullptr);
        REQUIRE(o);
        CHECK(o->groups == c.groups);
        CHECK(o->name() == c.name);
    }
    // q and k, the query and key axes of scores; in a stage with one position axis, t.
    const Axes scores = {{'b', 1}, {'h', 2}, {'q', 3}, {'k', 4}};
    CHECK(parse_axis_order("bhkq", scores, false, nullptr)->name() == "bhkq");
    CHECK(parse_axis_order("(bh)qk", scores, false, nullptr)->name() == "(bh)qk");
    CHECK(parse_axis_order("bqhd", kQKV, true, nullptr)->name() == "bthd");
}

TEST_CASE("axes: refusals say why") {
    const std::string syntax = "expected the letters b, h, t, d (q, k for scores) with (..) around merged axes";
    for (const char* bad : {"", "bt(hd", "bt)hd(", "b()td", "b((h))td", "bt hd", "b,t,h,d", "bt(h)(d", "bthd1"}) {
        CAPTURE(bad);
        CHECK(why_not(bad, kQKV) == syntax);
    }
    CHECK(why_not("bxtd", kQKV) == "no axis x here");
    CHECK(why_not("bhqd", kQKV) == "no axis q here");  // q and k are t only when asked
    CHECK(why_not("bhtt", kQKV) == "the letter t twice");
    CHECK(why_not("bhTt", kQKV) == "the letter t twice");
    CHECK(why_not("bhqk", kQKV, true) == "the letter t twice");
    CHECK(why_not("b(hb)td", kQKV) == "the letter b twice");
    // A letter left out has size 1: one of size 2 may not be.
    const Axes q = {{'b', 1}, {'h', 2}, {'t', 6}, {'d', 4}};
    std::string why;
    CHECK_FALSE(layout_of(*parse_axis_order("btd", q, false, nullptr), q, &why));
    CHECK(why == "the axis h (size 2) is missing");
    CHECK(layout_of(*parse_axis_order("htd", q, false, nullptr), q, nullptr)->shape == Shape{2, 6, 4});
}

TEST_CASE("axes: an order read against a shape gives each letter's size") {
    // (B, T, H·D) = (2, 5, 8) with 2 heads: B = 2, T = 5, D = 4.
    const auto r = read_axes(*parse_axis_order("bt(hd)", kQKV, false, nullptr), {2, 5, 8}, kQKV);
    REQUIRE(r);
    CHECK(r->size('b') == 2);
    CHECK(r->size('h') == 2);
    CHECK(r->size('t') == 5);
    CHECK(r->size('d') == 4);
    CHECK(r->signature == "bthd");
    // With 3 heads, 8 does not split; a rank that differs; h left out with 2 heads.
    const Axes three = {{'b', 0}, {'h', 3}, {'t', 0}, {'d', 0}};
    CHECK_FALSE(read_axes(*parse_axis_order("bt(hd)", three, false, nullptr), {2, 5, 8}, three));
    CHECK_FALSE(read_axes(*parse_axis_order("bhtd", kQKV, false, nullptr), {2, 5, 8}, kQKV));
    CHECK_FALSE(read_axes(*parse_axis_order("btd", kQKV, false, nullptr), {2, 5, 8}, kQKV));
    // Two unknown sizes in one axis cannot be told apart.
    CHECK_FALSE(read_axes(*parse_axis_order("(bt)hd", kQKV, false, nullptr), {10, 2, 4}, kQKV));
    // No batch axis: B = 1, and the signature has only the letters of size > 1.
    const auto htd = read_axes(*parse_axis_order("htd", kQKV, false, nullptr), {2, 5, 4}, kQKV);
    REQUIRE(htd);
    CHECK(htd->size('b') == 1);
    CHECK_FALSE(htd->order.has('b'));
    CHECK(htd->signature == "htd");
}

TEST_CASE("axes: the candidates of --qkv for a shape and a head count") {
    std::vector<std::string> names;
    for (const auto& o : qkv_orders()) names.push_back(o.name());
    CHECK(names == std::vector<std::string>{"bhtd", "bthd", "bt(hd)", "htd", "(bh)td", "t(hd)", "td"});
    // SDPA's (B, H, T, D) = (1, 2, 5, 4) with 2 heads: only (B, H, T, D).
    auto rs = readings_of(qkv_orders(), {1, 2, 5, 4}, kQKV);
    REQUIRE(rs.size() == 1);
    CHECK(rs[0].name() == "bhtd");
    // With 1 head nothing fits: h would be 2 or 5.
    CHECK(readings_of(qkv_orders(), {1, 2, 5, 4}, {{'b', 0}, {'h', 1}, {'t', 0}, {'d', 0}}).empty());
    // (2, 5, 8) with 2 heads: (B, T, H·D) with B = 2, or (H, T, D) with D = 8; (B·H, T, D)
    // with B = 1 is the same cells as (H, T, D): one candidate.
    rs = readings_of(qkv_orders(), {2, 5, 8}, kQKV);
    CHECK(names_and_shapes(rs) == std::vector<std::string>{"bt(hd) (2, 5, 8)", "htd (2, 5, 8)"});
    // (4, 5, 3): (B·H, T, D) with B = 2.
    rs = readings_of(qkv_orders(), {4, 5, 3}, kQKV);
    REQUIRE(rs.size() == 1);
    CHECK(rs[0].name() == "(bh)td");
    CHECK(rs[0].size('b') == 2);
    // (T, H·D) = (5, 8).
    rs = readings_of(qkv_orders(), {5, 8}, kQKV);
    REQUIRE(rs.size() == 1);
    CHECK(rs[0].name() == "t(hd)");
}

TEST_CASE("axes: the candidates of a check stage, with and without b and h of size 1") {
    // Q of one unbatched input (B = 1), 2 heads, T = 6, Dk = 4.
    const Axes q = {{'b', 1}, {'h', 2}, {'t', 6}, {'d', 4}};
    CHECK(names_and_shapes(stage_layouts(q)) == std::vector<std::string>{"bhtd (1, 2, 6, 4)", "htd (2, 6, 4)",
                                                                         "bthd (1, 6, 2, 4)", "thd (6, 2, 4)",
                                                                         "bt(hd) (1, 6, 8)", "t(hd) (6, 8)"});
    // Scores of B = 1, H = 2, Tq = Tk = 3: (B, H, Tq, Tk), (H, Tq, Tk); (B·H, Tq, Tk) is the latter.
    const Axes scores = {{'b', 1}, {'h', 2}, {'q', 3}, {'k', 3}};
    CHECK(names_and_shapes(stage_layouts(scores)) == std::vector<std::string>{"bhqk (1, 2, 3, 3)", "hqk (2, 3, 3)"});
    // One head, B = 2: the head axis may be left out; (B, H, Tq, Tk) and (B·H, Tq, Tk) differ.
    const Axes one_head = {{'b', 2}, {'h', 1}, {'q', 3}, {'k', 3}};
    CHECK(names_and_shapes(stage_layouts(one_head)) == std::vector<std::string>{"bhqk (2, 1, 3, 3)", "bqk (2, 3, 3)"});
    // The output (B, Tq, Dout) = (2, 3, 4): btd only.
    CHECK(names_and_shapes(stage_layouts({{'b', 2}, {'t', 3}, {'d', 4}})) == std::vector<std::string>{"btd (2, 3, 4)"});
}
