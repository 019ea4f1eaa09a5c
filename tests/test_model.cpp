// make_problem's validation: float32 inputs reaching a float32 problem, the forms of a
// state dict's weights, and shape errors that say what was expected and found.
// Expected values are written here or come from numpy: the fixtures under tests/fixtures/
// are written by scripts/make_fixtures.py, and good/expected.json holds numpy's own
// reading of every good .npy and .npz file. Nothing is compared with the code under test.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <new>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "attnscope/base/errors.hpp"
#include "attnscope/io/read.hpp"
#include "attnscope/io/write.hpp"
#include "attnscope/model/model.hpp"
#include "test_util.hpp"

using namespace attnscope;
using namespace testutil;

TEST_CASE("model: float32 inputs reach a float32 problem bit for bit, with each non-finite input reported") {
    TempDir dir;
    const std::size_t Tq = 3, D = 4;
    std::vector<float> x(Tq * D), wq(D * D), wk(D * D), wv(D * D);
    for (std::size_t k = 0; k < x.size(); ++k) x[k] = float(std::ldexp(1.0 + double(k) / 7, int(k) - 6));
    for (std::size_t k = 0; k < wq.size(); ++k) {
        wq[k] = float(k) / 3.0f;
        wk[k] = 1.0f - float(k) / 5.0f;
        wv[k] = float(k % 5) * 0.1f;
    }
    x[6] = std::numeric_limits<float>::infinity();    // x[0][1][2]
    wk[6] = std::numeric_limits<float>::quiet_NaN();  // W_K[1][2]
    wk[9] = std::numeric_limits<float>::quiet_NaN();
    const std::string path = dir / "in.npz";
    {
        AtomicFile f(path);
        write_npz(f, {{"x", {1, Tq, D}, DType::float32, x.data()},
                      {"W_Q", {D, D}, DType::float32, wq.data()},
                      {"W_K", {D, D}, DType::float32, wk.data()},
                      {"W_V", {D, D}, DType::float32, wv.data()}});
        f.commit();
    }
    const Bundle b = load_bundle(path);
    Problem<float> p = make_problem<float>(b, Spec{});
    CHECK(std::memcmp(p.x.data(), x.data(), x.size() * sizeof(float)) == 0);
    CHECK(std::memcmp(p.W_Q.data(), wq.data(), wq.size() * sizeof(float)) == 0);
    CHECK(std::memcmp(p.W_K.data(), wk.data(), wk.size() * sizeof(float)) == 0);
    CHECK(std::memcmp(p.W_V.data(), wv.data(), wv.size() * sizeof(float)) == 0);
    const std::vector<std::string> want = {
        path + ": x: 1 non-finite value, the first inf at [0][1][2]; every stage it reaches will carry it",
        path + ": W_K: 2 non-finite values, the first nan at [1][2]; every stage it reaches will carry it"};
    CHECK(p.warnings == want);
    Problem<double> pd = make_problem<double>(b, Spec{});
    CHECK(pd.warnings == want);
    for (std::size_t k = 0; k < x.size(); ++k) CHECK(same(pd.x.data()[k], double(x[k])));

    // PyTorch's in_proj_weight (3E, E): each block transposed, each bias a third.
    std::vector<double> in_proj(3 * D * D), in_bias(3 * D);
    for (std::size_t k = 0; k < in_proj.size(); ++k) in_proj[k] = double(k) * 0.25 - 3;
    for (std::size_t k = 0; k < in_bias.size(); ++k) in_bias[k] = double(k);
    in_bias[5] = 1e39;  // beyond float32: reported in a float run only
    const std::string torch_path = dir / "torch.npz";
    {
        AtomicFile f(torch_path);
        write_npz(f, {{"x", {1, Tq, D}, DType::float32, x.data()},
                      {"in_proj_weight", {3 * D, D}, DType::float64, in_proj.data()},
                      {"in_proj_bias", {3 * D}, DType::float64, in_bias.data()}});
        f.commit();
    }
    Spec torch;
    torch.layout = Layout::torch;
    const Bundle tb = load_bundle(torch_path);
    Problem<float> t = make_problem<float>(tb, torch);
    for (std::size_t i = 0; i < D; ++i)
        for (std::size_t j = 0; j < D; ++j) {
            CHECK(t.W_Q(i, j) == static_cast<float>(in_proj[j * D + i]));
            CHECK(t.W_K(i, j) == static_cast<float>(in_proj[(D + j) * D + i]));
            CHECK(t.W_V(i, j) == static_cast<float>(in_proj[(2 * D + j) * D + i]));
        }
    REQUIRE(t.b_K);
    CHECK(same_bits((*t.b_K)(1), std::numeric_limits<float>::infinity()));
    CHECK((*t.b_V)(3) == 11.0f);
    REQUIRE(t.warnings.size() == 2);
    CHECK(t.warnings[1] == torch_path +
                               ": in_proj_bias: 1 non-finite value in this precision, the first 1e+39 at [5]; "
                               "every stage it reaches will carry it");
    CHECK(make_problem<double>(tb, torch).warnings.size() == 1);  // x's inf only
}

