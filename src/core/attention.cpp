// Core: the attention computation, stage by stage. See attention.hpp for the shape legend.
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
#include "blas.hpp"
#include "kernels.hpp"

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

// Per-row summaries: query rows per tile, and keys per block of scores (128 x 512 float32
// scores, 256 KiB, stay in a core's cache while each row reads its part a few times;
// OpenBLAS's product with Dk = 64 runs at 91 GFLOP/s of a 120 GFLOP/s core here).
constexpr std::size_t kSummaryRows = 240, kSummaryKeys = 1024;

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

// Threads that hold a tile of their own: no more than there are tiles.
std::size_t tile_workers(const Dims& d, std::size_t value_size, const Compute& how) {
    const std::size_t rows = tile_rows(d, value_size);
    const double tiles = double(d.B) * double(d.H) * double((d.Tq + rows - 1) / rows);
    return std::max<std::size_t>(1, tiles < double(thread_count(how)) ? std::size_t(tiles) : thread_count(how));
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
        if (b)
            for (std::size_t r = r0; r < r0 + m; ++r) std::copy(b->begin(), b->end(), Y + r * n);
        gemm<T>(false, false, m, n, in, T(1), X + r0 * in, in, W.data(), n, b ? T(1) : T(0), Y + r0 * n, n);
    });
}

}  // namespace

