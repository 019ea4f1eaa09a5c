// libFuzzer target: the whole load-and-validate path, and the attention core on what
// it accepts.
//
// Input layout: byte 0 chooses the Spec and how to compute; the rest is a bundle, read
// as .npz when it starts with "PK" and as a JSON object otherwise (as load_bundle does).
// .npz bundles are mutated with valid CRCs (npz_mutator.hpp).
//
//   bit 0-1  heads - 1 (1..4)          bit 4  layout: 0 math, 1 torch
//   bit 2    causal                    bit 5  scale: 0 default 1/sqrt(Dk), 1 explicit 0.5
//   bit 3    align: 0 top-left,        bit 6-7 a second run of attend() keeping fewer
//            1 bottom-right                    stages and/or on 2 threads (see kVariants)
//
// make_problem<double> and make_problem<float> each run on the bundle. When one accepts
// it and the sizes are small, attend() runs with every stage kept, then again as the
// variant says. Oracles, besides the sanitizers:
//  - the Problem's tensors have the shapes its Dims describe; without a warning, every
//    input tensor is finite in T;
//  - mask is "not PAD and, when causal, not in the future", recomputed here from the
//    spec; fully_masked lists exactly the rows with no visible key;
//  - masked_scores is scores where visible and -inf elsewhere;
//  - a fully masked row has all-zero weights; a row whose visible scores are finite has
//    finite weights in [0, 1] summing to 1, and exactly 0 on masked keys;
//  - no NaN in weights unless an input had non-finite values (problem.warnings), or the
//    scores themselves overflowed from finite inputs (see below);
//  - the variant run gives bit-identical values on the stages it keeps;
//  - the per-row summaries (computed apart, by key blocks and an online softmax) agree
//    with the dense weights on every row whose visible scores are finite and not within
//    2^6 of overflow: row sum, top-k (weights, order, ties to the lower key), sink and
//    local mass, mean distance, entropy, visible keys; and are bit-identical whatever else
//    is kept, on any threads. Their own product of scores sums in another order: a score
//    may differ by up to (Dk + 2)·eps·|scale|·Σ_d |q_d k_d| =: δ, so weights may by 2δ
//    (float32 scores near 24,000 are a few ulps of 0.002 apart: 0.5% in a weight).
//
// Scores can overflow to infinity from finite inputs (x entries of 1e200 in float64,
// 1e20 in float32); softmax then gives NaN with no warning. That is arithmetic, not a
// broken reader, so those rows are exempt by default; set ATTNSCOPE_FUZZ_STRICT_NAN=1 to
// treat any NaN in weights without a warning as a crash.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "attnscope/core/attention.hpp"
#include "attnscope/model/model.hpp"
#include "fuzz_common.hpp"
#include "npz_mutator.hpp"

using namespace attnscope;

