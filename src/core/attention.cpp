// Core: the attention computation, stage by stage. See attention.hpp for the shape legend.
// Here: the memory plan, and Attention::run(), which projects (1), masks (2) and hands
// the tiles to dense_tiles.cpp (3) and summary_tiles.cpp (3'), then the outputs (4, 5).
#include "attnscope/core/attention.hpp"

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

#include "attnscope/base/errors.hpp"
#include "attnscope/core/linear.hpp"
#include "blas.hpp"
#include "kernels.hpp"
#include "run.hpp"
#include "steps.hpp"

namespace attnscope {
using namespace run;

namespace {

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

}  // namespace

StageSet stage_set(const std::vector<std::string>& names) {
    StageSet s;
    for (const auto& n : names) {
        const auto id = find_stage(n);
        if (!id) throw std::invalid_argument("unknown stage " + n);
        s.set(*id);
    }
    return s;
}

namespace {

// Y (rows, n) = X (rows, in) · W (in, n) (+ b), over all batch rows: row blocks on our
// threads, each a single-threaded BLAS product. (OpenBLAS's own threads would spin,
// waiting for work, long after the product is done, taking cores from the heads.)
template <typename T>
void project(const T* X, std::size_t rows, std::size_t in, const Tensor<T, 2>& W, const std::optional<Tensor<T, 1>>& b,
             T* Y, std::size_t threads) {
    const std::size_t n = W.shape(1);
    // Blocks by row count alone, never by thread count: BLAS may round a row differently
    // in a block of another height, and --threads must not change a number.
    const std::size_t block = std::max<std::size_t>(256, (rows + 7) / 8);
    parallel_for((rows + block - 1) / block, threads, [&](std::size_t k, std::size_t) {
        const std::size_t r0 = k * block, m = std::min(block, rows - r0);
        linear(X + r0 * in, m, in, W.data(), in, n, Layout::math, b ? b->data() : nullptr, Y + r0 * n, n);
    });
}

}  // namespace

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
    const std::size_t G = d.G ? d.G : d.H;
    const std::size_t bh = mul(d.B, d.H);
    std::size_t total = 0;
    // working set: flat projections, merged heads, per-thread tiles
    total = add(total, mul(vs, mul(d.B, add(mul(d.Tq, mul(d.H, d.Dk)), mul(d.Tk, mul(G, add(d.Dk, d.Dv)))))));
    total = add(total, mul(vs, mul(mul(d.B, d.Tq), mul(d.H, d.Dv))));
    // per-thread tiles of whole rows (none when the summaries are all a run wants of them):
    // only as many threads as there are tiles ever hold one
    if (wants_dense_tiles(how.keep, how.summary.has_value()))
        total = add(total, mul(tile_workers(d, vs, how), mul(add(mul(2, vs), 1), mul(tile_rows(d, vs), d.Tk))));
    // kept stages: their elements (the stage table), in the run's precision or as bools;
    // masked_scores kept with scores is held as scores when nothing is masked
    for (const StageInfo& s : stage_table())
        if (k[s.id] && !(s.id == kMaskedScores && !masking && k[kScores]))
            total = add(total, mul(s.value == ValueKind::boolean ? sizeof(bool) : vs, s.elements(d)));
    if (how.summary) {
        // the arrays (at most 64 distance bins), the tiles' bin sums, and per thread a block of
        // scores and its rows' states
        const std::size_t K = how.summary->topk;
        total = add(total, mul(mul(bh, d.Tq), add(8 * 9 + 8 * 2, mul(K, 16))));
        total = add(total, mul(mul(bh, 64 * 8), add(2, d.Tq / kSummaryRows)));
        // (float: and the head's keys in panels, and the tile's queries)
        const std::size_t block = (kSummaryRows + 6) * (kSummaryKeys + 34) * vs + kSummaryRows * (64 + 16) * 8;
        const std::size_t packed =
            vs == sizeof(float) ? mul(mul(add(add(d.Tk, kSummaryRows), 16), d.Dk), vs) : 0;  // keys + queries
        total = add(total, mul(thread_count(how), add(block, packed)));
    }
    return total;
}