TEST_CASE("model: nn.MultiheadAttention's two forms of q, k, v weights, or W_Q and a state dict name, do not mix") {
    // E = 2, one head; x (3, 2). Arrays built here, named as in a bundle "mha.npz".
    auto array = [](const std::string& name, std::vector<std::size_t> shape) {
        Array a;
        a.shape = std::move(shape);
        a.values.assign(element_count(a.shape), 0.5);
        a.dtype = "float64";
        a.origin = "mha.npz: " + name;
        return a;
    };
    const std::map<std::string, std::vector<std::size_t>> shapes = {{"x", {3, 2}},
                                                                    {"memory", {4, 3}},
                                                                    {"in_proj_weight", {6, 2}},
                                                                    {"in_proj_bias", {6}},
                                                                    {"q_proj_weight", {2, 2}},
                                                                    {"k_proj_weight", {2, 2}},
                                                                    {"v_proj_weight", {2, 2}},
                                                                    {"out_proj.weight", {2, 2}},
                                                                    {"out_proj.bias", {2}},
                                                                    {"W_Q", {2, 2}},
                                                                    {"W_K", {2, 2}},
                                                                    {"W_V", {2, 2}},
                                                                    {"W_O", {2, 2}}};
    auto make = [&](const std::vector<std::string>& names) {
        Bundle b;
        b.source = "mha.npz";
        for (const std::string& n : names) b.arrays[n] = array(n, shapes.at(n));
        return b;
    };
    Spec torch;
    torch.layout = Layout::torch;

    // Every form on its own still reads.
    const std::vector<std::vector<std::string>> good = {
        {"x", "in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"},
        {"x", "q_proj_weight", "k_proj_weight", "v_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"},
        {"x", "W_Q", "W_K", "W_V", "W_O"},
    };
    for (const auto& names : good) {
        CAPTURE(names.size());
        CHECK_NOTHROW(make_problem<double>(make(names), torch));
    }

    struct Bad {
        std::vector<std::string> names;
        std::string message;
    };
    const std::string both =
        "mha.npz: both forms of nn.MultiheadAttention's q, k, v weights given: in_proj_weight and ";
    const std::vector<Bad> bad = {
        {{"x", "in_proj_weight", "q_proj_weight", "k_proj_weight", "v_proj_weight"},
         both + "q_proj_weight, k_proj_weight, v_proj_weight; remove q_proj_weight, k_proj_weight, v_proj_weight "
                "(inputs of one width, as here, take in_proj_weight)"},
        {{"x", "in_proj_weight", "in_proj_bias", "k_proj_weight"},
         both + "k_proj_weight; remove k_proj_weight (inputs of one width, as here, take in_proj_weight)"},
        {{"x", "memory", "in_proj_weight", "q_proj_weight", "k_proj_weight", "v_proj_weight"},
         both + "q_proj_weight, k_proj_weight, v_proj_weight; remove in_proj_weight (memory's width 3 is not x's 2: "
                "that takes q/k/v_proj_weight)"},
        {{"x", "k_proj_weight", "v_proj_weight"}, "mha.npz: k_proj_weight needs q_proj_weight beside it"},
        {{"x", "v_proj_weight"}, "mha.npz: v_proj_weight needs q_proj_weight and k_proj_weight beside it"},
        {{"x", "q_proj_weight"}, "mha.npz: q_proj_weight needs k_proj_weight and v_proj_weight beside it"},
        {{"x", "W_Q", "W_K", "W_V", "k_proj_weight"},
         "mha.npz: W_Q: given together with PyTorch's nn.MultiheadAttention weights; keep one set"},
        {{"x", "W_Q", "W_K", "W_V", "in_proj_bias"},
         "mha.npz: in_proj_bias: an nn.MultiheadAttention parameter without in_proj_weight or q/k/v_proj_weight, given "
         "together with W_Q, W_K, W_V; keep one set"},
        {{"x", "W_Q", "W_K", "W_V", "out_proj.weight"},
         "mha.npz: out_proj.weight: an nn.MultiheadAttention parameter without in_proj_weight or q/k/v_proj_weight, "
         "given together with W_Q, W_K, W_V; keep one set"},
        {{"x", "W_Q", "W_K", "W_V", "W_O", "out_proj.bias"},
         "mha.npz: out_proj.bias: an nn.MultiheadAttention parameter without in_proj_weight or q/k/v_proj_weight, "
         "given together with W_Q, W_K, W_V; keep one set"},
        {{"x", "out_proj.weight"},
         "mha.npz: out_proj.weight: an nn.MultiheadAttention parameter without in_proj_weight or q/k/v_proj_weight"},
    };
    for (const Bad& c : bad) {
        CAPTURE(c.message);
        CHECK(input_error([&] { make_problem<double>(make(c.names), torch); }) == c.message);
    }
}