namespace {

const bool kStrictNaN = [] {
    const char* s = std::getenv("ATTNSCOPE_FUZZ_STRICT_NAN");
    return s && *s && std::strcmp(s, "0") != 0;
}();

struct Variant {
    std::vector<std::string> keep;  // empty: no second run
    std::size_t threads;
};
const Variant kVariants[4] = {
    {{}, 1},
    {{"weights", "output"}, 1},  // scores streamed, weights kept
    {{"output"}, 2},             // fully streamed, on 2 threads
    {{"scores", "mask", "masked_scores", "weights", "context"}, 2},
};

Spec spec_from(std::uint8_t b) {
    Spec s;
    s.heads = 1 + (b & 3u);
    s.causal = (b & 4u) != 0;
    s.causal_align = (b & 8u) ? CausalAlign::bottom_right : CausalAlign::top_left;
    s.layout = (b & 16u) ? Layout::torch : Layout::math;
    if (b & 32u) s.scale = 0.5;
    return s;
}

template <typename E>
bool shape_is(const E& t, std::initializer_list<std::size_t> want) {
    return t.shape().size() == want.size() && std::equal(want.begin(), want.end(), t.shape().begin());
}

template <typename E>
bool all_finite(const E& t) {
    for (auto v : t)
        if (!std::isfinite(v)) return false;
    return true;
}

template <typename T>
void check_problem(const Problem<T>& p, const Spec& spec) {
    const Dims& d = p.dims;
    ATTNSCOPE_FUZZ_CHECK(d.B && d.Tq && d.Tk && d.Dm && d.Dkv && d.Dk && d.Dv);  // Dout may be 0
    ATTNSCOPE_FUZZ_CHECK(d.H == spec.heads);
    ATTNSCOPE_FUZZ_CHECK(shape_is(p.x, {d.B, d.Tq, d.Dm}));
    ATTNSCOPE_FUZZ_CHECK(p.cross == p.memory.has_value());
    if (p.memory)
        ATTNSCOPE_FUZZ_CHECK(shape_is(*p.memory, {d.B, d.Tk, d.Dkv}));
    else
        ATTNSCOPE_FUZZ_CHECK(d.Tk == d.Tq && d.Dkv == d.Dm);
    ATTNSCOPE_FUZZ_CHECK(shape_is(p.W_Q, {d.Dm, d.H * d.Dk}));
    ATTNSCOPE_FUZZ_CHECK(shape_is(p.W_K, {d.Dkv, d.H * d.Dk}));
    ATTNSCOPE_FUZZ_CHECK(shape_is(p.W_V, {d.Dkv, d.H * d.Dv}));
    if (p.W_O)
        ATTNSCOPE_FUZZ_CHECK(shape_is(*p.W_O, {d.H * d.Dv, d.Dout}));
    else
        ATTNSCOPE_FUZZ_CHECK(d.Dout == d.H * d.Dv && !p.b_O);
    if (p.b_Q) ATTNSCOPE_FUZZ_CHECK(shape_is(*p.b_Q, {d.H * d.Dk}));
    if (p.b_K) ATTNSCOPE_FUZZ_CHECK(shape_is(*p.b_K, {d.H * d.Dk}));
    if (p.b_V) ATTNSCOPE_FUZZ_CHECK(shape_is(*p.b_V, {d.H * d.Dv}));
    if (p.b_O) ATTNSCOPE_FUZZ_CHECK(shape_is(*p.b_O, {d.Dout}));
    if (p.mask.key_padding()) ATTNSCOPE_FUZZ_CHECK(shape_is(*p.mask.key_padding(), {d.B, d.Tk}));
    for (const TokenLabels* labels : {&p.query_tokens, &p.key_tokens}) {
        if (labels->empty()) continue;
        ATTNSCOPE_FUZZ_CHECK(labels->size() == d.B);
        const std::size_t want = labels == &p.query_tokens ? d.Tq : d.Tk;
        for (std::size_t b = 0; b < labels->size(); ++b) ATTNSCOPE_FUZZ_CHECK((*labels)[b].size() == want);
    }
    ATTNSCOPE_FUZZ_CHECK(p.spec.scale ? p.scale == static_cast<T>(*spec.scale) : p.scale > T(0));

    // Without a warning every input is finite as the core gets it, in T (a finite double
    // can still become infinite in float).
    if (p.warnings.empty()) {
        ATTNSCOPE_FUZZ_CHECK(all_finite(p.x));
        if (p.memory) ATTNSCOPE_FUZZ_CHECK(all_finite(*p.memory));
        ATTNSCOPE_FUZZ_CHECK(all_finite(p.W_Q) && all_finite(p.W_K) && all_finite(p.W_V));
        if (p.W_O) ATTNSCOPE_FUZZ_CHECK(all_finite(*p.W_O));
        for (const auto* b : {&p.b_Q, &p.b_K, &p.b_V, &p.b_O})
            if (*b) ATTNSCOPE_FUZZ_CHECK(all_finite(**b));
    }
}

// Multiply-adds of one run, a little generously; attend() runs only when this is small.
double work(const Dims& d) {
    const double B = double(d.B), H = double(d.H), Tq = double(d.Tq), Tk = double(d.Tk);
    return B * Tq * double(d.Dm) * H * double(d.Dk) + B * Tk * double(d.Dkv) * H * double(d.Dk + d.Dv) +
           B * H * Tq * Tk * double(d.Dk + d.Dv + 4) + B * Tq * H * double(d.Dv) * double(d.Dout);
}

// Bit-identical, NaN equal to NaN.
template <typename A, typename B>
bool same(const A& a, const B& b) {
    if (a.shape().size() != b.shape().size() || !std::equal(a.shape().begin(), a.shape().end(), b.shape().begin()))
        return false;
    auto i = a.begin();
    for (auto j = b.begin(); j != b.end(); ++i, ++j) {
        using V = std::decay_t<decltype(*j)>;
        if constexpr (std::is_floating_point_v<V>) {
            if (std::isnan(*i) && std::isnan(*j)) continue;
            if (std::memcmp(&*i, &*j, sizeof(V)) != 0) return false;
        } else if (*i != *j) {
            return false;
        }
    }
    return true;
}

template <typename T>
void check_trace(const Problem<T>& p, const Trace<T>& tr) {
    const Dims& d = p.dims;
    const std::size_t B = d.B, H = d.H, Tq = d.Tq, Tk = d.Tk;
    ATTNSCOPE_FUZZ_CHECK(shape_is(tr.Q, {B, H, Tq, d.Dk}) && shape_is(tr.K, {B, H, Tk, d.Dk}) &&
                         shape_is(tr.V, {B, H, Tk, d.Dv}) && shape_is(tr.scores, {B, H, Tq, Tk}) &&
                         shape_is(tr.mask, {B, Tq, Tk}) && shape_is(tr.masked(), {B, H, Tq, Tk}) &&
                         shape_is(tr.weights, {B, H, Tq, Tk}) && shape_is(tr.context, {B, H, Tq, d.Dv}) &&
                         shape_is(tr.output, {B, Tq, d.Dout}));

    // The mask, recomputed from the spec; the fully masked rows.
    std::size_t listed = 0;
    for (std::size_t b = 0; b < B; ++b)
        for (std::size_t i = 0; i < Tq; ++i) {
            bool any = false;
            for (std::size_t j = 0; j < Tk; ++j) {
                bool pad = p.mask.key_padding() && (*p.mask.key_padding())(b, j);
                bool future = p.spec.causal && (p.spec.causal_align == CausalAlign::top_left ? j > i : j + Tq > i + Tk);
                bool visible = !pad && !future;
                ATTNSCOPE_FUZZ_CHECK(tr.mask(b, i, j) == visible);
                any |= visible;
            }
            if (!any) {
                ATTNSCOPE_FUZZ_CHECK(listed < tr.fully_masked.size() && tr.fully_masked[listed].batch == b &&
                                     tr.fully_masked[listed].query == i);
                ++listed;
            }
        }
    ATTNSCOPE_FUZZ_CHECK(listed == tr.fully_masked.size());

    // Per row: masked scores, weights.
    const T inf = std::numeric_limits<T>::infinity();
    const double tol = std::is_same_v<T, float> ? 1e-5 + 1e-6 * double(Tk) : 1e-12 * double(Tk + 1);
    for (std::size_t b = 0; b < B; ++b)
        for (std::size_t h = 0; h < H; ++h)
            for (std::size_t i = 0; i < Tq; ++i) {
                bool any = false, finite = true, nan_weight = false;
                for (std::size_t j = 0; j < Tk; ++j) {
                    const T s = tr.scores(b, h, i, j), m = tr.masked()(b, h, i, j);
                    if (tr.mask(b, i, j)) {
                        any = true;
                        finite &= std::isfinite(s);
                        ATTNSCOPE_FUZZ_CHECK(std::isnan(s) ? std::isnan(m) : m == s);
                    } else {
                        ATTNSCOPE_FUZZ_CHECK(m == -inf);
                    }
                    nan_weight |= std::isnan(tr.weights(b, h, i, j));
                }
                if (!any) {
                    for (std::size_t j = 0; j < Tk; ++j) ATTNSCOPE_FUZZ_CHECK(tr.weights(b, h, i, j) == T(0));
                    continue;
                }
                if (nan_weight) {
                    // A NaN needs a non-finite score to come from: from a non-finite input
                    // (warned about) or, outside strict mode, from overflow.
                    ATTNSCOPE_FUZZ_CHECK(!finite);
                    ATTNSCOPE_FUZZ_CHECK(!p.warnings.empty() || !kStrictNaN);
                }
                if (!finite) continue;
                double sum = 0;
                for (std::size_t j = 0; j < Tk; ++j) {
                    const T w = tr.weights(b, h, i, j);
                    ATTNSCOPE_FUZZ_CHECK(w >= T(0) && w <= T(1));
                    if (!tr.mask(b, i, j)) ATTNSCOPE_FUZZ_CHECK(w == T(0));
                    sum += double(w);
                }
                ATTNSCOPE_FUZZ_CHECK(std::fabs(sum - 1.0) <= tol);
            }
}

// The summaries of a run against the dense weights of the run that kept every stage.
template <typename T>
void check_summary(const Problem<T>& p, const Trace<T>& tr, const Summary& s) {
    const std::size_t B = p.dims.B, H = p.dims.H, Tq = p.dims.Tq, Tk = p.dims.Tk, K = s.K;
    const double tol = std::is_same_v<T, float> ? 1e-5 + 1e-6 * double(Tk) : 1e-12 * double(Tk + 1);
    const T inf = std::numeric_limits<T>::infinity();
    for (std::size_t bh = 0; bh < B * H; ++bh) {  // each head counts its rows marked not finite
        std::int64_t bad = 0;
        for (std::size_t i = 0; i < Tq; ++i) bad += !s.finite(bh * Tq + i);
        ATTNSCOPE_FUZZ_CHECK(s.nonfinite_rows[bh] == bad);
    }
    for (std::size_t b = 0; b < B; ++b)
        for (std::size_t h = 0; h < H; ++h)
            for (std::size_t i = 0; i < Tq; ++i) {
                const std::size_t r = s.row(b, h, i);
                std::int64_t seen = 0;
                bool finite = true;
                for (std::size_t j = 0; j < Tk; ++j) {
                    const T m = tr.masked()(b, h, i, j);
                    const bool visible = tr.mask(b, i, j) && !(tr.bias.size() && tr.bias(b, h, i, j) == -inf);
                    seen += visible;
                    // (a score within 2^6 of overflow may overflow in the summaries' own
                    // product, which sums in another order: arithmetic, as above)
                    finite &= !visible || std::fabs(m) < std::numeric_limits<T>::max() / 64;
                }
                if (!finite) {
                    // a row the summaries found not finite is marked alike, field by field
                    if (!s.finite(r)) {
                        ATTNSCOPE_FUZZ_CHECK(std::isnan(s.entropy[r]) && std::isnan(s.effective_keys[r]) &&
                                             std::isnan(s.max_weight[r]) && std::isnan(s.mean_distance[r]) &&
                                             s.max_key[r] == -1 && !s.counted(r));
                        for (std::size_t k = 0; k < K; ++k) ATTNSCOPE_FUZZ_CHECK(s.topk_index[r * K + k] == -1);
                    }
                    continue;
                }
                // δ, the bound on a score's difference (above), and what it allows in a weight
                const Tensor<T, 4>& Qs = tr.Q_rot.size() ? tr.Q_rot : tr.Q;
                const Tensor<T, 4>& Ks = tr.K_rot.size() ? tr.K_rot : tr.K;
                const std::size_t g = p.dims.kv_head(h), Dk = p.dims.Dk;
                double delta = 0;
                for (std::size_t j = 0; j < Tk; ++j) {
                    if (!tr.mask(b, i, j)) continue;
                    double dot = 0;
                    for (std::size_t c = 0; c < Dk; ++c)
                        dot += std::fabs(double(Qs(b, h, i, c)) * double(Ks(b, g, j, c)));
                    delta = std::max(delta, dot * std::fabs(double(p.scale)));
                }
                delta *= double(Dk + 2) * double(std::numeric_limits<T>::epsilon());
                if (delta > 0.25) continue;  // the weights themselves are not known to 50%
                const double wtol = tol + 2.5 * delta;
                ATTNSCOPE_FUZZ_CHECK(s.visible_keys[r] == seen);
                if (seen == 0) {
                    ATTNSCOPE_FUZZ_CHECK(s.max_key[r] == -1 && s.row_sum[r] == 0);
                    continue;
                }
                const long long q = p.mask.query_position(b, i);
                double sum = 0, sink = 0, near = 0, dist = 0, top = 0, far = 0;
                for (std::size_t j = 0; j < Tk; ++j) {
                    const double w = double(tr.weights(b, h, i, j));
                    const long long k = p.mask.key_position(b, j);
                    const double d = double(k > q ? k - q : q - k);
                    sum += w, dist += w * d, top = std::max(top, w);
                    if (w > 0) far = std::max(far, d);
                    if (k >= 0 && k < (long long)*s.spec.sink_keys) sink += w;
                    if (k <= q && k > q - (long long)s.spec.local) near += w;
                }
                if (!std::isfinite(sum)) continue;  // e.g. a sink logit that overflowed
                ATTNSCOPE_FUZZ_CHECK(s.finite(r));  // finite scores and weights: a finite summary
                ATTNSCOPE_FUZZ_CHECK(std::fabs(s.row_sum[r] - sum) <= tol);
                ATTNSCOPE_FUZZ_CHECK(std::fabs(s.sink_mass[r] - sink) <= wtol);
                ATTNSCOPE_FUZZ_CHECK(std::fabs(s.local_mass[r] - near) <= wtol);
                ATTNSCOPE_FUZZ_CHECK(std::fabs(s.mean_distance[r] - dist) <= wtol * (1 + far));
                ATTNSCOPE_FUZZ_CHECK(std::fabs(s.max_weight[r] - top) <= wtol);
                double ent = 0;
                for (std::size_t j = 0; j < Tk && sum > 0; ++j) {
                    const double w = double(tr.weights(b, h, i, j)) / sum;
                    if (w > 0) ent -= w * std::log(w);
                }
                ATTNSCOPE_FUZZ_CHECK(std::fabs(s.entropy[r] - ent) <= wtol * (1 + ent + std::log(double(Tk))) + 1e-5);
                // the top-k: largest first, each slot's weight the key's, -1 slots last, and
                // no key left out heavier than the last slot
                if (K > 0 && std::int64_t(K) <= seen) {
                    double out = 0;
                    for (std::size_t j = 0; j < Tk; ++j)
                        if (std::find(&s.topk_index[r * K], &s.topk_index[r * K] + K, std::int64_t(j)) ==
                            &s.topk_index[r * K] + K)
                            out = std::max(out, double(tr.weights(b, h, i, j)));
                    ATTNSCOPE_FUZZ_CHECK(out <= s.topk_weight[r * K + K - 1] + wtol);
                }
                for (std::size_t k = 0; k < K; ++k) {
                    const std::int64_t j = s.topk_index[r * K + k];
                    const double w = s.topk_weight[r * K + k];
                    if (std::int64_t(k) >= seen) {
                        ATTNSCOPE_FUZZ_CHECK(j == -1 && w == 0);
                        continue;
                    }
                    ATTNSCOPE_FUZZ_CHECK(j >= 0 && std::size_t(j) < Tk);
                    ATTNSCOPE_FUZZ_CHECK(std::fabs(w - double(tr.weights(b, h, i, std::size_t(j)))) <= wtol);
                    if (k > 0) ATTNSCOPE_FUZZ_CHECK(w <= s.topk_weight[r * K + k - 1]);
                    if (k > 0 && w == s.topk_weight[r * K + k - 1])
                        ATTNSCOPE_FUZZ_CHECK(j > s.topk_index[r * K + k - 1]);
                }
            }
}

// Bit for bit (NaN included).
template <typename V>
bool same_bits(const std::vector<V>& a, const std::vector<V>& b) {
    return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(V)) == 0);
}