namespace {

// Whether a run computes tiles of whole rows: for a kept (query, key) stage or what needs
// the context; with summaries alone, it does not (they come by key blocks of their own).
bool dense_tiles(const StageSet& keep, bool summary) {
    if (!summary) return true;
    for (Stage s : {kScores, kBias, kMaskedScores, kWeights, kSinkWeight, kContext, kHeadOutput, kOutput})
        if (keep[s]) return true;
    return false;
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
    std::size_t bh = mul(d.B, d.H), bg = mul(d.B, G), scores = mul(mul(bh, d.Tq), d.Tk);
    std::size_t total = 0;
    // working set: flat projections, merged heads, per-thread tiles
    total = add(total, mul(vs, mul(d.B, add(mul(d.Tq, mul(d.H, d.Dk)), mul(d.Tk, mul(G, add(d.Dk, d.Dv)))))));
    total = add(total, mul(vs, mul(mul(d.B, d.Tq), mul(d.H, d.Dv))));
    // per-thread tiles of whole rows (none when the summaries are all a run wants of them):
    // only as many threads as there are tiles ever hold one
    if (dense_tiles(how.keep, how.summary.has_value()))
        total = add(total, mul(tile_workers(d, vs, how), mul(add(mul(2, vs), 1), mul(tile_rows(d, vs), d.Tk))));
    // kept stages
    if (k[kQ]) total = add(total, mul(vs, mul(mul(bh, d.Tq), d.Dk)));
    if (k[kK]) total = add(total, mul(vs, mul(mul(bg, d.Tk), d.Dk)));
    if (k[kV]) total = add(total, mul(vs, mul(mul(bg, d.Tk), d.Dv)));
    if (k[kQRot]) total = add(total, mul(vs, mul(mul(bh, d.Tq), d.Dk)));
    if (k[kKRot]) total = add(total, mul(vs, mul(mul(bg, d.Tk), d.Dk)));
    if (k[kBias]) total = add(total, mul(vs, scores));
    if (k[kSinkWeight]) total = add(total, mul(vs, mul(bh, d.Tq)));
    if (k[kHeadOutput]) total = add(total, mul(vs, mul(mul(bh, d.Tq), d.Dout)));
    for (Stage s : {kScores, kMaskedScores, kWeights})
        if (k[s] && !(s == kMaskedScores && !masking && k[kScores]))  // else held as scores
            total = add(total, mul(vs, scores));
    if (k[kMask]) total = add(total, mul(mul(d.B, d.Tq), d.Tk));
    if (k[kContext]) total = add(total, mul(vs, mul(mul(bh, d.Tq), d.Dv)));
    if (k[kOutput]) total = add(total, mul(vs, mul(mul(d.B, d.Tq), d.Dout)));
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

// One run of attend(): the problem, what to keep, and the buffers shared by its steps.
template <typename T>
class Attention {
   public:
    Attention(const Problem<T>& p, const Compute& how) : p_(p), how_(how), d_(p.dims) {
        const StageSet has = stages_of(p);
        keep_ = how.keep & has;
        need_ = with_prerequisites(keep_) & has;  // everything up to the last stage asked for
        if (how.summary) need_ |= with_prerequisites(StageSet().set(kWeights)) & has;
        // Only the kept (query, key) stages need every key of a tile.
        narrow_ = !(keep_[kScores] || keep_[kMaskedScores] || keep_[kWeights] || keep_[kBias]);
        // Each row's softmax runs over its own keys, without flags, when the span is exactly
        // them; kept stages or not, so that what is kept never changes a number.
        exact_ = !p.has_bias() && p.mask.span_exact();
        threads_ = flop() < how.parallel_min_flop ? 1 : thread_count(how);
        tr_.dims = d_;
        tr_.batched = p.batched;
        tr_.scale = p.scale;
        tr_.kept = keep_;
    }

    Trace<T> run() {
        project_all();  // 1) Q, K, V
        mask();         // 2) mask, fully masked rows
        if (!need_[kScores]) return std::move(tr_);
        allocate_tile_stages();  // 3) scores .. context, by tiles of query rows
        scan_scores_ = !scores_bounded();
        // The tiles of whole rows, unless the summaries are all this run wants of them.
        const bool dense = dense_tiles(keep_, how_.summary.has_value());
        std::size_t tiles = 0, summary_tiles = 0;
        if (dense) tiles = d_.B * d_.H * ((d_.Tq + dense_rows() - 1) / dense_rows());
        if (how_.summary) summary_tiles = d_.B * d_.H * ((d_.Tq + kSummaryRows - 1) / kSummaryRows);
        if (how_.progress_total) *how_.progress_total = tiles + summary_tiles;
        if (dense) attend_tiles();
        if (how_.summary) summarize(!dense);
        note_nonfinite_heads(kContext, merged_, d_.Tq, d_.H, d_.Dv);
        if (need_[kHeadOutput]) head_output();  // 4) per-head outputs, when asked for
        if (need_[kOutput]) output();           //    output
        return std::move(tr_);
    }

   private:
    // Starting a thread costs ~0.1 ms here: a run with less arithmetic than a few times
    // that stays on this one (the classroom examples: compute phase 0.2 ms -> 0.05 ms).
    double flop() const {
        const Dims& d = d_;
        return 2.0 * double(d.B) *
               (double(d.H) * double(d.Tq) * double(d.Dm) * double(d.Dk) +
                double(d.G) * double(d.Tk) * double(d.Dkv) * double(d.Dk + d.Dv) +
                double(d.H) * double(d.Tq) * double(d.Tk) * double(d.Dk + d.Dv));
    }

    // Where a kept stage of n elements of `size` bytes is to live (Compute::place; null:
    // ordinary memory). A PlaceNext holding it applies it to the stage's allocation.
    std::shared_ptr<Placement> place(Stage s, std::size_t n, std::size_t size) const {
        return how_.place && n > 0 ? how_.place(s, n * size) : nullptr;
    }

    // ---- where numbers first stop being finite ----------------------------------------
    // Records stage s at `at` unless an earlier stage, or an earlier index of s, is noted.
    void note_nonfinite(Stage s, std::array<std::size_t, 4> at, std::size_t rank) {
        std::lock_guard<std::mutex> g(nonfinite_lock_);
        auto& first = tr_.first_nonfinite;
        if (!first || s < first->stage || (s == first->stage && at < first->at)) first = {{s, at, rank}};
    }

    // A flat (B, T, H*D) buffer of stage s, (B, H, T, D) as a stage (H: the stage's heads).
    void note_nonfinite_heads(Stage s, const Buffer<T>& flat, std::size_t T_, std::size_t H, std::size_t D) {
        for (std::size_t k = 0; k < flat.size(); ++k)
            if (!std::isfinite(flat[k])) {
                const std::size_t b = k / (T_ * H * D), t = k / (H * D) % T_, h = k % (H * D) / D, j = k % D;
                return note_nonfinite(s, {b, h, t, j}, 4);
            }
    }

    // The scores cannot leave float's range when max |q| · max |k| · |scale| is well inside
    // it (|q · k| <= |q| |k|): then no tile needs scanning. Norms that overflow say nothing.
    bool scores_bounded() const {
        const std::size_t Dk = d_.Dk;
        auto largest_norm = [&](const Buffer<T>& flat) {
            double m = 0;
            for (std::size_t r = 0; r < flat.size() / Dk; ++r) {
                double n2 = 0;
                for (std::size_t j = 0; j < Dk; ++j) n2 += double(flat[r * Dk + j]) * double(flat[r * Dk + j]);
                m = std::max(m, n2);
            }
            return std::sqrt(m);
        };
        const double bound = largest_norm(qf_) * largest_norm(kf_) * std::fabs(double(p_.scale));
        return std::isfinite(bound) && bound < 0.25 * double(std::numeric_limits<T>::max());
    }

    // (B, T, H*D) flat -> the kept stage (B, H, T, D) (H: the stage's heads, H or G).
    void keep_heads(Stage s, const Buffer<T>& flat, std::size_t T_, std::size_t H, std::size_t D, Tensor<T, 4>& out) {
        if (!keep_[s]) return;
        PlaceNext at(place(s, d_.B * H * T_ * D, sizeof(T)));
        out = split_heads(flat, d_.B, T_, H, D);
        check_shape(out, std::array{d_.B, H, T_, D}, stage_name(s).c_str());
    }

    // RoPE: in each head's first R features, pair (j, j + R/2) (half) or (2j, 2j + 1)
    // (interleaved) rotates by the angle position · inv_freq_j, inv_freq_j = θ^(-2j/R),
    // both in the run's precision (as Hugging Face computes them in the model's dtype).
    void rotate(Buffer<T>& flat, std::size_t T_, std::size_t H, std::size_t D, bool queries) {
        const std::size_t R = p_.rope_dim, half = R / 2;
        const Rope& rope = *p_.spec.rope;
        const bool interleaved = rope.style == RopeStyle::interleaved;
        std::vector<T> inv_freq(half);
        for (std::size_t j = 0; j < half; ++j) inv_freq[j] = T(1) / std::pow(T(rope.base), T(2 * j) / T(R));
        parallel_for(d_.B * T_, threads_, [&](std::size_t bt, std::size_t) {
            const std::size_t b = bt / T_, t = bt % T_;
            const long long pos = queries ? p_.mask.query_position(b, t) : p_.mask.key_position(b, t);
            for (std::size_t j = 0; j < half; ++j) {
                const T angle = T(pos) * inv_freq[j];
                const T c = std::cos(angle), sn = std::sin(angle);
                for (std::size_t h = 0; h < H; ++h) {
                    T* row = flat.data() + bt * H * D + h * D;
                    T& x1 = row[interleaved ? 2 * j : j];
                    T& x2 = row[interleaved ? 2 * j + 1 : j + half];
                    const T a = x1, b2 = x2;
                    x1 = a * c - b2 * sn;
                    x2 = b2 * c + a * sn;
                }
            }
        });
    }

    // K or V: src (B, Tk', Dkv) · W (+ b) -> flat (B, Tk, G*D), and after each batch item's
    // Tk' projected rows its appended ones (nn.MultiheadAttention): <bias_kv> (the bias
    // vector), then <zero>.
    void project_keys(const Tensor<T, 3>& src, const Tensor<T, 2>& W, const std::optional<Tensor<T, 1>>& b,
                      const std::optional<Tensor<T, 1>>& appended, std::size_t D, Buffer<T>& out) {
        const Dims& d = d_;
        const std::size_t width = d.G * D, n = d.source_keys();
        out.resize(d.B * d.Tk * width);
        if (!d.extra_keys) {
            project(src.data(), d.B * n, d.Dkv, W, b, out.data(), threads_);
            return;
        }
        Buffer<T> rows(d.B * n * width);
        project(src.data(), d.B * n, d.Dkv, W, b, rows.data(), threads_);
        for (std::size_t bi = 0; bi < d.B; ++bi) {
            T* to = out.data() + bi * d.Tk * width;
            std::copy_n(rows.data() + bi * n * width, n * width, to);
            T* extra = to + n * width;
            if (appended) {
                std::copy(appended->begin(), appended->end(), extra);
                extra += width;
            }
            if (p_.spec.add_zero_attn) std::fill_n(extra, width, T(0));
        }
    }

    // 1) Projections, in row blocks on our threads: (B*Tq, Dm) x (Dm, H*Dk) -> (B*Tq, H*Dk),
    //    and likewise K, V from src. The flat (B, T, H*D) layout is kept; heads are column blocks.
    void project_all() {
        const Dims& d = d_;
        const Tensor<T, 3>& src = p_.src();
        blas_threads(1);  // every product below runs on our threads, one BLAS call each
        auto given = [](const Tensor<T, 3>& t, Buffer<T>& out) {  // run --qkv: no projection
            out.resize(t.size());
            std::copy(t.begin(), t.end(), out.data());
        };
        if (need_[kQ]) {
            qf_.resize(d.B * d.Tq * d.H * d.Dk);
            if (p_.given_q)
                given(*p_.given_q, qf_);
            else
                project(p_.x.data(), d.B * d.Tq, d.Dm, p_.W_Q, p_.b_Q, qf_.data(), threads_);
        }
        if (need_[kK]) {
            if (p_.given_k)
                given(*p_.given_k, kf_);
            else
                project_keys(src, p_.W_K, p_.b_K, p_.bias_k, d.Dk, kf_);
        }
        if (need_[kV]) {
            if (p_.given_v)
                given(*p_.given_v, vf_);
            else
                project_keys(src, p_.W_V, p_.b_V, p_.bias_v, d.Dv, vf_);
        }
        if (p_.spec.zero_key && need_[kK])  // experiment: key vector j := 0, so its score column is 0
            for (std::size_t b = 0; b < d.B; ++b)
                std::fill_n(kf_.data() + (b * d.Tk + *p_.spec.zero_key) * d.G * d.Dk, d.G * d.Dk, T(0));
        note_nonfinite_heads(kQ, qf_, d.Tq, d.H, d.Dk);
        note_nonfinite_heads(kK, kf_, d.Tk, d.G, d.Dk);
        note_nonfinite_heads(kV, vf_, d.Tk, d.G, d.Dv);
        keep_heads(kQ, qf_, d.Tq, d.H, d.Dk, tr_.Q);
        keep_heads(kK, kf_, d.Tk, d.G, d.Dk, tr_.K);
        keep_heads(kV, vf_, d.Tk, d.G, d.Dv, tr_.V);
        // Rotary positions turn Q and K into Q_rot and K_rot in place, between the
        // projections and the scores.
        if (p_.rope_dim && need_[kQRot]) {
            rotate(qf_, d.Tq, d.H, d.Dk, true);
            keep_heads(kQRot, qf_, d.Tq, d.H, d.Dk, tr_.Q_rot);
        }
        if (p_.rope_dim && need_[kKRot]) {
            rotate(kf_, d.Tk, d.G, d.Dk, false);
            keep_heads(kKRot, kf_, d.Tk, d.G, d.Dk, tr_.K_rot);
        }
    }

    // 2) Mask: the mask rule as (B, Tq, Tk), true = may attend; and the rows with no key.
    void mask() {
        const Dims& d = d_;
        std::vector<char> row(d.Tk);
        if (keep_[kMask]) {
            PlaceNext at(place(kMask, d.B * d.Tq * d.Tk, sizeof(bool)));
            tr_.mask = Tensor<bool, 3>::from_shape({d.B, d.Tq, d.Tk});
        }
        // The rows with no key: from the key span alone when it is exact (no pass over Tk keys).
        if (!keep_[kMask] && p_.mask.span_exact()) {
            for (std::size_t b = 0; b < d.B; ++b)
                for (std::size_t i = 0; i < d.Tq; ++i) {
                    const auto span = p_.mask.key_span(b, i);
                    if (span.first >= span.second) tr_.fully_masked.push_back({b, i});
                }
            return;
        }
        for (std::size_t b = 0; b < d.B; ++b)
            for (std::size_t i = 0; i < d.Tq; ++i) {
                bool* out = keep_[kMask] ? &tr_.mask(b, i, 0) : reinterpret_cast<bool*>(row.data());
                if (!p_.mask.row(b, i, out)) tr_.fully_masked.push_back({b, i});
            }
    }

    Tensor<T, 4> allocate(Stage s, std::size_t last) const {
        if (!keep_[s]) return Tensor<T, 4>();
        PlaceNext at(place(s, d_.B * d_.H * d_.Tq * last, sizeof(T)));
        return Tensor<T, 4>::from_shape({d_.B, d_.H, d_.Tq, last});
    }

    void allocate_tile_stages() {
        const Dims& d = d_;
        tr_.scores = allocate(kScores, d.Tk);
        // With nothing masked, masked_scores equals scores: when both are kept, hold one
        // (unless masked_scores has a place of its own, e.g. its dump file).
        if (keep_[kMaskedScores]) {
            PlaceNext at(place(kMaskedScores, d.B * d.H * d.Tq * d.Tk, sizeof(T)));
            tr_.masked_is_scores = p_.masked_is_scores() && keep_[kScores] && !at.placing();
            if (!tr_.masked_is_scores) tr_.masked_scores = Tensor<T, 4>::from_shape({d.B, d.H, d.Tq, d.Tk});
        }
        tr_.bias = allocate(kBias, d.Tk);
        tr_.weights = allocate(kWeights, d.Tk);
        if (keep_[kSinkWeight]) {
            PlaceNext at(place(kSinkWeight, d.B * d.H * d.Tq, sizeof(T)));
            tr_.sink_weight = Tensor<T, 3>::from_shape({d.B, d.H, d.Tq});
        }
        tr_.context = allocate(kContext, d.Dv);
        if (need_[kContext]) merged_.resize(d.B * d.Tq * d.H * d.Dv);  // (B, Tq, H*Dv)
    }

    struct Scratch {
        std::vector<T> s, w, bias;
        std::vector<char> visible;
    };

    // Per-row summaries: the arrays, and one set of distance-bin sums per tile (added
    // up in tile order afterwards, so the result does not depend on the threads).
    void allocate_summary(std::size_t tiles) {
        const Dims& d = d_;
        auto s = std::make_shared<Summary>();
        s->B = d.B, s->H = d.H, s->Tq = d.Tq, s->Tk = d.Tk, s->spec = *how_.summary, s->K = s->spec.topk;
        // bins up to the largest |q_pos - k_pos|
        unsigned long long far = 0;
        if (d.Tq && d.Tk) {
            long long qlo = 0, qhi = 0, klo = 0, khi = 0;
            bool first = true;
            for (std::size_t b = 0; b < d.B; ++b) {
                if (b > 0 && !p_.mask.explicit_positions()) break;
                for (std::size_t i = 0; i < d.Tq; ++i) {
                    const long long q = p_.mask.query_position(b, i);
                    qlo = first || q < qlo ? q : qlo, qhi = first || q > qhi ? q : qhi, first = false;
                }
                for (std::size_t j = 0; j < d.Tk; ++j) {
                    const long long k = p_.mask.key_position(b, j);
                    klo = j == 0 && b == 0 ? k : std::min(klo, k), khi = j == 0 && b == 0 ? k : std::max(khi, k);
                }
            }
            far = std::max((unsigned long long)std::max(0LL, qhi - klo), (unsigned long long)std::max(0LL, khi - qlo));
        }
        s->bins = distance_bin(far) + 1;
        const std::size_t rows = d.B * d.H * d.Tq;
        for (auto* v : {&s->entropy, &s->effective_keys, &s->max_weight, &s->sink_mass, &s->local_mass,
                        &s->mean_distance, &s->row_sum})
            v->assign(rows, 0.0);
        s->max_key.assign(rows, -1);
        s->visible_keys.assign(rows, 0);
        s->topk_index.assign(rows * s->K, -1);
        s->topk_weight.assign(rows * s->K, 0.0);
        s->distance_profile.assign(d.B * d.H * s->bins, 0.0);
        s->profile_rows.assign(d.B * d.H, 0);
        s->nonfinite_rows.assign(d.B * d.H, 0);
        tile_bins_.assign(d.B * d.H * tiles * s->bins, 0.0);
        tr_.summary = std::move(s);
    }

    void finish_summary() {
        Summary& s = *tr_.summary;
        const std::size_t tiles = (d_.Tq + kSummaryRows - 1) / kSummaryRows;
        for (std::size_t bh = 0; bh < d_.B * d_.H; ++bh) {
            std::int64_t n = 0, bad = 0;
            for (std::size_t i = 0; i < d_.Tq; ++i) n += s.counted(bh * d_.Tq + i), bad += !s.finite(bh * d_.Tq + i);
            s.profile_rows[bh] = n, s.nonfinite_rows[bh] = bad;
            double* prof = &s.distance_profile[bh * s.bins];
            for (std::size_t t = 0; t < tiles; ++t)
                for (std::size_t k = 0; k < s.bins; ++k) prof[k] += tile_bins_[(bh * tiles + t) * s.bins + k];
            if (n > 0)
                for (std::size_t k = 0; k < s.bins; ++k) prof[k] /= double(n);
        }
        tile_bins_ = {};
    }

    // 3') Per-row summaries, by (batch, head, tile of kSummaryRows query rows), on our threads:
    //     each tile's keys in blocks of kSummaryKeys, the last block ending at the tile's last
    //     key (so that in a causal run only the block on the diagonal holds hidden keys); per
    //     block one product of scores, which stays in cache while each row absorbs its part
    //     (summary.hpp: an online softmax). Nothing of (Tq, Tk) is held, and no weight formed.
    //     The same blocks whatever else the run keeps: the summaries never change with it.
    //     `scan`: look for the first non-finite score (no dense tile does).
    struct SummaryScratch {
        std::vector<T> s, x, e;
        std::vector<char> visible;
        std::vector<long long> key_pos;
        std::vector<summary_detail::RowState> state;
        std::vector<double> bins;
        std::vector<summary_detail::RowSlots> rows;
        std::vector<T> bias;  // a row's bias terms for a block's keys
        // float: this worker's copy of one K/V head's keys in panels, and the tile's queries
        std::vector<float> kp, qt;
        std::size_t packed_b = std::size_t(-1), packed_g = std::size_t(-1);
    };

    void summarize(bool scan) {
        const Dims& d = d_;
        const std::size_t tiles = (d.Tq + kSummaryRows - 1) / kSummaryRows;
        allocate_summary(tiles);
        std::vector<SummaryScratch> scratch(std::min(threads_, d.B * d.H * tiles));
        parallel_for(d.B * d.H * tiles, threads_, [&](std::size_t item, std::size_t worker) {
            summary_tile(item / (d.H * tiles), item / tiles % d.H, item % tiles * kSummaryRows, scratch[worker], scan);
        });
        finish_summary();
    }

    void summary_tile(std::size_t b, std::size_t h, std::size_t i0, SummaryScratch& sc, bool scan) {
        const Dims& d = d_;
        Summary& sum = *tr_.summary;
        const std::size_t H = d.H, G = d.G, g = d.kv_head(h), Tq = d.Tq, Tk = d.Tk, Dk = d.Dk;
        const std::size_t n = std::min(kSummaryRows, Tq - i0), KB = kSummaryKeys;
        // Each row's keys [a, z): its exact span, or the tile's with flags.
        std::size_t klo = Tk, khi = 0;
        std::size_t span_lo[kSummaryRows], span_hi[kSummaryRows];
        for (std::size_t r = 0; r < n; ++r) {
            const auto [a, z] = p_.mask.key_span(b, i0 + r);
            span_lo[r] = a, span_hi[r] = std::max(a, z);
            if (a < z) klo = std::min(klo, a), khi = std::max(khi, z);
        }
        if (klo >= khi) klo = khi = 0;
        const bool flags = !p_.mask.span_exact();
        if (flags)
            for (std::size_t r = 0; r < n; ++r) span_lo[r] = klo, span_hi[r] = khi;
        const bool bias = p_.has_bias(), softcap = p_.spec.softcap.has_value();
        const bool rewrite = bias || softcap || flags;  // logits apart from the scores
        const bool positions = p_.mask.explicit_positions();
        // The scores of a block: float by our own register tiles over the head's keys packed
        // once per worker (OpenBLAS repacked a block's keys at every product, and zeroed
        // every product's output first: 10% of a long run); double by BLAS. Float's blocks
        // start and end on panel boundaries: S holds keys [kbase, kbase + ldc).
        constexpr bool packed = std::is_same_v<T, float>;
        const std::size_t rows_pad = (n + kernels::kRows - 1) / kernels::kRows * kernels::kRows;
        if constexpr (packed) {
            if (sc.packed_b != b || sc.packed_g != g) {
                sc.kp.resize((Tk + kernels::kPanel - 1) / kernels::kPanel * kernels::kPanel * Dk);
                kernels::pack_keys(kf_.data() + b * Tk * G * Dk + g * Dk, Tk, G * Dk, Dk, sc.kp.data());
                sc.packed_b = b, sc.packed_g = g;
            }
            sc.qt.assign(rows_pad * Dk, 0.0f);
            for (std::size_t r = 0; r < n; ++r)
                std::copy_n(qf_.data() + (b * Tq + i0 + r) * H * Dk + h * Dk, Dk, sc.qt.data() + r * Dk);
            sc.s.resize(rows_pad * (KB + 2 * kernels::kPanel));
        } else {
            sc.s.resize(n * KB);
        }
        sc.e.resize(KB);
        if (rewrite) sc.x.resize(KB), sc.visible.resize(KB);
        if (bias) sc.bias.resize(KB);
        if (positions) sc.key_pos.resize(KB);
        sc.state.assign(n, summary_detail::RowState{});
        sc.bins.assign(n * sum.bins, 0.0);
        std::vector<summary_detail::RowSlots>& rows = sc.rows;
        rows.resize(n);
        for (std::size_t r = 0; r < n; ++r)
            rows[r] = summary_detail::row_slots(sum, sum.row(b, h, i0 + r), sc.state[r], &sc.bins[r * sum.bins]);
        const T cap = softcap ? T(*p_.spec.softcap) : T(1);
        const T neg_inf = -std::numeric_limits<T>::infinity();
        bool* visible = reinterpret_cast<bool*>(sc.visible.data());
        // Blocks in increasing key order (the top-k's ties go to the lower key).
        const std::size_t first = (khi - klo) % KB ? (khi - klo) % KB : KB;
        for (std::size_t k0 = klo, k1 = std::min(khi, klo + first); k0 < khi; k0 = k1, k1 = std::min(khi, k1 + KB)) {
            T* S = sc.s.data();
            std::size_t kbase = k0, ldc = k1 - k0;
            if constexpr (packed) {
                const std::size_t p0 = k0 / kernels::kPanel, p1 = (k1 + kernels::kPanel - 1) / kernels::kPanel;
                kbase = p0 * kernels::kPanel, ldc = (p1 - p0) * kernels::kPanel;
                kernels::score_tile(sc.qt.data(), rows_pad, Dk, sc.kp.data(), p0, p1, p_.scale, S, ldc);
            } else {
                gemm<T>(false, true, n, ldc, Dk, p_.scale, qf_.data() + (b * Tq + i0) * H * Dk + h * Dk, H * Dk,
                        kf_.data() + (b * Tk + k0) * G * Dk + g * Dk, G * Dk, T(0), S, ldc);
            }
            if (scan && scan_scores_)
                for (std::size_t r = 0; r < n; ++r)
                    for (std::size_t j = k0; j < k1; ++j)
                        if (!std::isfinite(S[r * ldc + (j - kbase)])) {
                            note_nonfinite(kScores, {b, h, i0 + r, j}, 4);
                            r = n;
                            break;
                        }
            if (positions)
                for (std::size_t j = k0; j < k1; ++j) sc.key_pos[j - k0] = p_.mask.key_position(b, j);
            for (std::size_t r = 0; r < n; ++r) {
                const std::size_t i = i0 + r, a = std::max(k0, span_lo[r]), z = std::min(k1, span_hi[r]);
                if (a >= z) continue;
                const T* x = S + r * ldc + (a - kbase);
                const bool* vis = nullptr;
                if (rewrite) {
                    // softcap(scores) + bias, -inf where hidden (by the mask, or a -inf bias)
                    T* L = sc.x.data();
                    if (p_.masking() && flags)
                        p_.mask.row(b, i, a, z, visible);
                    else
                        std::fill(visible, visible + (z - a), true);
                    if (bias) p_.bias_row(b, h, i, a, z, sc.bias.data());
                    for (std::size_t j = 0; j < z - a; ++j) {
                        T v = x[j];
                        if (softcap) v = cap * std::tanh(v / cap);
                        if (bias) {
                            v += sc.bias[j];
                            if (sc.bias[j] == neg_inf) visible[j] = false;
                        }
                        L[j] = visible[j] ? v : neg_inf;
                    }
                    x = L;
                    vis = flags || bias ? visible : nullptr;
                }
                summary_detail::absorb(x, vis, a, z, p_.mask.query_position(b, i),
                                       positions ? sc.key_pos.data() + (a - k0) : nullptr, sum, rows[r], sc.e.data());
            }
        }
        double* tile_bins =
            &tile_bins_[((b * H + h) * ((Tq + kSummaryRows - 1) / kSummaryRows) + i0 / kSummaryRows) * sum.bins];
        const double sink = p_.sinks ? double((*p_.sinks)(h)) : 0.0;
        for (std::size_t r = 0; r < n; ++r)
            summary_detail::finish(rows[r], p_.sinks ? &sink : nullptr, sum, sum.row(b, h, i0 + r), tile_bins);
        if (how_.on_summary) how_.on_summary(sum, b, h, i0, n);
        if (how_.progress_done) ++*how_.progress_done;
    }

    // Query rows per dense tile. Skipping what the mask hides needs short tiles: a tile computes
    // every key any of its rows sees (128 rows: the triangle wasted on the diagonal is
    // 64 / Tk of a row). The same tiles whatever is kept: a tile's key span is the length
    // of its context product, and another length may round differently.
    std::size_t dense_rows() const {
        const std::size_t rows = tile_rows(d_, sizeof(T));
        return p_.mask.causal() || p_.mask.window() ? std::min<std::size_t>(rows, 128) : rows;
    }

    // 3) Per (batch, head, tile of query rows), on our threads with single-threaded BLAS.
    void attend_tiles() {
        const Dims& d = d_;
        rows_ = dense_rows();
        const std::size_t tiles = (d.Tq + rows_ - 1) / rows_;
        std::vector<Scratch> scratch(std::min(threads_, d.B * d.H * tiles));
        parallel_for(d.B * d.H * tiles, threads_, [&](std::size_t item, std::size_t worker) {
            tile(item / (d.H * tiles), item / tiles % d.H, item % tiles * rows_, scratch[worker]);
        });
        if (keep_[kScores]) check_shape(tr_.scores, std::array{d.B, d.H, d.Tq, d.Tk}, "scores");
        if (keep_[kWeights]) check_shape(tr_.weights, std::array{d.B, d.H, d.Tq, d.Tk}, "weights");
        if (keep_[kContext]) check_shape(tr_.context, std::array{d.B, d.H, d.Tq, d.Dv}, "context");
    }

    //    scores   (rows, Dk) x (Dk, Tk) -> (rows, Tk), times scale (Q_rot, K_rot with RoPE)
    //    bias     ALiBi and/or the float attn_mask, per row
    //    masked   softcap(scores) + bias, -inf where the mask is false (or the bias -inf)
    //    weights  softmax over keys: exp(m - max) / sum; all-zero for a row with no key;
    //             with a sink, its exp(s_h - max) joins the sum only
    //    context  (rows, Tk) x (Tk, Dv) -> (rows, Dv), written into merged (B, Tq, H*Dv)
    // Query head h reads K/V head g = h / (H/G): its columns of the flat K and V.
    void tile(std::size_t b, std::size_t h, std::size_t i0, Scratch& sc) {
        const Dims& d = d_;
        const std::size_t H = d.H, G = d.G, g = d.kv_head(h), Tq = d.Tq, Tk = d.Tk, Dk = d.Dk, Dv = d.Dv;
        const std::size_t n = std::min(rows_, Tq - i0);
        // The keys its rows may see, [klo, khi). The softmax and the context run over these
        // alone whatever is kept (the same sums in the same order: keeping a stage never
        // changes a number); the scores are computed for them alone, [lo, hi) = [klo, khi),
        // when no (query, key) stage is kept, else for every key.
        std::size_t klo = Tk, khi = 0;
        for (std::size_t r = 0; r < n; ++r) {
            const auto [a, z] = p_.mask.key_span(b, i0 + r);
            if (a < z) klo = std::min(klo, a), khi = std::max(khi, z);
        }
        if (klo >= khi) klo = khi = 0;
        const std::size_t lo = narrow_ ? klo : 0, hi = narrow_ ? khi : Tk;
        const std::size_t width = hi - lo;  // the tile's row stride
        T* S = tile_buffer(kScores, tr_.scores, b, h, i0, sc.s);
        T* W = keep_[kWeights]  ? &tr_.weights(b, h, i0, 0)
               : keep_[kScores] ? tile_buffer(kWeights, tr_.weights, b, h, i0, sc.w)
                                : S;
        // The scores of keys [from, to): the keys the rows may see by one product of their own
        // whatever is kept (a product's numbers may depend on its width), the rest apart.
        const auto scores = [&](std::size_t from, std::size_t to) {
            if (to > from)
                gemm<T>(false, true, n, to - from, Dk, p_.scale, qf_.data() + (b * Tq + i0) * H * Dk + h * Dk, H * Dk,
                        kf_.data() + (b * Tk + from) * G * Dk + g * Dk, G * Dk, T(0), S + (from - lo), width);
        };
        scores(klo, khi);
        if (!narrow_) scores(0, klo), scores(khi, Tk);
        if (scan_scores_)
            for (std::size_t k = 0; k < n * width; ++k)
                if (!std::isfinite(S[k])) {
                    note_nonfinite(kScores, {b, h, i0 + k / width, lo + k % width}, 4);
                    break;
                }
        const bool bias = p_.has_bias(), softcap = p_.spec.softcap.has_value();
        const bool masking = p_.masking() || bias;  // a -inf bias hides its key too
        if (masking) sc.visible.resize(std::max<std::size_t>(width, 1));
        if (bias && !keep_[kBias]) sc.bias.resize(Tk);
        bool* visible = reinterpret_cast<bool*>(sc.visible.data());
        const T cap = softcap ? T(*p_.spec.softcap) : T(1);
        for (std::size_t r = 0; r < n; ++r) {
            const std::size_t i = i0 + r;
            // The row's keys [a, z) within the tile's: without flags when they are exact.
            std::size_t a = klo, z = khi;
            if (exact_) {
                const auto span = p_.mask.key_span(b, i);
                a = std::clamp(span.first, klo, khi), z = std::clamp(span.second, a, khi);
            }
            const bool flags = masking && !exact_;
            if (flags && p_.masking())
                p_.mask.row(b, i, lo, hi, visible);
            else if (flags)
                std::fill(visible, visible + width, true);
            // The logits: softcap(scores) + bias, into the weights' row (softmax runs in place).
            const T* L = S + r * width;
            if (bias || softcap) {
                T* Brow = nullptr;
                if (bias) {
                    Brow = keep_[kBias] ? &tr_.bias(b, h, i, 0) : sc.bias.data();
                    p_.bias_row(b, h, i, Brow);
                    Brow += lo;
                }
                T* out = W + r * width;
                for (std::size_t j = 0; j < width; ++j) {
                    T v = L[j];
                    if (softcap) v = cap * std::tanh(v / cap);
                    if (Brow) {
                        v += Brow[j];
                        if (Brow[j] == -std::numeric_limits<T>::infinity()) visible[j] = false;
                    }
                    out[j] = v;
                }
                L = out;
            }
            // (M, when kept, is a whole row: lo = 0, as narrowing keeps no (query, key) stage)
            T* M = keep_[kMaskedScores] && !tr_.masked_is_scores ? &tr_.masked_scores(b, h, i, 0) : nullptr;
            const std::size_t o = a - lo;
            T* Wr = W + r * width;
            const bool* vis = flags ? visible + o : nullptr;
            if (p_.sinks)
                kernels::sink_softmax_row(L + o, vis, M ? M + o : nullptr, Wr + o, z - a, (*p_.sinks)(h),
                                          keep_[kSinkWeight] ? &tr_.sink_weight(b, h, i) : nullptr);
            else
                kernels::masked_softmax_row(L + o, vis, M ? M + o : nullptr, Wr + o, z - a);
            // The keys outside the row's own: weight 0, masked score -inf.
            std::fill(Wr, Wr + o, T(0));
            std::fill(Wr + (z - lo), Wr + width, T(0));
            if (M) {
                std::fill(M, M + o, -std::numeric_limits<T>::infinity());
                std::fill(M + (z - lo), M + width, -std::numeric_limits<T>::infinity());
            }
        }
        if (how_.progress_done) ++*how_.progress_done;
        if (!need_[kContext]) return;
        T* C = merged_.data() + (b * Tq + i0) * H * Dv + h * Dv;
        if (khi == klo) {  // no key: a zero context
            for (std::size_t r = 0; r < n; ++r) std::fill_n(C + r * H * Dv, Dv, T(0));
        } else {
            gemm<T>(false, false, n, Dv, khi - klo, T(1), W + (klo - lo), width,
                    vf_.data() + (b * Tk + klo) * G * Dv + g * Dv, G * Dv, T(0), C, H * Dv);
        }
        if (keep_[kContext])
            for (std::size_t r = 0; r < n; ++r)
                std::copy(C + r * H * Dv, C + r * H * Dv + Dv, &tr_.context(b, h, i0 + r, 0));
    }

    // Rows i0.. of a kept (B, H, Tq, Tk) stage, or this worker's scratch when it is not kept.
    T* tile_buffer(Stage s, Tensor<T, 4>& stage, std::size_t b, std::size_t h, std::size_t i0,
                   std::vector<T>& scratch) {
        if (keep_[s]) return &stage(b, h, i0, 0);
        scratch.resize(rows_ * d_.Tk);
        return scratch.data();
    }

    // 4) Per-head outputs: head_output[b, t, h, :] = context_h[b, t, :] · W_O[h·Dv : (h+1)·Dv, :]
    //    (without W_O, context_h in its own columns h·Dv..): their sum over h, plus b_O, is output.
    void head_output() {
        const Dims& d = d_;
        {
            PlaceNext at(place(kHeadOutput, d.B * d.Tq * d.H * d.Dout, sizeof(T)));
            tr_.head_output = Tensor<T, 4>::from_shape({d.B, d.Tq, d.H, d.Dout});
        }
        T* out = tr_.head_output.data();
        const std::size_t rows = d.B * d.Tq, H = d.H, Dv = d.Dv, Dout = d.Dout;
        if (p_.W_O) {
            parallel_for(H, threads_, [&](std::size_t h, std::size_t) {
                gemm<T>(false, false, rows, Dout, Dv, T(1), merged_.data() + h * Dv, H * Dv,
                        p_.W_O->data() + h * Dv * Dout, Dout, T(0), out + h * Dout, H * Dout);
            });
        } else {
            std::fill(out, out + tr_.head_output.size(), T(0));
            for (std::size_t r = 0; r < rows; ++r)
                for (std::size_t h = 0; h < H; ++h)
                    std::copy_n(merged_.data() + r * H * Dv + h * Dv, Dv, out + (r * H + h) * Dout + h * Dv);
        }
        check_shape(tr_.head_output, std::array{d.B, d.Tq, H, Dout}, "head_output");
    }

    // 5) Output: merged heads (B*Tq, H*Dv) x (H*Dv, Dout) (+ b_O) -> (B, Tq, Dout),
    //    or the merged heads themselves when there is no W_O.
    void output() {
        const Dims& d = d_;
        {
            PlaceNext at(place(kOutput, d.B * d.Tq * d.Dout, sizeof(T)));
            tr_.output = Tensor<T, 3>::from_shape({d.B, d.Tq, d.Dout});
        }
        if (p_.W_O)
            project(merged_.data(), d.B * d.Tq, d.H * d.Dv, *p_.W_O, p_.b_O, tr_.output.data(), threads_);
        else
            std::copy(merged_.begin(), merged_.end(), tr_.output.begin());
        check_shape(tr_.output, std::array{d.B, d.Tq, d.Dout}, "output");
        for (std::size_t k = 0; k < tr_.output.size(); ++k)
            if (!std::isfinite(tr_.output.data()[k])) {
                note_nonfinite(kOutput, {k / (d.Tq * d.Dout), k / d.Dout % d.Tq, k % d.Dout, 0}, 3);
                break;
            }
    }

    const Problem<T>& p_;
    const Compute& how_;
    const Dims& d_;
    StageSet keep_, need_;
    std::size_t threads_ = 1, rows_ = 1;
    Trace<T> tr_;
    bool scan_scores_ = false, narrow_ = false, exact_ = false;
    std::vector<double> tile_bins_;  // (B, H, tiles, bins) with a summary
    std::mutex nonfinite_lock_;
    Buffer<T> qf_, kf_, vf_, merged_;  // (B, Tq, H*Dk), (B, Tk, G*Dk), (B, Tk, G*Dv), (B, Tq, H*Dv)
};

}  // namespace

template <typename T>
Trace<T> attend(const Problem<T>& p, const Compute& how) {
    // x        (B, Tq, Dm)       src (x or memory) (B, Tk, Dkv)
    // W_Q      (Dm, H*Dk)        W_K (Dkv, H*Dk)     W_V (Dkv, H*Dv)     W_O (H*Dv, Dout)
    return Attention<T>(p, how).run();
}

template Trace<float> attend<float>(const Problem<float>&, const Compute&);
template Trace<double> attend<double>(const Problem<double>&, const Compute&);

}  // namespace attnscope
