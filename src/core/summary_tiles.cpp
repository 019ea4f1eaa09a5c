// Core, step 3' of attend(): the per-row summaries (summary.hpp), by (batch, head, tile of
// kSummaryRows query rows), on our threads. Each tile's keys come in blocks of
// kSummaryKeys, the last block ending at the tile's last key (so that in a causal run only
// the block on the diagonal holds hidden keys); per block one product of scores, which
// stays in cache while each row absorbs its part (an online softmax). Nothing of (Tq, Tk)
// is held, and no weight formed. The same blocks whatever else the run keeps: the
// summaries never change with it.
#include <algorithm>
#include <cmath>
#include <memory>
#include <type_traits>
#include <vector>

#include "blas.hpp"
#include "kernels.hpp"
#include "run.hpp"
#include "steps.hpp"

namespace attnscope::run {
namespace {

template <typename T>
class SummaryTiles {
   public:
    explicit SummaryTiles(State<T>& s) : s_(s), tiles_((s.d.Tq + kSummaryRows - 1) / kSummaryRows) {}

    void run(bool scan) {
        const Dims& d = s_.d;
        allocate();
        std::vector<Scratch> scratch(std::min(s_.threads, d.B * d.H * tiles_));
        parallel_for(d.B * d.H * tiles_, s_.threads, [&](std::size_t item, std::size_t worker) {
            tile(item / (d.H * tiles_), item / tiles_ % d.H, item % tiles_ * kSummaryRows, scratch[worker], scan);
        });
        finish();
    }

   private:
    struct Scratch {
        std::vector<T> s, x, e;
        steps::Flags visible;
        std::vector<long long> key_pos;
        std::vector<summary_detail::RowState> state;
        std::vector<double> bins;
        std::vector<summary_detail::RowSlots> rows;
        std::vector<T> bias;  // a row's bias terms for a block's keys
        // float: this worker's copy of one K/V head's keys in panels, and the tile's queries
        std::vector<float> kp, qt;
        std::size_t packed_b = std::size_t(-1), packed_g = std::size_t(-1);
    };

    // One tile: query rows [i0, i0 + n) of (b, h), reading K/V head g; each row's keys
    // [lo[r], hi[r]) (its exact span, or the tile's [klo, khi) with flags).
    struct Tile {
        std::size_t b, h, g, i0, n, rows_pad;
        std::size_t klo, khi;
        std::size_t lo[kSummaryRows], hi[kSummaryRows];
        bool flags, bias, rewrite, positions;
    };

    // The largest |q_pos - k_pos| of the run: the distance bins go up to it.
    unsigned long long farthest() const {
        const Dims& d = s_.d;
        const MaskRule& m = s_.p.mask;
        if (!d.Tq || !d.Tk) return 0;
        long long qlo = 0, qhi = 0, klo = 0, khi = 0;
        bool first = true;
        for (std::size_t b = 0; b < d.B; ++b) {
            if (b > 0 && !m.explicit_positions()) break;
            for (std::size_t i = 0; i < d.Tq; ++i) {
                const long long q = m.query_position(b, i);
                qlo = first || q < qlo ? q : qlo, qhi = first || q > qhi ? q : qhi, first = false;
            }
            for (std::size_t j = 0; j < d.Tk; ++j) {
                const long long k = m.key_position(b, j);
                klo = j == 0 && b == 0 ? k : std::min(klo, k), khi = j == 0 && b == 0 ? k : std::max(khi, k);
            }
        }
        return std::max((unsigned long long)std::max(0LL, qhi - klo), (unsigned long long)std::max(0LL, khi - qlo));
    }

    // The arrays, and one set of distance-bin sums per tile (added up in tile order
    // afterwards, so the result does not depend on the threads).
    void allocate() {
        const Dims& d = s_.d;
        auto s = std::make_shared<Summary>();
        s->B = d.B, s->H = d.H, s->Tq = d.Tq, s->Tk = d.Tk, s->spec = *s_.how.summary, s->K = s->spec.topk;
        if (!s->spec.sink_keys) s->spec.sink_keys = sink_window(d.Tk);
        s->bins = distance_bin(farthest()) + 1;
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
        tile_bins_.assign(d.B * d.H * tiles_ * s->bins, 0.0);
        s_.tr.summary = std::move(s);
    }

    // Per (batch, head): the rows counted, the non-finite rows, and the distance profile.
    void finish() {
        const Dims& d = s_.d;
        Summary& s = *s_.tr.summary;
        for (std::size_t bh = 0; bh < d.B * d.H; ++bh) {
            std::int64_t n = 0, bad = 0;
            for (std::size_t i = 0; i < d.Tq; ++i) n += s.counted(bh * d.Tq + i), bad += !s.finite(bh * d.Tq + i);
            s.profile_rows[bh] = n, s.nonfinite_rows[bh] = bad;
            double* prof = &s.distance_profile[bh * s.bins];
            for (std::size_t t = 0; t < tiles_; ++t)
                for (std::size_t k = 0; k < s.bins; ++k) prof[k] += tile_bins_[(bh * tiles_ + t) * s.bins + k];
            if (n > 0)
                for (std::size_t k = 0; k < s.bins; ++k) prof[k] /= double(n);
        }
        tile_bins_ = {};
    }