template <typename T>
void check_memory_limit(const Bundle& bundle, const Problem<T>& p, const Compute& how, std::size_t limit) {
    const Dims& d = p.dims;
    std::size_t read = 0;
    for (const auto& [name, a] : bundle.arrays) {
        read += a.values.size() * sizeof(double) + a.stored.size();
        for (const auto& s : a.strings) read += sizeof(std::string) + s.capacity();  // token labels as read
    }
    std::size_t typed = sizeof(T) * (d.B * d.Tq * d.Dm + (p.cross ? d.B * d.Tk * d.Dkv : 0) + d.Dm * d.H * d.Dk +
                                     d.Dkv * d.G * (d.Dk + d.Dv) + (p.W_O ? d.H * d.Dv * d.Dout : 0) +
                                     (p.attn_bias ? p.attn_bias->size() : 0));
    typed += p.query_tokens.bytes() + (p.key_tokens.same_as(p.query_tokens) ? 0 : p.key_tokens.bytes());
    std::size_t run = planned_bytes(d, sizeof(T), how, !p.masked_is_scores());
    std::size_t total = read + typed;
    if (__builtin_add_overflow(total, run, &total)) total = std::numeric_limits<std::size_t>::max();
    if (total <= limit) return;
    // Each thread holds tiles of its own: with many threads they can be most of the run.
    Compute one = how;
    one.threads = 1;
    const std::size_t extra = run - std::min(run, planned_bytes(d, sizeof(T), one, !p.masked_is_scores()));
    const bool threads_cost = extra > run / 2;
    // The (B, H, Tq, Tk) stages: when they are most of it, per-row summaries are the way.
    std::size_t dense = 0;
    for (Stage s : {kScores, kBias, kMaskedScores, kWeights})
        if (how.keep[s]) dense += sizeof(T) * d.B * d.H * d.Tq * d.Tk;
    const bool dense_cost = !threads_cost && dense > run / 2;
    throw MemoryLimitError("the run needs " + format_bytes(total) + " (inputs " + format_bytes(read + typed) +
                           ", stages and working set " + format_bytes(run) +
                           (threads_cost ? ", of which " + format_bytes(extra) + " for the tiles of " +
                                               std::to_string(tile_workers(d, sizeof(T), how)) + " threads"
                                         : std::string()) +
                           "), over the memory limit of " + format_bytes(limit) +
                           (threads_cost ? "; use fewer {threads}, or raise {max_memory}"
                            : dense_cost
                                ? "; the (B, H, Tq, Tk) stages take " + format_bytes(dense) +
                                      ": use {summary} (per-row entropy, masses and {topk} keys, memory growing "
                                      "with Tq) with {stages} output, or raise {max_memory}"
                                : "; keep fewer stages with {stages}, or raise {max_memory}"));
}

template void check_memory_limit<float>(const Bundle&, const Problem<float>&, const Compute&, std::size_t);
template void check_memory_limit<double>(const Bundle&, const Problem<double>&, const Compute&, std::size_t);

namespace {

// One run of attend(): its steps, over the state they share (run.hpp).
template <typename T>
class Attention {
   public:
    Attention(const Problem<T>& p, const Compute& how) : s_(p, how) {
        const StageSet has = stages_of(p);
        s_.keep = how.keep & has;
        s_.need = with_prerequisites(s_.keep) & has;  // everything up to the last stage asked for
        if (how.summary) s_.need |= with_prerequisites(StageSet().set(kWeights)) & has;
        // Only the kept (query, key) stages need every key of a tile.
        s_.narrow = !(s_.keep[kScores] || s_.keep[kMaskedScores] || s_.keep[kWeights] || s_.keep[kBias]);
        // Each row's softmax runs over its own keys, without flags, when the span is exactly
        // them; kept stages or not, so that what is kept never changes a number.
        s_.exact = !p.has_bias() && p.mask.span_exact();
        s_.threads = flop() < how.parallel_min_flop ? 1 : thread_count(how);
        s_.tr.dims = s_.d;
        s_.tr.batched = p.batched;
        s_.tr.scale = p.scale;
        s_.tr.kept = s_.keep;
    }

    Trace<T> run() {
        Arena own;  // this run's, unless the caller lends one (its blocks outlive it in the trace)
        plan_memory(s_.how.arena ? *s_.how.arena : own);
        project_all();  // 1) Q, K, V (and Q_rot, K_rot)
        mask();         // 2) mask, fully masked rows
        if (!s_.need[kScores]) return std::move(s_.tr);
        allocate_tile_stages();  // 3) scores .. context, by tiles of query rows
        s_.scan_scores = !scores_bounded();
        // The tiles of whole rows, unless the summaries are all this run wants of them.
        const bool dense = wants_dense_tiles(s_.keep, s_.how.summary.has_value());
        count_tiles(dense);
        if (dense) dense_tiles(s_);                     // dense_tiles.cpp
        if (s_.how.summary) summary_tiles(s_, !dense);  // 3') summary_tiles.cpp
        note_nonfinite_heads(kContext, s_.merged, s_.d.Tq, s_.d.H, s_.d.Dv);
        if (s_.need[kHeadOutput]) head_output();  // 4) per-head outputs, when asked for
        if (s_.need[kOutput]) output();           // 5) output
        return std::move(s_.tr);
    }