TEST_CASE("shape errors say what was expected and found") {
    std::mt19937 rng(1);
    Array x = random_array(rng, {4, 8});
    Bundle ok = bundle({{"x", x},
                        {"W_Q", random_array(rng, {8, 8})},
                        {"W_K", random_array(rng, {8, 8})},
                        {"W_V", random_array(rng, {8, 6})}});
    auto message = [](auto&& f) -> std::string {
        try {
            f();
        } catch (const std::exception& e) {
            return e.what();
        }
        return "no error";
    };
    SUBCASE("heads that do not divide the width") {
        Spec s;
        s.heads = 3;
        CHECK_THROWS_AS(make_problem<double>(ok, s), UsageError);
        CHECK(message([&] { make_problem<double>(ok, s); }).find("does not divide") != std::string::npos);
    }
    SUBCASE("queries and keys share one width") {
        Bundle b = ok;
        b.arrays["W_K"] = random_array(rng, {8, 4});
        std::string m = message([&] { make_problem<double>(b, Spec{}); });
        CHECK(m.find("share one width") != std::string::npos);
        CHECK(m.find("(8, 4)") != std::string::npos);
    }
    SUBCASE("a transposed weight names the layout field (torch)") {
        Bundle b = ok;
        b.arrays["W_V"] = random_array(rng, {6, 8});
        std::string m = message([&] { make_problem<double>(b, Spec{}); });
        CHECK(m.find("transpose would fit") != std::string::npos);
        CHECK(m.find("layout torch") != std::string::npos);
    }
    SUBCASE("memory of the wrong width for W_K") {
        Bundle b = ok;
        b.arrays["memory"] = random_array(rng, {5, 7});
        std::string m = message([&] { make_problem<double>(b, Spec{}); });
        CHECK(m.find("expected 7 rows (Dkv") != std::string::npos);
    }
    SUBCASE("missing W_Q") {
        Bundle b = ok;
        b.arrays.erase("W_Q");
        CHECK_THROWS_AS(make_problem<double>(b, Spec{}), InputError);
    }
    SUBCASE("a padding mask with other values than 0/1") {
        Bundle b = ok;
        b.arrays["key_padding_mask"] = arr({4}, {0, 0, -std::numeric_limits<double>::infinity(), 0});
        std::string m = message([&] { make_problem<double>(b, Spec{}); });
        CHECK(m.find("an additive float mask is an attn_mask") != std::string::npos);
    }
}

TEST_CASE("model: a (Tk,) key_padding_mask is for a 2-D x only; a batch needs (B, Tk), as in PyTorch") {
    std::mt19937 rng(2);
    Bundle b = bundle({{"x", random_array(rng, {1, 3, 4})},
                       {"W_Q", random_array(rng, {4, 4})},
                       {"W_K", random_array(rng, {4, 4})},
                       {"W_V", random_array(rng, {4, 4})},
                       {"key_padding_mask", arr({3}, {0, 0, 1}, "key_padding_mask")}});
    // Even a batch of one: nn.MultiheadAttention refuses a 1-D mask beside a 3-D query.
    CHECK_THROWS_WITH_AS(make_problem<double>(b, Spec{}),
                         "test: key_padding_mask: expected (B, Tk) = (1, 3) for a 3-D x (one row per batch item, as "
                         "PyTorch requires) with 1/true = PAD, found shape (3,)",
                         InputError);
    b.arrays["key_padding_mask"] = arr({1, 3}, {0, 0, 1});
    CHECK(make_problem<double>(b, Spec{}).mask.padded(0, 2));
    b.arrays["x"] = random_array(rng, {3, 4});
    b.arrays["key_padding_mask"] = arr({3}, {0, 0, 1});
    CHECK(make_problem<double>(b, Spec{}).mask.padded(0, 2));
}

