// The views for a person: diagnostics, one cell's arithmetic, the explanations and the
// terminal heatmaps, and the experiments they are meant for (--zero-key, --temperature).
// Every expected number is computed here from the stored stages (or by hand), never
// taken from the code that prints it.
#include "test_util.hpp"

#include "attnscope/analysis/diagnostics.hpp"
#include "attnscope/base/errors.hpp"
#include "attnscope/report/report.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

using namespace attnscope;
using namespace testutil;

namespace {

// A computed run and its view; the view borrows from the trace, so they live together
// (behind a pointer, so the trace is never moved).
struct Computed {
    Problem<double> problem;
    Trace<double> trace;
    TraceView view;
};

std::unique_ptr<Computed> compute(const Bundle& b, const Spec& s, const Compute& how = {}) {
    auto c = std::make_unique<Computed>();
    c->problem = make_problem<double>(b, s);
    c->trace = attend(c->problem, how);
    c->view = view_of("test", c->problem, c->trace);
    return c;
}

Array eye(std::size_t n) {
    std::vector<double> v(n * n, 0.0);
    for (std::size_t i = 0; i < n; ++i) v[i * n + i] = 1.0;
    return arr({n, n}, v);
}

Array zeros(std::vector<std::size_t> shape) { return arr(shape, std::vector<double>(element_count(shape), 0.0)); }

// A random problem for the properties: 1..3 batch items, self or cross, 1..3 heads,
// random key padding (sometimes a whole item) and causal masks, scale default or random.
struct RandomCase {
    Bundle bundle;
    Spec spec;
};

RandomCase random_case(unsigned seed) {
    std::mt19937 rng(seed);
    auto pick = [&](std::size_t lo, std::size_t hi) { return std::uniform_int_distribution<std::size_t>(lo, hi)(rng); };
    const std::size_t B = pick(1, 3), Tq = pick(1, 6), H = pick(1, 3), Dk = pick(1, 3), Dv = pick(1, 3);
    const bool cross = pick(0, 1) == 1;
    const std::size_t Tk = cross ? pick(1, 6) : Tq, Dm = pick(1, 5), Dkv = cross ? pick(1, 5) : Dm;
    RandomCase c;
    Bundle& b = c.bundle;
    b.source = "random";
    b.arrays["x"] = random_array(rng, {B, Tq, Dm});
    if (cross) b.arrays["memory"] = random_array(rng, {B, Tk, Dkv});
    b.arrays["W_Q"] = random_array(rng, {Dm, H * Dk});
    b.arrays["W_K"] = random_array(rng, {Dkv, H * Dk});
    b.arrays["W_V"] = random_array(rng, {Dkv, H * Dv});
    if (pick(0, 1)) {
        std::vector<double> pad(B * Tk);
        for (double& v : pad) v = pick(0, 3) == 0 ? 1.0 : 0.0;
        b.arrays["key_padding_mask"] = arr({B, Tk}, pad);
    }
    c.spec.heads = H;
    c.spec.causal = pick(0, 1) == 1;
    c.spec.causal_align = pick(0, 1) ? CausalAlign::bottom_right : CausalAlign::top_left;
    if (pick(0, 2) == 0) c.spec.scale = std::uniform_real_distribution<double>(0.05, 8.0)(rng);
    return c;
}

const RowDiagnostics& row_of(const std::vector<RowDiagnostics>& rows, std::size_t b, std::size_t h, std::size_t i) {
    for (const auto& r : rows)
        if (r.batch == b && r.head == h && r.query == i) return r;
    FAIL("no diagnostics row for batch " << b << ", head " << h << ", query " << i);
    return rows.front();
}

std::vector<std::string> lines_of(const std::string& text) {
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
}

// The one line holding `fragment` (REQUIREd to be exactly one).
std::string line_with(const std::string& text, const std::string& fragment) {
    std::vector<std::string> found;
    for (const auto& l : lines_of(text))
        if (l.find(fragment) != std::string::npos) found.push_back(l);
    INFO("looking for '" << fragment << "' in:\n" << text);
    REQUIRE(found.size() == 1);
    return found[0];
}

// The number printed right after the first `marker` at or after `from` in `line`.
double number_after(const std::string& line, const std::string& marker, std::size_t from = 0) {
    const std::size_t at = line.find(marker, from);
    INFO("no '" << marker << "' in: " << line);
    REQUIRE(at != std::string::npos);
    const char* start = line.c_str() + at + marker.size();
    char* end = nullptr;
    const double v = std::strtod(start, &end);
    INFO("no number after '" << marker << "' in: " << line);
    REQUIRE(end != start);
    return v;
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

constexpr double kInf = std::numeric_limits<double>::infinity();

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

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
        RandomCase rc = random_case(seed);
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
        check_printed(number_after(line_with(text, "row sum of exp"), "keys = "), row_sum, decimals, "row sum");
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
        RandomCase rc = random_case(seed);
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

const std::string kRamp = " .:-=+*#%@";

}  // namespace

TEST_CASE("views: heatmaps without colour mark masked cells ××, weight 1 @@ and weight 0 blank") {
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
                                CHECK(cell == "  ");
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

// ---------------------------------------------------------------------------
// Experiments
// ---------------------------------------------------------------------------

TEST_CASE("views: zero_key sets key j to 0, so its score column is exactly 0 before masking") {
    for (unsigned seed = 0; seed < 60; ++seed) {
        CAPTURE(seed);
        RandomCase rc = random_case(seed);
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
        RandomCase rc = random_case(seed);
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