   private:
    // Each kept stage's own place (Compute::place), asked once before anything is computed,
    // and the arena: room for every other kept stage and the working buffers, touched on
    // the run's threads.
    void plan_memory(Arena& arena) {
        const Dims& d = s_.d;
        s_.arena = &arena;
        for (std::size_t k = 0; k < kStageCount; ++k)
            if (s_.keep[k] && s_.how.place && s_.stage_bytes(Stage(k)) > 0)
                s_.placed[k] = s_.how.place(Stage(k), s_.stage_bytes(Stage(k)));
        // With nothing masked, masked_scores equals scores: when both are kept, hold one
        // (unless masked_scores has a place of its own, e.g. its dump file).
        s_.tr.masked_is_scores =
            s_.keep[kMaskedScores] && s_.keep[kScores] && s_.p.masked_is_scores() && !s_.placed[kMaskedScores];
        std::size_t bytes = 0;
        for (std::size_t k = 0; k < kStageCount; ++k)
            if (s_.keep[k] && !s_.placed[k] && !(k == kMaskedScores && s_.tr.masked_is_scores))
                bytes += Arena::footprint(s_.stage_bytes(Stage(k)));
        // qf, kf, vf and merged (project_all, allocate_tile_stages)
        const std::size_t G = d.G;
        for (auto [stage, n] : {std::pair{kQ, d.B * d.Tq * d.H * d.Dk},
                                {kK, d.B * d.Tk * G * d.Dk},
                                {kV, d.B * d.Tk * G * d.Dv},
                                {kContext, d.B * d.Tq * d.H * d.Dv}})
            if (s_.need[stage]) bytes += Arena::footprint(n * sizeof(T));
        // each dense-tile worker's scores and/or weights when not kept (dense_tiles.cpp)
        if (s_.need[kScores] && wants_dense_tiles(s_.keep, s_.how.summary.has_value())) {
            const std::size_t rows = dense_rows(s_), tiles = (d.Tq + rows - 1) / rows;
            const std::size_t buffers = std::size_t(!s_.keep[kScores]) + (s_.keep[kScores] && !s_.keep[kWeights]);
            bytes += std::min(s_.threads, d.B * d.H * tiles) * buffers * Arena::footprint(rows * d.Tk * sizeof(T));
        }
        arena.reserve(bytes, s_.threads);
    }

    // Flat buffer `out` sized to n elements, in the arena unless it has storage already.
    void take_buffer(Buffer<T>& out, std::size_t n) {
        PlaceNext at(out.empty() ? s_.scratch(n * sizeof(T)) : nullptr);
        out.resize(n);
    }

    // The progress counter's total: the tiles of both kinds this run computes.
    void count_tiles(bool dense) const {
        const Dims& d = s_.d;
        std::size_t tiles = 0;
        if (dense) tiles += d.B * d.H * ((d.Tq + dense_rows(s_) - 1) / dense_rows(s_));
        if (s_.how.summary) tiles += d.B * d.H * ((d.Tq + kSummaryRows - 1) / kSummaryRows);
        if (s_.how.progress_total) *s_.how.progress_total = tiles;
    }

    // Starting a thread costs ~0.1 ms here: a run with less arithmetic than a few times
    // that stays on this one (the classroom examples: compute phase 0.2 ms -> 0.05 ms).
    double flop() const {
        const Dims& d = s_.d;
        return 2.0 * double(d.B) *
               (double(d.H) * double(d.Tq) * double(d.Dm) * double(d.Dk) +
                double(d.G) * double(d.Tk) * double(d.Dkv) * double(d.Dk + d.Dv) +
                double(d.H) * double(d.Tq) * double(d.Tk) * double(d.Dk + d.Dv));
    }