TEST_CASE("model: nn.MultiheadAttention's (B·H, Tq, Tk) attn_mask is the (B, H, Tq, Tk) mask, row b·H + h") {
    std::mt19937 rng(3);
    const std::size_t B = 3, H = 2, Tq = 2, Tk = 4;
    std::vector<double> m(B * H * Tq * Tk);
    for (std::size_t k = 0; k < m.size(); ++k) m[k] = double(k);
    Bundle b = bundle({{"x", random_array(rng, {B, Tq, 4})},
                       {"memory", random_array(rng, {B, Tk, 4})},
                       {"W_Q", random_array(rng, {4, 4})},
                       {"W_K", random_array(rng, {4, 4})},
                       {"W_V", random_array(rng, {4, 4})},
                       {"attn_mask", arr({B * H, Tq, Tk}, m)}});
    Spec s;
    s.heads = H;
    const Problem<double> p = make_problem<double>(b, s);
    REQUIRE(p.attn_bias);
    REQUIRE(p.attn_bias->shape(0) == B);
    REQUIRE(p.attn_bias->shape(1) == H);
    for (std::size_t bi = 0; bi < B; ++bi)
        for (std::size_t h = 0; h < H; ++h)
            for (std::size_t i = 0; i < Tq; ++i)
                for (std::size_t j = 0; j < Tk; ++j)
                    CHECK((*p.attn_bias)(bi, h, i, j) == double(((bi * H + h) * Tq + i) * Tk + j));
    // As booleans (true = blocked): hidden keys become -inf in the bias, per head.
    std::vector<double> blocked(B * H * Tq * Tk, 0.0);
    blocked[((1 * H + 1) * Tq + 0) * Tk + 2] = 1;  // item 1, head 1, query 0, key 2
    b.arrays["attn_mask"] = arr({B * H, Tq, Tk}, blocked);
    b.arrays["attn_mask"].dtype = "bool";
    s.attn_mask_means = MaskMeans::block;
    const Problem<double> q = make_problem<double>(b, s);
    REQUIRE(q.attn_bias);
    CHECK(std::isinf((*q.attn_bias)(1, 1, 0, 2)));
    CHECK((*q.attn_bias)(1, 0, 0, 2) == 0.0);
    CHECK((*q.attn_bias)(0, 1, 0, 2) == 0.0);
    // Another first size is still refused, naming the forms.
    b.arrays["attn_mask"] = arr({5, Tq, Tk}, std::vector<double>(5 * Tq * Tk, 0.0), "attn_mask");
    s.attn_mask_means = MaskMeans::unset;
    CHECK_THROWS_WITH_AS(make_problem<double>(b, s),
                         "test: attn_mask: expected (Tq, Tk) = (2, 4), (B, Tq, Tk), (H, Tq, Tk), (B·H, Tq, Tk) or "
                         "(B, H, Tq, Tk) with B = 3, H = 2, found (5, 2, 4)",
                         InputError);
}

TEST_CASE("model: the stage table's element count of each stage is the size of its tensor") {
    std::mt19937 rng(5);
    // grouped-query (G = 2 < H = 4), cross (Tk != Tq), RoPE, ALiBi, sinks, W_O: every stage
    Bundle b;
    b.source = "test";
    b.arrays["x"] = random_array(rng, {2, 3, 8});
    b.arrays["memory"] = random_array(rng, {2, 5, 6});
    b.arrays["W_Q"] = random_array(rng, {8, 4 * 2});
    b.arrays["W_K"] = random_array(rng, {6, 2 * 2});
    b.arrays["W_V"] = random_array(rng, {6, 2 * 3});
    b.arrays["W_O"] = random_array(rng, {4 * 3, 7});
    b.arrays["sinks"] = random_array(rng, {4});
    Spec s;
    s.heads = 4;
    s.kv_heads = 2;
    s.alibi = true;
    s.rope = Rope{};
    Compute how;
    how.keep = all_stages();
    const Problem<double> p = make_problem<double>(b, s);
    const Trace<double> tr = attend(p, how);
    const TraceView v = view_of("test", p, tr);
    CHECK(v.stages.size() == std::size_t(kStageCount));
    for (const StageView& st : v.stages) {
        CAPTURE(st.name);
        CHECK(stage_info(st.id).elements(p.dims) == st.size());
    }
    Dims huge = p.dims;
    huge.Tq = huge.Tk = std::size_t(1) << 40;
    CHECK(stage_info(kScores).elements(huge) == std::numeric_limits<std::size_t>::max());  // saturates
}
