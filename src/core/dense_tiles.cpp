// Core, step 3 of attend(): scores .. context by (batch, head, tile of whole query rows),
// on our threads with single-threaded BLAS. Per tile:
//    scores   (rows, Dk) x (Dk, Tk) -> (rows, Tk), times scale (Q_rot, K_rot with RoPE)
//    bias     ALiBi and/or the float attn_mask, per row
//    masked   softcap(scores) + bias, -inf where the mask is false (or the bias -inf)
//    weights  softmax over keys: exp(m - max) / sum; all-zero for a row with no key;
//             with a sink, its exp(s_h - max) joins the sum only
//    context  (rows, Tk) x (Tk, Dv) -> (rows, Dv), written into merged (B, Tq, H*Dv)
// Query head h reads K/V head g = h / (H/G): its columns of the flat K and V.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "blas.hpp"
#include "kernels.hpp"
#include "run.hpp"
#include "steps.hpp"

namespace attnscope::run {
namespace {

template <typename T>
class DenseTiles {
   public:
    explicit DenseTiles(State<T>& s) : s_(s), rows_(dense_rows(s)) {}

    void run() {
        const Dims& d = s_.d;
        const std::size_t tiles = (d.Tq + rows_ - 1) / rows_;
        std::vector<Scratch> scratch(std::min(s_.threads, d.B * d.H * tiles));
        parallel_for(d.B * d.H * tiles, s_.threads, [&](std::size_t item, std::size_t worker) {
            tile(item / (d.H * tiles), item / tiles % d.H, item % tiles * rows_, scratch[worker]);
        });
        const Trace<T>& tr = s_.tr;
        if (s_.keep[kScores]) check_shape(tr.scores, std::array{d.B, d.H, d.Tq, d.Tk}, "scores");
        if (s_.keep[kBias]) check_shape(tr.bias, std::array{d.B, d.H, d.Tq, d.Tk}, "bias");
        if (s_.keep[kMaskedScores] && !tr.masked_is_scores)
            check_shape(tr.masked_scores, std::array{d.B, d.H, d.Tq, d.Tk}, "masked_scores");
        if (s_.keep[kWeights]) check_shape(tr.weights, std::array{d.B, d.H, d.Tq, d.Tk}, "weights");
        if (s_.keep[kSinkWeight]) check_shape(tr.sink_weight, std::array{d.B, d.H, d.Tq}, "sink_weight");
        if (s_.keep[kContext]) check_shape(tr.context, std::array{d.B, d.H, d.Tq, d.Dv}, "context");
    }

   private:
    struct Scratch {
        Buffer<T> s, w;  // in the run's arena (Attention::plan_memory counts them)
        std::vector<T> bias;
        steps::Flags visible;
    };

    // One tile: query rows [i0, i0 + n) of (b, h), reading K/V head g. [klo, khi): the keys
    // its rows may see. The softmax and the context run over these alone whatever is kept
    // (the same sums in the same order: keeping a stage never changes a number); the
    // scores are computed for them alone, [lo, hi) = [klo, khi), when no (query, key)
    // stage is kept (narrow), else for every key. S, W: its scores and weights, (n, width).
    struct Tile {
        std::size_t b, h, g, i0, n, klo, khi, lo, hi, width;
        T* S;
        T* W;
    };

    void tile(std::size_t b, std::size_t h, std::size_t i0, Scratch& sc) {
        const Tile t = keys(b, h, i0, sc);
        scores(t);
        if (s_.scan_scores) scan(t);
        for (std::size_t r = 0; r < t.n; ++r) softmax_row(t, sc, r);
        if (s_.how.progress_done) ++*s_.how.progress_done;
        if (s_.need[kContext]) context(t);
    }

    Tile keys(std::size_t b, std::size_t h, std::size_t i0, Scratch& sc) {
        const Dims& d = s_.d;
        Trace<T>& tr = s_.tr;
        Tile t{};
        t.b = b, t.h = h, t.g = d.kv_head(h), t.i0 = i0, t.n = std::min(rows_, d.Tq - i0);
        t.klo = d.Tk, t.khi = 0;
        for (std::size_t r = 0; r < t.n; ++r) {
            const auto [a, z] = s_.p.mask.key_span(b, i0 + r);
            if (a < z) t.klo = std::min(t.klo, a), t.khi = std::max(t.khi, z);
        }
        if (t.klo >= t.khi) t.klo = t.khi = 0;
        t.lo = s_.narrow ? t.klo : 0, t.hi = s_.narrow ? t.khi : d.Tk;
        t.width = t.hi - t.lo;  // the tile's row stride
        t.S = tile_buffer(kScores, tr.scores, b, h, i0, sc.s);
        t.W = s_.keep[kWeights]  ? &tr.weights(b, h, i0, 0)
              : s_.keep[kScores] ? tile_buffer(kWeights, tr.weights, b, h, i0, sc.w)
                                 : t.S;
        return t;
    }

    // Rows i0.. of a kept (B, H, Tq, Tk) stage, or this worker's scratch when it is not kept.
    T* tile_buffer(Stage s, Tensor<T, 4>& stage, std::size_t b, std::size_t h, std::size_t i0,
                   Buffer<T>& scratch) const {
        if (s_.keep[s]) return &stage(b, h, i0, 0);
        if (scratch.empty()) {
            PlaceNext at(s_.scratch(rows_ * s_.d.Tk * sizeof(T)));
            scratch.resize(rows_ * s_.d.Tk);
        }
        return scratch.data();
    }