    // A flat (B, T, H*D) buffer of stage s, (B, H, T, D) as a stage (H: the stage's heads).
    void note_nonfinite_heads(Stage s, const Buffer<T>& flat, std::size_t T_, std::size_t H, std::size_t D) {
        for (std::size_t k = 0; k < flat.size(); ++k)
            if (!std::isfinite(flat[k])) {
                const std::size_t b = k / (T_ * H * D), t = k / (H * D) % T_, h = k % (H * D) / D, j = k % D;
                return s_.note_nonfinite(s, {b, h, t, j}, 4);
            }
    }

    // The scores cannot leave float's range when max |q| · max |k| · |scale| is well inside
    // it (|q · k| <= |q| |k|): then no tile needs scanning. Norms that overflow say nothing.
    bool scores_bounded() const {
        const std::size_t Dk = s_.d.Dk;
        auto largest_norm = [&](const Buffer<T>& flat) {
            double m = 0;
            for (std::size_t r = 0; r < flat.size() / Dk; ++r) {
                double n2 = 0;
                for (std::size_t j = 0; j < Dk; ++j) n2 += double(flat[r * Dk + j]) * double(flat[r * Dk + j]);
                m = std::max(m, n2);
            }
            return std::sqrt(m);
        };
        const double bound = largest_norm(s_.qf) * largest_norm(s_.kf) * std::fabs(double(s_.p.scale));
        return std::isfinite(bound) && bound < 0.25 * double(std::numeric_limits<T>::max());
    }

    // (B, T, H*D) flat -> the kept stage (B, H, T, D) (H: the stage's heads, H or G).
    void keep_heads(Stage s, const Buffer<T>& flat, std::size_t T_, std::size_t H, std::size_t D, Tensor<T, 4>& out) {
        if (!s_.keep[s]) return;
        PlaceNext at(s_.place(s));
        out = split_heads(flat, s_.d.B, T_, H, D);
        check_shape(out, std::array{s_.d.B, H, T_, D}, stage_name(s).c_str());
    }

    // RoPE (steps.hpp) on flat (B, T, H*D) rows, each at its query or key position.
    void rotate(Buffer<T>& flat, std::size_t T_, std::size_t H, std::size_t D, bool queries) {
        const steps::RopeRotation<T> rotation(*s_.p.spec.rope, s_.p.rope_dim);
        parallel_for(s_.d.B * T_, s_.threads, [&](std::size_t bt, std::size_t) {
            const std::size_t b = bt / T_, t = bt % T_;
            const long long pos = queries ? s_.p.mask.query_position(b, t) : s_.p.mask.key_position(b, t);
            rotation(flat.data() + bt * H * D, H, D, pos);
        });
    }

    // K or V: src (B, Tk', Dkv) · W (+ b) -> flat (B, Tk, G*D), and after each batch item's
    // Tk' projected rows its appended ones (nn.MultiheadAttention): <bias_kv> (the bias
    // vector), then <zero>.
    void project_keys(const Tensor<T, 3>& src, const Tensor<T, 2>& W, const std::optional<Tensor<T, 1>>& b,
                      const std::optional<Tensor<T, 1>>& appended, std::size_t D, Buffer<T>& out) {
        const Dims& d = s_.d;
        const std::size_t width = d.G * D, n = d.source_keys();
        take_buffer(out, d.B * d.Tk * width);
        if (!d.extra_keys) {
            project(src.data(), d.B * n, d.Dkv, W, b, out.data(), s_.threads);
            return;
        }
        Buffer<T> rows(d.B * n * width);
        project(src.data(), d.B * n, d.Dkv, W, b, rows.data(), s_.threads);
        for (std::size_t bi = 0; bi < d.B; ++bi) {
            T* to = out.data() + bi * d.Tk * width;
            std::copy_n(rows.data() + bi * n * width, n * width, to);
            T* extra = to + n * width;
            if (appended) {
                std::copy(appended->begin(), appended->end(), extra);
                extra += width;
            }
            if (s_.p.spec.add_zero_attn) std::fill_n(extra, width, T(0));
        }
    }

