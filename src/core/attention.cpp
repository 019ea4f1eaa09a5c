// Core: the attention computation, stage by stage. See attention.hpp for the shape legend.
#include "attnscope/core/attention.hpp"

#include "blas.hpp"
#include "kernels.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <exception>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

namespace attnscope {
namespace {

// Run-time check of a shape comment, so the comments cannot drift from the code.
template <typename E, std::size_t N>
void check_shape(const E& t, const std::array<std::size_t, N>& expected, const char* name) {
    const auto& s = t.shape();
    if (s.size() != N || !std::equal(s.begin(), s.end(), expected.begin()))
        throw std::logic_error(std::string("internal shape check failed for ") + name);
}

// (B, T, H*D) -> (B, H, T, D): feature h*D + j belongs to head h.
template <typename T>
Tensor<T, 4> split_heads(const Buffer<T>& flat, std::size_t B, std::size_t T_, std::size_t H, std::size_t D) {
    Tensor<T, 4> out = Tensor<T, 4>::from_shape({B, H, T_, D});
    for (std::size_t b = 0; b < B; ++b)
        for (std::size_t t = 0; t < T_; ++t)
            for (std::size_t h = 0; h < H; ++h) {
                const T* from = flat.data() + (b * T_ + t) * H * D + h * D;
                std::copy(from, from + D, &out(b, h, t, 0));
            }
    return out;
}

// Which K/V head serves query head h. Today every query head has its own; grouped-query
// attention (fewer K/V heads) changes only this mapping and the K/V head count.
inline std::size_t kv_head(std::size_t h) { return h; }

// Last key query i may see under the causal mask (may be negative: none).
long long causal_last(const Dims& d, CausalAlign align, std::size_t i) {
    return align == CausalAlign::top_left ? (long long)i : (long long)i + (long long)d.Tk - (long long)d.Tq;
}

// Keys query i of batch item b may see; returns whether any is visible.
bool visible_row(const Dims& d, const xt::xtensor<bool, 2>* pad, bool causal, CausalAlign align, std::size_t b,
                 std::size_t i, bool* out) {
    long long last = causal ? causal_last(d, align, i) : (long long)d.Tk;
    bool any = false;
    for (std::size_t j = 0; j < d.Tk; ++j) {
        out[j] = !(pad && (*pad)(b, j)) && (long long)j <= last;
        any |= out[j];
    }
    return any;
}

// Query rows per tile: about 16 MiB of scores. Large enough that BLAS's packing of the
// head's K and V (once per call) is amortised over many rows (T=4096, H=16: 4% faster
// than 4 MiB tiles); small enough that the working set stays bounded whatever Tq is.
std::size_t tile_rows(const Dims& d, std::size_t value_size) {
    std::size_t rows = (std::size_t{16} << 20) / std::max<std::size_t>(1, d.Tk * value_size);
    // At least 8 tiles in all, to share among threads when (batch, head) pairs are few.
    // (Never by thread count: --threads must not change how BLAS rounds a row.)
    const std::size_t pairs = std::max<std::size_t>(d.B * d.H, 1);
    if (pairs < 8) rows = std::min(rows, (d.Tq * pairs + 7) / 8);
    return std::min(std::max<std::size_t>(rows, 64), std::max<std::size_t>(d.Tq, 1));
}

std::size_t thread_count(const Compute& how) {
    std::size_t n = how.threads ? how.threads : std::thread::hardware_concurrency();
    return std::max<std::size_t>(n, 1);
}

// Runs work(item, worker) for item in [0, n) on `threads` threads; rethrows the first error.
template <typename F>
void parallel_for(std::size_t n, std::size_t threads, F&& work) {
    threads = std::min(threads, n);
    if (threads <= 1) {
        for (std::size_t k = 0; k < n; ++k) work(k, 0);
        return;
    }
    std::atomic<std::size_t> next{0};
    std::exception_ptr error;
    std::mutex error_lock;
    auto loop = [&](std::size_t worker) {
        try {
            for (std::size_t k; (k = next.fetch_add(1)) < n;) work(k, worker);
        } catch (...) {
            std::lock_guard<std::mutex> g(error_lock);
            if (!error) error = std::current_exception();
            next = n;
        }
    };
    std::vector<std::thread> pool;
    for (std::size_t t = 1; t < threads; ++t) pool.emplace_back(loop, t);
    loop(0);
    for (auto& t : pool) t.join();
    if (error) std::rethrow_exception(error);
}

}  // namespace

std::size_t stage_index(std::string_view name) {
    auto it = std::find(kStageNames.begin(), kStageNames.end(), name);
    if (it == kStageNames.end()) throw std::invalid_argument("unknown stage " + std::string(name));
    return std::size_t(it - kStageNames.begin());
}

StageSet stage_set(const std::vector<std::string>& names) {
    StageSet s;
    for (const auto& n : names) s.set(stage_index(n));
    return s;
}

namespace {

// Y (rows, n) = X (rows, in) · W (in, n) (+ b), over all batch rows: row blocks on our
// threads, each a single-threaded BLAS product. (OpenBLAS's own threads would spin,
// waiting for work, long after the product is done, taking cores from the heads.)
template <typename T>
void project(const T* X, std::size_t rows, std::size_t in, const Tensor<T, 2>& W,
             const std::optional<Tensor<T, 1>>& b, T* Y, std::size_t threads) {
    const std::size_t n = W.shape(1);
    // Blocks by row count alone, never by thread count: BLAS may round a row differently
    // in a block of another height, and --threads must not change a number.
    const std::size_t block = std::max<std::size_t>(256, (rows + 7) / 8);
    parallel_for((rows + block - 1) / block, threads, [&](std::size_t k, std::size_t) {
        const std::size_t r0 = k * block, m = std::min(block, rows - r0);
        if (b)
            for (std::size_t r = r0; r < r0 + m; ++r) std::copy(b->begin(), b->end(), Y + r * n);
        gemm<T>(false, false, m, n, in, T(1), X + r0 * in, in, W.data(), n, b ? T(1) : T(0), Y + r0 * n, n);
    });
}

}  // namespace

Tensor<bool, 3> attention_mask(const Dims& d, const xt::xtensor<bool, 2>* key_padding_mask, bool causal,
                               CausalAlign align) {
    // Top-left: query i sees keys j <= i (torch.tril). Bottom-right: the queries are the
    // last Tq of Tk positions, so query i sits at i + Tk - Tq (the KV-cache view).
    Tensor<bool, 3> mask = Tensor<bool, 3>::from_shape({d.B, d.Tq, d.Tk});
    for (std::size_t b = 0; b < d.B; ++b)
        for (std::size_t i = 0; i < d.Tq; ++i) visible_row(d, key_padding_mask, causal, align, b, i, &mask(b, i, 0));
    return mask;
}

std::size_t planned_bytes(const Dims& d, std::size_t vs, const Compute& how, bool masking) {
    // Saturating arithmetic: a shape from a hostile header must not wrap around.
    auto mul = [](std::size_t a, std::size_t b) {
        std::size_t r;
        return __builtin_mul_overflow(a, b, &r) ? std::numeric_limits<std::size_t>::max() : r;
    };
    auto add = [](std::size_t a, std::size_t b) {
        std::size_t r;
        return __builtin_add_overflow(a, b, &r) ? std::numeric_limits<std::size_t>::max() : r;
    };
    const auto& k = how.keep;
    std::size_t bh = mul(d.B, d.H), scores = mul(mul(bh, d.Tq), d.Tk);
    std::size_t total = 0;
    // working set: flat projections, merged heads, per-thread tiles
    total = add(total, mul(vs, mul(d.B, add(mul(d.Tq, mul(d.H, d.Dk)), mul(d.Tk, mul(d.H, add(d.Dk, d.Dv)))))));
    total = add(total, mul(vs, mul(mul(d.B, d.Tq), mul(d.H, d.Dv))));
    total = add(total, mul(thread_count(how), mul(add(mul(2, vs), 1), mul(tile_rows(d, vs), d.Tk))));
    // kept stages
    if (k[kQ]) total = add(total, mul(vs, mul(mul(bh, d.Tq), d.Dk)));
    if (k[kK]) total = add(total, mul(vs, mul(mul(bh, d.Tk), d.Dk)));
    if (k[kV]) total = add(total, mul(vs, mul(mul(bh, d.Tk), d.Dv)));
    for (Stage s : {kScores, kMaskedScores, kWeights})
        if (k[s] && !(s == kMaskedScores && !masking && k[kScores]))  // else held as scores
            total = add(total, mul(vs, scores));
    if (k[kMask]) total = add(total, mul(mul(d.B, d.Tq), d.Tk));
    if (k[kContext]) total = add(total, mul(vs, mul(mul(bh, d.Tq), d.Dv)));
    if (k[kOutput]) total = add(total, mul(vs, mul(mul(d.B, d.Tq), d.Dout)));
    return total;
}

template <typename T>
Trace<T> attend(const Problem<T>& p, const Compute& how) {
    // x        (B, Tq, Dm)       src (x or memory) (B, Tk, Dkv)
    // W_Q      (Dm, H*Dk)        W_K (Dkv, H*Dk)     W_V (Dkv, H*Dv)     W_O (H*Dv, Dout)
    const Dims& d = p.dims;
    const std::size_t B = d.B, H = d.H, Tq = d.Tq, Tk = d.Tk, Dk = d.Dk, Dv = d.Dv;
    const StageSet keep = how.keep;
    // Starting a thread costs ~0.1 ms here: a run with less arithmetic than a few times
    // that stays on this one (the classroom examples: compute phase 0.2 ms -> 0.05 ms).
    const double flop = 2.0 * double(B) * double(H) * (double(Tq) * double(d.Dm) * double(Dk) +
                                                       double(Tk) * double(d.Dkv) * double(Dk + Dv) +
                                                       double(Tq) * double(Tk) * double(Dk + Dv));
    const std::size_t threads = flop < how.parallel_min_flop ? 1 : thread_count(how);
    Trace<T> tr;
    tr.dims = d;
    tr.batched = p.batched;
    tr.scale = p.scale;
    tr.kept = keep;
    const Tensor<T, 3>& src = p.src();
    const xt::xtensor<bool, 2>* pad = p.key_padding_mask ? &*p.key_padding_mask : nullptr;

    // What must be computed: everything up to the last stage asked for.
    const bool need_output = keep[kOutput];
    const bool need_context = need_output || keep[kContext];
    const bool need_weights = need_context || keep[kWeights];
    const bool need_scores = need_weights || keep[kScores] || keep[kMaskedScores];
    const bool need_q = need_scores || keep[kQ], need_k = need_scores || keep[kK], need_v = need_context || keep[kV];

    // 1) Projections, in row blocks on our threads: (B*Tq, Dm) x (Dm, H*Dk) -> (B*Tq, H*Dk),
    //    and likewise K, V from src. The flat (B, T, H*D) layout is kept; heads are column blocks.
    blas_threads(1);  // every product below runs on our threads, one BLAS call each
    Buffer<T> qf, kf, vf;
    if (need_q) qf.resize(B * Tq * H * Dk), project(p.x.data(), B * Tq, d.Dm, p.W_Q, p.b_Q, qf.data(), threads);
    if (need_k) kf.resize(B * Tk * H * Dk), project(src.data(), B * Tk, d.Dkv, p.W_K, p.b_K, kf.data(), threads);
    if (need_v) vf.resize(B * Tk * H * Dv), project(src.data(), B * Tk, d.Dkv, p.W_V, p.b_V, vf.data(), threads);
    if (p.spec.zero_key && need_k)  // experiment: key vector j := 0, so its score column is 0
        for (std::size_t b = 0; b < B; ++b)
            std::fill_n(kf.data() + (b * Tk + *p.spec.zero_key) * H * Dk, H * Dk, T(0));
    // (Rotary position embeddings, when they come, rotate Q and K here, between the
    // projections and the scores, as a stage of their own.)
    // Where a kept stage of n elements of `size` bytes is to live (Compute::place; null:
    // ordinary memory). A PlaceNext holding it applies it to the stage's allocation.
    auto place = [&](Stage s, std::size_t n, std::size_t size) -> std::shared_ptr<Placement> {
        return how.place && n > 0 ? how.place(s, n * size) : nullptr;
    };
    if (keep[kQ]) {
        PlaceNext at(place(kQ, B * H * Tq * Dk, sizeof(T)));
        tr.Q = split_heads(qf, B, Tq, H, Dk), check_shape(tr.Q, std::array{B, H, Tq, Dk}, "Q");
    }
    if (keep[kK]) {
        PlaceNext at(place(kK, B * H * Tk * Dk, sizeof(T)));
        tr.K = split_heads(kf, B, Tk, H, Dk), check_shape(tr.K, std::array{B, H, Tk, Dk}, "K");
    }
    if (keep[kV]) {
        PlaceNext at(place(kV, B * H * Tk * Dv, sizeof(T)));
        tr.V = split_heads(vf, B, Tk, H, Dv), check_shape(tr.V, std::array{B, H, Tk, Dv}, "V");
    }

    // 2) Mask: padding AND causal -> (B, Tq, Tk), true = may attend. Rows with no key.
    const bool masking = p.masking();
    if (keep[kMask]) {
        PlaceNext at(place(kMask, B * Tq * Tk, sizeof(bool)));
        tr.mask = attention_mask(d, pad, p.spec.causal, p.spec.causal_align);
    }
    {
        std::vector<char> row(Tk);
        for (std::size_t b = 0; b < B; ++b)
            for (std::size_t i = 0; i < Tq; ++i)
                if (!visible_row(d, pad, p.spec.causal, p.spec.causal_align, b, i, reinterpret_cast<bool*>(row.data())))
                    tr.fully_masked.push_back({b, i});
    }
    if (!need_scores) return tr;

    auto alloc4 = [&](Stage s, std::size_t last) {
        if (!keep[s]) return Tensor<T, 4>();
        PlaceNext at(place(s, B * H * Tq * last, sizeof(T)));
        return Tensor<T, 4>::from_shape({B, H, Tq, last});
    };
    tr.scores = alloc4(kScores, Tk);
    // With nothing masked, masked_scores equals scores: when both are kept, hold one
    // (unless masked_scores has a place of its own, e.g. its dump file).
    if (keep[kMaskedScores]) {
        PlaceNext at(place(kMaskedScores, B * H * Tq * Tk, sizeof(T)));
        tr.masked_is_scores = !masking && keep[kScores] && !at.placing();
        if (!tr.masked_is_scores) tr.masked_scores = Tensor<T, 4>::from_shape({B, H, Tq, Tk});
    }
    tr.weights = alloc4(kWeights, Tk);
    tr.context = alloc4(kContext, Dv);
    Buffer<T> merged(need_context ? B * Tq * H * Dv : 0);  // (B, Tq, H*Dv)

    // 3) Per (batch, head, tile of query rows), on our threads with single-threaded BLAS:
    //    scores   (rows, Dk) x (Dk, Tk) -> (rows, Tk), times scale
    //    masked   -inf where the mask is false
    //    weights  softmax over keys: exp(m - max) / sum; all-zero for a row with no key
    //    context  (rows, Tk) x (Tk, Dv) -> (rows, Dv), written into merged (B, Tq, H*Dv)
    const std::size_t rows = tile_rows(d, sizeof(T));
    const std::size_t tiles = (Tq + rows - 1) / rows;
    struct Scratch {
        std::vector<T> s, w;
        std::vector<char> visible;
    };
    std::vector<Scratch> scratch(std::min(threads, B * H * tiles));
    if (how.progress_total) *how.progress_total = B * H * tiles;
    parallel_for(B * H * tiles, threads, [&](std::size_t item, std::size_t worker) {
        const std::size_t b = item / (H * tiles), h = item / tiles % H, i0 = item % tiles * rows;
        const std::size_t n = std::min(rows, Tq - i0);
        Scratch& sc = scratch[worker];
        T* S = keep[kScores] ? &tr.scores(b, h, i0, 0) : (sc.s.resize(rows * Tk), sc.s.data());
        T* W = keep[kWeights] ? &tr.weights(b, h, i0, 0) : keep[kScores] ? (sc.w.resize(rows * Tk), sc.w.data()) : S;
        gemm<T>(false, true, n, Tk, Dk, p.scale, qf.data() + (b * Tq + i0) * H * Dk + h * Dk, H * Dk,
                kf.data() + b * Tk * H * Dk + kv_head(h) * Dk, H * Dk, T(0), S, Tk);
        if (masking) sc.visible.resize(Tk);
        for (std::size_t r = 0; r < n; ++r) {
            const bool* vis = nullptr;
            if (masking) {
                visible_row(d, pad, p.spec.causal, p.spec.causal_align, b, i0 + r, reinterpret_cast<bool*>(sc.visible.data()));
                vis = reinterpret_cast<const bool*>(sc.visible.data());
            }
            T* M = keep[kMaskedScores] && !tr.masked_is_scores ? &tr.masked_scores(b, h, i0 + r, 0) : nullptr;
            kernels::masked_softmax_row(S + r * Tk, vis, M, W + r * Tk, Tk);
        }
        if (how.progress_done) ++*how.progress_done;
        if (!need_context) return;
        T* C = merged.data() + (b * Tq + i0) * H * Dv + h * Dv;
        gemm<T>(false, false, n, Dv, Tk, T(1), W, Tk, vf.data() + b * Tk * H * Dv + kv_head(h) * Dv, H * Dv, T(0), C,
                H * Dv);
        if (keep[kContext])
            for (std::size_t r = 0; r < n; ++r) std::copy(C + r * H * Dv, C + r * H * Dv + Dv, &tr.context(b, h, i0 + r, 0));
    });
    if (keep[kScores]) check_shape(tr.scores, std::array{B, H, Tq, Tk}, "scores");
    if (keep[kWeights]) check_shape(tr.weights, std::array{B, H, Tq, Tk}, "weights");
    if (keep[kContext]) check_shape(tr.context, std::array{B, H, Tq, Dv}, "context");
    if (!need_output) return tr;

    // 4) Output: merged heads (B*Tq, H*Dv) x (H*Dv, Dout) (+ b_O) -> (B, Tq, Dout),
    //    or the merged heads themselves when there is no W_O.
    {
        PlaceNext at(place(kOutput, B * Tq * d.Dout, sizeof(T)));
        tr.output = Tensor<T, 3>::from_shape({B, Tq, d.Dout});
    }
    if (p.W_O) project(merged.data(), B * Tq, H * Dv, *p.W_O, p.b_O, tr.output.data(), threads);
    else std::copy(merged.begin(), merged.end(), tr.output.begin());
    check_shape(tr.output, std::array{B, Tq, d.Dout}, "output");
    return tr;
}

template Trace<float> attend<float>(const Problem<float>&, const Compute&);
template Trace<double> attend<double>(const Problem<double>&, const Compute&);

}  // namespace attnscope