    // The scores of the tile's keys: those the rows may see by one product of their own
    // whatever is kept (a product's numbers may depend on its width), the rest apart.
    void scores(const Tile& t) const {
        const Dims& d = s_.d;
        const std::size_t H = d.H, G = d.G, Dk = d.Dk;
        const auto product = [&](std::size_t from, std::size_t to) {
            if (to > from)
                gemm<T>(false, true, t.n, to - from, Dk, s_.p.scale,
                        s_.qf.data() + (t.b * d.Tq + t.i0) * H * Dk + t.h * Dk, H * Dk,
                        s_.kf.data() + (t.b * d.Tk + from) * G * Dk + t.g * Dk, G * Dk, T(0), t.S + (from - t.lo),
                        t.width);
        };
        product(t.klo, t.khi);
        if (!s_.narrow) product(0, t.klo), product(t.khi, d.Tk);
    }

    // The first non-finite score of the tile, noted.
    void scan(const Tile& t) {
        for (std::size_t k = 0; k < t.n * t.width; ++k)
            if (!std::isfinite(t.S[k]))
                return s_.note_nonfinite(kScores, {t.b, t.h, t.i0 + k / t.width, t.lo + k % t.width}, 4);
    }

    // Row r: its logits softcap(scores) + bias (steps.hpp) into the weights' row, then the
    // softmax in place over the row's keys [a, z) (without flags when they are exact); the
    // keys outside them get weight 0 and masked score -inf.
    void softmax_row(const Tile& t, Scratch& sc, std::size_t r) {
        const Problem<T>& p = s_.p;
        Trace<T>& tr = s_.tr;
        const std::size_t i = t.i0 + r, b = t.b, h = t.h, lo = t.lo, width = t.width;
        const bool bias = p.has_bias();
        const bool masking = p.masking() || bias;  // a -inf bias hides its key too
        bool* visible = masking ? sc.visible.resize(std::max<std::size_t>(width, 1)) : nullptr;
        std::size_t a = t.klo, z = t.khi;
        if (s_.exact) {
            const auto span = p.mask.key_span(b, i);
            a = std::clamp(span.first, t.klo, t.khi), z = std::clamp(span.second, a, t.khi);
        }
        const bool flags = masking && !s_.exact;
        if (flags && p.masking())
            p.mask.row(b, i, lo, t.hi, visible);
        else if (flags)
            std::fill(visible, visible + width, true);
        const T* L = t.S + r * width;
        T* Wr = t.W + r * width;
        if (bias || p.spec.softcap) {
            T* Brow = nullptr;
            if (bias) {
                if (!s_.keep[kBias]) sc.bias.resize(s_.d.Tk);
                Brow = s_.keep[kBias] ? &tr.bias(b, h, i, 0) : sc.bias.data();
                p.bias_row(b, h, i, Brow);
                Brow += lo;
            }
            steps::LogitRewrite<T>::of(p)(L, Brow, visible, false, Wr, width);
            L = Wr;
        }
        // (M, when kept, is a whole row: lo = 0, as narrowing keeps no (query, key) stage)
        T* M = s_.keep[kMaskedScores] && !tr.masked_is_scores ? &tr.masked_scores(b, h, i, 0) : nullptr;
        const std::size_t o = a - lo;
        const bool* vis = flags ? visible + o : nullptr;
        if (p.sinks)
            kernels::sink_softmax_row(L + o, vis, M ? M + o : nullptr, Wr + o, z - a, (*p.sinks)(h),
                                      s_.keep[kSinkWeight] ? &tr.sink_weight(b, h, i) : nullptr);
        else
            kernels::masked_softmax_row(L + o, vis, M ? M + o : nullptr, Wr + o, z - a);
        std::fill(Wr, Wr + o, T(0));
        std::fill(Wr + (z - lo), Wr + width, T(0));
        if (M) {
            std::fill(M, M + o, -std::numeric_limits<T>::infinity());
            std::fill(M + (z - lo), M + width, -std::numeric_limits<T>::infinity());
        }
    }

    // context (n, khi - klo) x (khi - klo, Dv) -> (n, Dv) into merged (B, Tq, H*Dv): the
    // weights of the keys the rows may see; a zero context without any.
    void context(const Tile& t) {
        const Dims& d = s_.d;
        const std::size_t H = d.H, G = d.G, Dv = d.Dv;
        T* C = s_.merged.data() + (t.b * d.Tq + t.i0) * H * Dv + t.h * Dv;
        if (t.khi == t.klo) {
            for (std::size_t r = 0; r < t.n; ++r) std::fill_n(C + r * H * Dv, Dv, T(0));
        } else {
            gemm<T>(false, false, t.n, Dv, t.khi - t.klo, T(1), t.W + (t.klo - t.lo), t.width,
                    s_.vf.data() + (t.b * d.Tk + t.klo) * G * Dv + t.g * Dv, G * Dv, T(0), C, H * Dv);
        }
        if (s_.keep[kContext])
            for (std::size_t r = 0; r < t.n; ++r)
                std::copy(C + r * H * Dv, C + r * H * Dv + Dv, &s_.tr.context(t.b, t.h, t.i0 + r, 0));
    }

    State<T>& s_;
    const std::size_t rows_;  // query rows per tile
};

}  // namespace

template <typename T>
void dense_tiles(State<T>& s) {
    DenseTiles<T>(s).run();
}

template void dense_tiles<float>(State<float>&);
template void dense_tiles<double>(State<double>&);

}  // namespace attnscope::run