    // 1) Projections, in row blocks on our threads: (B*Tq, Dm) x (Dm, H*Dk) -> (B*Tq, H*Dk),
    //    and likewise K, V from src. The flat (B, T, H*D) layout is kept; heads are column blocks.
    void project_all() {
        const Dims& d = s_.d;
        const Tensor<T, 3>& src = s_.p.src();
        blas_threads(1);  // every product below runs on our threads, one BLAS call each
        auto given = [this](const Tensor<T, 3>& t, Buffer<T>& out) {  // run --qkv: no projection
            take_buffer(out, t.size());
            std::copy(t.begin(), t.end(), out.data());
        };
        if (s_.need[kQ]) {
            take_buffer(s_.qf, d.B * d.Tq * d.H * d.Dk);
            if (s_.p.given_q)
                given(*s_.p.given_q, s_.qf);
            else
                project(s_.p.x.data(), d.B * d.Tq, d.Dm, s_.p.W_Q, s_.p.b_Q, s_.qf.data(), s_.threads);
        }
        if (s_.need[kK]) {
            if (s_.p.given_k)
                given(*s_.p.given_k, s_.kf);
            else
                project_keys(src, s_.p.W_K, s_.p.b_K, s_.p.bias_k, d.Dk, s_.kf);
        }
        if (s_.need[kV]) {
            if (s_.p.given_v)
                given(*s_.p.given_v, s_.vf);
            else
                project_keys(src, s_.p.W_V, s_.p.b_V, s_.p.bias_v, d.Dv, s_.vf);
        }
        if (s_.p.q_norm && s_.need[kQ])  // per-head q/k norms (Qwen3): part of the projections
            steps::head_rms_norm(s_.qf.data(), d.B * d.Tq, d.H, d.Dk, s_.p.q_norm->data(), T(*s_.p.spec.qk_norm_eps));
        if (s_.p.k_norm && s_.need[kK])
            steps::head_rms_norm(s_.kf.data(), d.B * d.Tk, d.G, d.Dk, s_.p.k_norm->data(), T(*s_.p.spec.qk_norm_eps));
        if (s_.p.spec.zero_key && s_.need[kK])  // experiment: key vector j := 0, so its score column is 0
            for (std::size_t b = 0; b < d.B; ++b)
                std::fill_n(s_.kf.data() + (b * d.Tk + *s_.p.spec.zero_key) * d.G * d.Dk, d.G * d.Dk, T(0));
        note_nonfinite_heads(kQ, s_.qf, d.Tq, d.H, d.Dk);
        note_nonfinite_heads(kK, s_.kf, d.Tk, d.G, d.Dk);
        note_nonfinite_heads(kV, s_.vf, d.Tk, d.G, d.Dv);
        keep_heads(kQ, s_.qf, d.Tq, d.H, d.Dk, s_.tr.Q);
        keep_heads(kK, s_.kf, d.Tk, d.G, d.Dk, s_.tr.K);
        keep_heads(kV, s_.vf, d.Tk, d.G, d.Dv, s_.tr.V);
        // Rotary positions turn Q and K into Q_rot and K_rot in place, between the
        // projections and the scores.
        if (s_.p.rope_dim && s_.need[kQRot]) {
            rotate(s_.qf, d.Tq, d.H, d.Dk, true);
            keep_heads(kQRot, s_.qf, d.Tq, d.H, d.Dk, s_.tr.Q_rot);
        }
        if (s_.p.rope_dim && s_.need[kKRot]) {
            rotate(s_.kf, d.Tk, d.G, d.Dk, false);
            keep_heads(kKRot, s_.kf, d.Tk, d.G, d.Dk, s_.tr.K_rot);
        }
    }

    // 2) Mask: the mask rule as (B, Tq, Tk), true = may attend; and the rows with no key.
    void mask() {
        const Dims& d = s_.d;
        steps::Flags row;
        row.resize(d.Tk);
        if (s_.keep[kMask]) {
            PlaceNext at(s_.place(kMask));
            s_.tr.mask = Tensor<bool, 3>::from_shape({d.B, d.Tq, d.Tk});
        }
        // The rows with no key: from the key span alone when it is exact (no pass over Tk keys).
        if (!s_.keep[kMask] && s_.p.mask.span_exact()) {
            for (std::size_t b = 0; b < d.B; ++b)
                for (std::size_t i = 0; i < d.Tq; ++i) {
                    const auto span = s_.p.mask.key_span(b, i);
                    if (span.first >= span.second) s_.tr.fully_masked.push_back({b, i});
                }
            return;
        }
        for (std::size_t b = 0; b < d.B; ++b)
            for (std::size_t i = 0; i < d.Tq; ++i) {
                bool* out = s_.keep[kMask] ? &s_.tr.mask(b, i, 0) : row.data();
                if (!s_.p.mask.row(b, i, out)) s_.tr.fully_masked.push_back({b, i});
            }
        if (s_.keep[kMask]) check_shape(s_.tr.mask, std::array{d.B, d.Tq, d.Tk}, "mask");
    }