bool same_summary(const Summary& a, const Summary& b) {
    return same_bits(a.entropy, b.entropy) && same_bits(a.max_weight, b.max_weight) &&
           same_bits(a.sink_mass, b.sink_mass) && same_bits(a.local_mass, b.local_mass) &&
           same_bits(a.mean_distance, b.mean_distance) && same_bits(a.row_sum, b.row_sum) &&
           same_bits(a.max_key, b.max_key) && same_bits(a.visible_keys, b.visible_keys) &&
           same_bits(a.topk_index, b.topk_index) && same_bits(a.topk_weight, b.topk_weight) &&
           same_bits(a.distance_profile, b.distance_profile) && same_bits(a.nonfinite_rows, b.nonfinite_rows);
}

template <typename T>
void run(const Bundle& bundle, const Spec& spec, const Variant& variant) {
    Problem<T> p;
    if (!fuzz::accepts([&] { p = make_problem<T>(bundle, spec); })) return;
    check_problem(p, spec);
    if (work(p.dims) > 1e6) return;

    Compute all;
    all.threads = 1;
    const Trace<T> tr = attend(p, all);
    check_trace(p, tr);

    // Summaries alone, then beside the variant's stages (or all of them), on its threads.
    Compute sum;
    sum.keep = StageSet();
    sum.summary = SummarySpec{3, 2, 3};
    sum.threads = 1;
    const Trace<T> alone = attend(p, sum);
    ATTNSCOPE_FUZZ_CHECK(alone.summary != nullptr);
    check_summary(p, tr, *alone.summary);
    sum.keep = variant.keep.empty() ? all.keep : stage_set(variant.keep);
    sum.threads = variant.threads;
    sum.parallel_min_flop = 0;
    const Trace<T> beside = attend(p, sum);
    ATTNSCOPE_FUZZ_CHECK(same_summary(*alone.summary, *beside.summary));
    if (variant.keep.empty()) return;

    Compute some;
    some.keep = stage_set(variant.keep);
    some.threads = variant.threads;
    some.parallel_min_flop = 0;  // small as fuzz inputs are, really run on those threads
    const Trace<T> part = attend(p, some);
    ATTNSCOPE_FUZZ_CHECK(part.fully_masked.size() == tr.fully_masked.size());
    if (some.keep[kQ]) ATTNSCOPE_FUZZ_CHECK(same(part.Q, tr.Q));
    if (some.keep[kK]) ATTNSCOPE_FUZZ_CHECK(same(part.K, tr.K));
    if (some.keep[kV]) ATTNSCOPE_FUZZ_CHECK(same(part.V, tr.V));
    if (some.keep[kScores]) ATTNSCOPE_FUZZ_CHECK(same(part.scores, tr.scores));
    if (some.keep[kMask]) ATTNSCOPE_FUZZ_CHECK(same(part.mask, tr.mask));
    if (some.keep[kMaskedScores]) ATTNSCOPE_FUZZ_CHECK(same(part.masked(), tr.masked()));
    if (some.keep[kWeights]) ATTNSCOPE_FUZZ_CHECK(same(part.weights, tr.weights));
    if (some.keep[kContext]) ATTNSCOPE_FUZZ_CHECK(same(part.context, tr.context));
    if (some.keep[kOutput]) ATTNSCOPE_FUZZ_CHECK(same(part.output, tr.output));
}

}  // namespace

