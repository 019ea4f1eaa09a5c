// Golden cases: inputs and expected stages computed by the numpy reference and checked
// against PyTorch (scripts/make_golden.py), compared here stage by stage.
#include <doctest/doctest.h>

#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>

#include "attnscope/report/report.hpp"
#include "test_util.hpp"

using namespace attnscope;

namespace {

const std::string kGolden = std::string(ATTNSCOPE_SOURCE_DIR) + "/tests/golden/";

struct Case {
    std::string name;
    Spec spec;
    std::string dtype;
    double tolerance;
};

std::vector<Case> load_cases() {
    auto j = nlohmann::json::parse(read_file(kGolden + "cases.json"));
    std::vector<Case> cases;
    for (const auto& c : j) {
        Case k;
        k.name = c.at("name");
        k.spec.heads = c.at("heads");
        k.spec.causal = c.at("causal");
        k.spec.causal_align =
            c.at("causal_align") == "bottom-right" ? CausalAlign::bottom_right : CausalAlign::top_left;
        if (!c.at("scale").is_null()) k.spec.scale = c.at("scale").get<double>();
        k.spec.layout = c.at("layout") == "torch" ? Layout::torch : Layout::math;
        // The modern variants (scripts/make_golden.py's modern_cases), by their reference keywords.
        const auto m = c.value("modern", nlohmann::json::object());
        if (m.contains("kv_heads")) k.spec.kv_heads = m.at("kv_heads").get<std::size_t>();
        if (m.value("rope", false)) {
            k.spec.rope = Rope{};
            k.spec.rope->base = m.value("rope_base", 10000.0);
            if (m.contains("rope_dim")) k.spec.rope->dim = m.at("rope_dim").get<std::size_t>();
            if (m.value("rope_style", std::string("half")) == "interleaved")
                k.spec.rope->style = RopeStyle::interleaved;
        }
        k.spec.alibi = m.value("alibi", false);
        if (m.contains("window")) k.spec.window = m.at("window").get<std::size_t>();
        if (m.contains("softcap")) k.spec.softcap = m.at("softcap").get<double>();
        const std::string means = m.value("attn_mask_means", std::string());
        k.spec.attn_mask_means = means == "allow"   ? MaskMeans::allow
                                 : means == "block" ? MaskMeans::block
                                                    : MaskMeans::unset;
        k.spec.add_zero_attn = m.value("add_zero_attn", false);
        k.dtype = c.at("dtype");
        k.tolerance = c.at("tolerance");
        cases.push_back(k);
    }
    return cases;
}

// Compares every stage of one case; returns the largest difference over all stages.
template <typename T>
double check_case(const Case& c, const Bundle& inputs, const std::map<std::string, Array>& expected) {
    Problem<T> p = make_problem<T>(inputs, c.spec);
    Trace<T> tr = attend(p);
    TraceView v = view_of(inputs.source, p, tr);
    double worst = 0;
    // The run's stages are exactly the golden file's: every classic stage, and those of
    // the variants the case uses.
    std::set<std::string> have, want;
    for (const StageView& s : v.stages) have.insert(s.name);
    for (const auto& [name, e] : expected) want.insert(name);
    CHECK(have == want);
    for (const StageView& s : v.stages) {
        const std::string& name = s.name;
        CAPTURE(name);
        REQUIRE(expected.count(name));
        const Array& e = expected.at(name);
        REQUIRE(s.shape == e.shape);
        double m = 0;
        for (std::size_t k = 0; k < s.size(); ++k) {
            double x = s.at(k), y = e.value(k);
            if (x == y) continue;
            m = std::max(m, std::isfinite(x - y) ? std::fabs(x - y) : std::numeric_limits<double>::infinity());
        }
        if (name == std::string_view("mask")) CHECK(m == 0.0);
        CHECK(m <= c.tolerance);
        worst = std::max(worst, m);
    }
    // Rows with no visible key are reported and are exactly zero.
    const Array& mask = expected.at("mask");
    std::size_t rows_without_keys = 0, Tk = mask.shape.back();
    for (std::size_t r = 0; r < mask.count() / Tk; ++r) {
        bool any = false;
        for (std::size_t j = 0; j < Tk; ++j) any |= mask.value(r * Tk + j) != 0;
        rows_without_keys += !any;
    }
    CHECK(tr.fully_masked.size() == rows_without_keys);
    return worst;
}

}  // namespace

TEST_CASE("golden: every case agrees with the numpy/PyTorch reference") {
    auto cases = load_cases();
    REQUIRE(cases.size() >= 14);
    for (const auto& c : cases) {
        CAPTURE(c.name);
        std::string path = kGolden + c.name + ".npz";
        Bundle all = parse_npz(read_file(path), path);
        Bundle inputs;
        inputs.source = path;
        std::map<std::string, Array> expected;
        for (auto& [name, a] : all.arrays) {
            if (name.rfind("expected/", 0) == 0)
                expected[name.substr(9)] = a;
            else
                inputs.arrays[name] = a;
        }
        double worst =
            c.dtype == "float32" ? check_case<float>(c, inputs, expected) : check_case<double>(c, inputs, expected);
        char line[160];
        std::snprintf(line, sizeof line, "%-40s %s  maxdiff = %.3e (tolerance %.0e)", c.name.c_str(), c.dtype.c_str(),
                      worst, c.tolerance);
        MESSAGE(line);
    }
}