    void tile(std::size_t b, std::size_t h, std::size_t i0, Scratch& sc, bool scan) {
        const Tile t = spans(b, h, i0);
        prepare(t, sc);
        // Blocks in increasing key order (the top-k's ties go to the lower key).
        const std::size_t KB = kSummaryKeys, first = (t.khi - t.klo) % KB ? (t.khi - t.klo) % KB : KB;
        for (std::size_t k0 = t.klo, k1 = std::min(t.khi, t.klo + first); k0 < t.khi;
             k0 = k1, k1 = std::min(t.khi, k1 + KB)) {
            std::size_t kbase = k0, ldc = k1 - k0;
            block_scores(t, sc, k0, k1, kbase, ldc);
            if (scan && s_.scan_scores) scan_block(t, sc.s.data(), k0, k1, kbase, ldc);
            absorb_block(t, sc, k0, k1, sc.s.data() + (k0 - kbase), ldc);
        }
        finish_tile(t, sc);
    }

    Tile spans(std::size_t b, std::size_t h, std::size_t i0) const {
        const Problem<T>& p = s_.p;
        Tile t{};
        t.b = b, t.h = h, t.g = s_.d.kv_head(h), t.i0 = i0, t.n = std::min(kSummaryRows, s_.d.Tq - i0);
        t.rows_pad = (t.n + kernels::kRows - 1) / kernels::kRows * kernels::kRows;
        t.klo = s_.d.Tk, t.khi = 0;
        for (std::size_t r = 0; r < t.n; ++r) {
            const auto [a, z] = p.mask.key_span(b, i0 + r);
            t.lo[r] = a, t.hi[r] = std::max(a, z);
            if (a < z) t.klo = std::min(t.klo, a), t.khi = std::max(t.khi, z);
        }
        if (t.klo >= t.khi) t.klo = t.khi = 0;
        t.flags = !p.mask.span_exact();
        if (t.flags)
            for (std::size_t r = 0; r < t.n; ++r) t.lo[r] = t.klo, t.hi[r] = t.khi;
        t.bias = p.has_bias();
        t.rewrite = t.bias || p.spec.softcap || t.flags;  // logits apart from the scores
        t.positions = p.mask.explicit_positions();
        return t;
    }

    // The worker's buffers for tile t: float's packed keys (once per K/V head) and queries,
    // the row states and their slots in the summary.
    void prepare(const Tile& t, Scratch& sc) {
        const Dims& d = s_.d;
        Summary& sum = *s_.tr.summary;
        const std::size_t KB = kSummaryKeys, Dk = d.Dk;
        if constexpr (std::is_same_v<T, float>) {
            if (sc.packed_b != t.b || sc.packed_g != t.g) {
                sc.kp.resize((d.Tk + kernels::kPanel - 1) / kernels::kPanel * kernels::kPanel * Dk);
                kernels::pack_keys(s_.kf.data() + t.b * d.Tk * d.G * Dk + t.g * Dk, d.Tk, d.G * Dk, Dk, sc.kp.data());
                sc.packed_b = t.b, sc.packed_g = t.g;
            }
            sc.qt.assign(t.rows_pad * Dk, 0.0f);
            for (std::size_t r = 0; r < t.n; ++r)
                std::copy_n(s_.qf.data() + (t.b * d.Tq + t.i0 + r) * d.H * Dk + t.h * Dk, Dk, sc.qt.data() + r * Dk);
            sc.s.resize(t.rows_pad * (KB + 2 * kernels::kPanel));
        } else {
            sc.s.resize(t.n * KB);
        }
        sc.e.resize(KB);
        if (t.rewrite) sc.x.resize(KB), sc.visible.resize(KB);
        if (t.bias) sc.bias.resize(KB);
        if (t.positions) sc.key_pos.resize(KB);
        sc.state.assign(t.n, summary_detail::RowState{});
        sc.bins.assign(t.n * sum.bins, 0.0);
        sc.rows.resize(t.n);
        for (std::size_t r = 0; r < t.n; ++r)
            sc.rows[r] =
                summary_detail::row_slots(sum, sum.row(t.b, t.h, t.i0 + r), sc.state[r], &sc.bins[r * sum.bins]);
    }