// Byte 0 alone now and then; an .npz bundle through the structure-aware mutator; JSON
// (and anything else) byte by byte, with the dictionary.
extern "C" std::size_t LLVMFuzzerCustomMutator(std::uint8_t* data, std::size_t size, std::size_t max_size,
                                               unsigned int seed) {
    if (size > 1 && seed % 8 == 0) {
        data[0] = std::uint8_t(seed >> 3);
        return size;
    }
    if (size > 3 && max_size > 1 && data[1] == 'P' && data[2] == 'K')
        return 1 + fuzz::mutate_npz(data + 1, size - 1, max_size - 1, seed);
    return LLVMFuzzerMutate(data, size, max_size);
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 1) return 0;
    const Spec spec = spec_from(data[0]);
    const Variant& variant = kVariants[data[0] >> 6];
    const std::string_view bytes = fuzz::as_bytes(data + 1, size - 1);

    Bundle bundle;
    const bool npz = bytes.substr(0, 2) == "PK";
    if (!fuzz::accepts([&] {
            bundle = npz ? parse_npz(bytes, "fuzz.npz", fuzz::kMaxBytes) : parse_json_bundle(bytes, "fuzz.json");
        }))
        return 0;
    run<double>(bundle, spec, variant);
    run<float>(bundle, spec, variant);
    return 0;
}