    Tensor<T, 4> allocate(Stage s, std::size_t last) const {
        if (!s_.keep[s]) return Tensor<T, 4>();
        PlaceNext at(s_.place(s));
        return Tensor<T, 4>::from_shape({s_.d.B, s_.d.H, s_.d.Tq, last});
    }

    void allocate_tile_stages() {
        const Dims& d = s_.d;
        s_.tr.scores = allocate(kScores, d.Tk);
        if (s_.keep[kMaskedScores] && !s_.tr.masked_is_scores) {
            PlaceNext at(s_.place(kMaskedScores));
            s_.tr.masked_scores = Tensor<T, 4>::from_shape({d.B, d.H, d.Tq, d.Tk});
        }
        s_.tr.bias = allocate(kBias, d.Tk);
        s_.tr.weights = allocate(kWeights, d.Tk);
        if (s_.keep[kSinkWeight]) {
            PlaceNext at(s_.place(kSinkWeight));
            s_.tr.sink_weight = Tensor<T, 3>::from_shape({d.B, d.H, d.Tq});
        }
        s_.tr.context = allocate(kContext, d.Dv);
        if (s_.need[kContext]) take_buffer(s_.merged, d.B * d.Tq * d.H * d.Dv);  // (B, Tq, H*Dv)
    }

    // 4) Per-head outputs: head_output[b, t, h, :] = context_h[b, t, :] · W_O[h·Dv : (h+1)·Dv, :]
    //    (without W_O, context_h in its own columns h·Dv..): their sum over h, plus b_O, is output.
    void head_output() {
        const Dims& d = s_.d;
        {
            PlaceNext at(s_.place(kHeadOutput));
            s_.tr.head_output = Tensor<T, 4>::from_shape({d.B, d.Tq, d.H, d.Dout});
        }
        T* out = s_.tr.head_output.data();
        const std::size_t rows = d.B * d.Tq, H = d.H, Dv = d.Dv, Dout = d.Dout;
        if (s_.p.W_O) {
            parallel_for(H, s_.threads, [&](std::size_t h, std::size_t) {
                linear(s_.merged.data() + h * Dv, rows, H * Dv, s_.p.W_O->data() + h * Dv * Dout, Dv, Dout,
                       Layout::math, nullptr, out + h * Dout, H * Dout);
            });
        } else {
            std::fill(out, out + s_.tr.head_output.size(), T(0));
            for (std::size_t r = 0; r < rows; ++r)
                for (std::size_t h = 0; h < H; ++h)
                    std::copy_n(s_.merged.data() + r * H * Dv + h * Dv, Dv, out + (r * H + h) * Dout + h * Dv);
        }
        check_shape(s_.tr.head_output, std::array{d.B, d.Tq, H, Dout}, "head_output");
    }

    // 5) Output: merged heads (B*Tq, H*Dv) x (H*Dv, Dout) (+ b_O) -> (B, Tq, Dout),
    //    or the merged heads themselves when there is no W_O.
    void output() {
        const Dims& d = s_.d;
        {
            PlaceNext at(s_.place(kOutput));
            s_.tr.output = Tensor<T, 3>::from_shape({d.B, d.Tq, d.Dout});
        }
        if (s_.p.W_O)
            project(s_.merged.data(), d.B * d.Tq, d.H * d.Dv, *s_.p.W_O, s_.p.b_O, s_.tr.output.data(), s_.threads);
        else
            std::copy(s_.merged.begin(), s_.merged.end(), s_.tr.output.begin());
        check_shape(s_.tr.output, std::array{d.B, d.Tq, d.Dout}, "output");
        for (std::size_t k = 0; k < s_.tr.output.size(); ++k)
            if (!std::isfinite(s_.tr.output.data()[k])) {
                s_.note_nonfinite(kOutput, {k / (d.Tq * d.Dout), k / d.Dout % d.Tq, k % d.Dout, 0}, 3);
                break;
            }
    }

    State<T> s_;
};

}  // namespace

template <typename T>
Trace<T> attend(const Problem<T>& p, const Compute& how) {
    // x        (B, Tq, Dm)       src (x or memory) (B, Tk, Dkv)
    // W_Q      (Dm, H*Dk)        W_K (Dkv, G*Dk)     W_V (Dkv, G*Dv)     W_O (H*Dv, Dout)
    return Attention<T>(p, how).run();
}

template Trace<float> attend<float>(const Problem<float>&, const Compute&);
template Trace<double> attend<double>(const Problem<double>&, const Compute&);

}  // namespace attnscope