    // The scores of keys [k0, k1) into sc.s, (n, ldc) holding keys [kbase, kbase + ldc):
    // float by our own register tiles over the head's keys packed once per worker
    // (OpenBLAS repacked a block's keys at every product, and zeroed every product's output
    // first: 10% of a long run), its blocks on panel boundaries; double by BLAS.
    void block_scores(const Tile& t, Scratch& sc, std::size_t k0, std::size_t k1, std::size_t& kbase,
                      std::size_t& ldc) const {
        const Dims& d = s_.d;
        if constexpr (std::is_same_v<T, float>) {
            const std::size_t p0 = k0 / kernels::kPanel, p1 = (k1 + kernels::kPanel - 1) / kernels::kPanel;
            kbase = p0 * kernels::kPanel, ldc = (p1 - p0) * kernels::kPanel;
            kernels::score_tile(sc.qt.data(), t.rows_pad, d.Dk, sc.kp.data(), p0, p1, s_.p.scale, sc.s.data(), ldc);
        } else {
            gemm<T>(false, true, t.n, ldc, d.Dk, s_.p.scale,
                    s_.qf.data() + (t.b * d.Tq + t.i0) * d.H * d.Dk + t.h * d.Dk, d.H * d.Dk,
                    s_.kf.data() + (t.b * d.Tk + k0) * d.G * d.Dk + t.g * d.Dk, d.G * d.Dk, T(0), sc.s.data(), ldc);
        }
    }

    // The first non-finite score of the block, noted.
    void scan_block(const Tile& t, const T* S, std::size_t k0, std::size_t k1, std::size_t kbase, std::size_t ldc) {
        for (std::size_t r = 0; r < t.n; ++r)
            for (std::size_t j = k0; j < k1; ++j)
                if (!std::isfinite(S[r * ldc + (j - kbase)]))
                    return s_.note_nonfinite(kScores, {t.b, t.h, t.i0 + r, j}, 4);
    }

    // Each row absorbs its keys of the block [k0, k1) (S: the scores of key k0, rows ldc
    // apart): the logits softcap(scores) + bias, -inf where hidden (steps.hpp), when the
    // run rewrites them; else the scores themselves.
    void absorb_block(const Tile& t, Scratch& sc, std::size_t k0, std::size_t k1, const T* S, std::size_t ldc) {
        const Problem<T>& p = s_.p;
        Summary& sum = *s_.tr.summary;
        const auto logits = steps::LogitRewrite<T>::of(p);
        bool* visible = sc.visible.data();
        if (t.positions)
            for (std::size_t j = k0; j < k1; ++j) sc.key_pos[j - k0] = p.mask.key_position(t.b, j);
        for (std::size_t r = 0; r < t.n; ++r) {
            const std::size_t i = t.i0 + r, a = std::max(k0, t.lo[r]), z = std::min(k1, t.hi[r]);
            if (a >= z) continue;
            const T* x = S + r * ldc + (a - k0);
            const bool* vis = nullptr;
            if (t.rewrite) {
                if (p.masking() && t.flags)
                    p.mask.row(t.b, i, a, z, visible);
                else
                    std::fill(visible, visible + (z - a), true);
                if (t.bias) p.bias_row(t.b, t.h, i, a, z, sc.bias.data());
                logits(x, t.bias ? sc.bias.data() : nullptr, visible, true, sc.x.data(), z - a);
                x = sc.x.data();
                vis = t.flags || t.bias ? visible : nullptr;
            }
            summary_detail::absorb(x, vis, a, z, p.mask.query_position(t.b, i),
                                   t.positions ? sc.key_pos.data() + (a - k0) : nullptr, sum, sc.rows[r], sc.e.data());
        }
    }

    // The tile's rows finished (with the head's sink), its distance bins, the callbacks.
    void finish_tile(const Tile& t, Scratch& sc) {
        Summary& sum = *s_.tr.summary;
        double* bins = &tile_bins_[((t.b * s_.d.H + t.h) * tiles_ + t.i0 / kSummaryRows) * sum.bins];
        const double sink = s_.p.sinks ? double((*s_.p.sinks)(t.h)) : 0.0;
        for (std::size_t r = 0; r < t.n; ++r)
            summary_detail::finish(sc.rows[r], s_.p.sinks ? &sink : nullptr, sum, sum.row(t.b, t.h, t.i0 + r), bins);
        if (s_.how.on_summary) s_.how.on_summary(sum, t.b, t.h, t.i0, t.n);
        if (s_.how.progress_done) ++*s_.how.progress_done;
    }

    State<T>& s_;
    const std::size_t tiles_;        // tiles of query rows per (batch, head)
    std::vector<double> tile_bins_;  // (B, H, tiles, bins)
};

}  // namespace

template <typename T>
void summary_tiles(State<T>& s, bool scan) {
    SummaryTiles<T>(s).run(scan);
}

template void summary_tiles<float>(State<float>&, bool);
template void summary_tiles<double>(State<double>&, bool);

}  // namespace attnscope::run
