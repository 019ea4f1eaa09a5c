// Per-row summaries of attention weights (see summary.hpp).
//
// A row is read twice: once for the top-k keys (a compare per key; a block of 8 keys is
// looked at one by one only when one of them beats the current k-th weight), then by
// segments of keys that share a distance bin and lie wholly inside or outside the sink
// and local ranges: each segment's Σ w, Σ w·d and Σ w·(x - x_max) are plain sums that
// vectorise. The entropy needs no logarithm per key: with w_j ∝ exp(x_j),
//   ln w_j = (x_j - x_m) + ln w_m      (m: the largest weight)
//   -Σ w_j ln w_j = -Σ w_j (x_j - x_m) - (Σ w_j) ln w_m.
#include "attnscope/core/summary.hpp"

#include <algorithm>
#include <cmath>

namespace attnscope {

std::size_t Summary::bytes(std::size_t B, std::size_t H, std::size_t Tq, std::size_t K, std::size_t bins) {
    const std::size_t rows = B * H * Tq;
    return rows * (9 * sizeof(double) + 2 * sizeof(std::int64_t)) + rows * K * 16 + B * H * (bins * 8 + 8);
}

HeadClass classify_head(const Summary& s, std::size_t b, std::size_t h) {
    HeadClass c;
    const std::size_t n = std::size_t(s.profile_rows[b * s.H + h]);
    if (n == 0) {
        c.label = "no rows";
        return c;
    }
    for (std::size_t i = 0; i < s.Tq; ++i) {
        const std::size_t r = s.row(b, h, i);
        if (s.visible_keys[r] == 0) continue;
        c.sink += s.sink_mass[r];
        c.local += s.local_mass[r];
        c.effective_keys += s.effective_keys[r];
        c.distance += s.mean_distance[r];
    }
    c.sink /= double(n), c.local /= double(n), c.effective_keys /= double(n), c.distance /= double(n);
    const double* prof = &s.distance_profile[(b * s.H + h) * s.bins];
    c.diagonal = s.bins > 0 ? prof[0] : 0;
    c.previous = s.bins > 1 ? prof[1] : 0;
    c.label = c.sink >= kSinkHead           ? "sink"
              : c.diagonal >= kDiagonalHead ? "diagonal"
              : c.previous >= kPreviousHead ? "previous-token"
              : c.local >= kLocalHead       ? "local"
                                            : "broad";
    return c;
}

std::string head_class_rule(const SummarySpec& spec) {
    auto pct = [](double v) { return std::to_string(int(std::lround(v * 100))) + "%"; };
    return "sink: mean mass on keys 0.." + std::to_string(spec.sink_keys) + "-1 >= " + pct(kSinkHead) +
           "; diagonal: at distance 0 >= " + pct(kDiagonalHead) +
           "; previous-token: at distance 1 >= " + pct(kPreviousHead) + "; local: within " +
           std::to_string(spec.local) + " >= " + pct(kLocalHead) + "; else broad";
}

namespace summary_detail {
namespace {

struct Sums {
    double w = 0, wd = 0, wx = 0;
};

// Σ w, Σ w·d, Σ w·(x - xm) over n keys, d_j = d0 + step·j; keys with w = 0 add nothing
// (their logit may be -inf). Eight lanes, so that the loop vectorises.
template <typename T>
inline __attribute__((always_inline)) Sums segment_body(const T* w, const T* x, std::size_t n, T d0, T step, T xm) {
    T aw[8] = {}, ad[8] = {}, ax[8] = {}, d[8];
    for (std::size_t l = 0; l < 8; ++l) d[l] = d0 + step * T(l);  // distances, stepped by 8 (exact integers)
    const std::size_t full = n / 8 * 8;
    for (std::size_t j = 0; j < full; j += 8)
        for (std::size_t l = 0; l < 8; ++l) {
            const T v = w[j + l];
            aw[l] += v;
            ad[l] += v * d[l];
            d[l] += T(8) * step;
            ax[l] += v > T(0) ? v * (x[j + l] - xm) : T(0);
        }
    Sums s;
    for (std::size_t j = full; j < n; ++j) {
        const T v = w[j];
        s.w += double(v), s.wd += double(v) * double(d0 + step * T(j));
        if (v > T(0)) s.wx += double(v) * double(x[j] - xm);
    }
    for (std::size_t l = 0; l < 8; ++l) s.w += double(aw[l]), s.wd += double(ad[l]), s.wx += double(ax[l]);
    return s;
}

__attribute__((target_clones("arch=x86-64-v3", "default"))) Sums segment(const float* w, const float* x, std::size_t n,
                                                                         float d0, float step, float xm) {
    return segment_body(w, x, n, d0, step, xm);
}
__attribute__((target_clones("arch=x86-64-v3", "default"))) Sums segment(const double* w, const double* x,
                                                                         std::size_t n, double d0, double step,
                                                                         double xm) {
    return segment_body(w, x, n, d0, step, xm);
}

// The largest of 32 weights (NaN aside), in lanes that vectorise.
template <typename T>
inline __attribute__((always_inline)) T max32_body(const T* w) {
    T m[8];
    for (std::size_t l = 0; l < 8; ++l) m[l] = w[l];
    for (std::size_t k = 8; k < 32; k += 8)
        for (std::size_t l = 0; l < 8; ++l) m[l] = w[k + l] > m[l] ? w[k + l] : m[l];
    T r = m[0];
    for (std::size_t l = 1; l < 8; ++l) r = m[l] > r ? m[l] : r;
    return r;
}
__attribute__((target_clones("arch=x86-64-v3", "default"))) float max32(const float* w) { return max32_body(w); }
__attribute__((target_clones("arch=x86-64-v3", "default"))) double max32(const double* w) { return max32_body(w); }

// The K largest (weight, key), largest first, ties to the lower key: keys arrive in
// increasing order, so a key enters only past weights strictly below its own.
template <typename T>
struct TopK {
    std::size_t K, filled = 0;
    std::int64_t* idx;
    double* wt;
    void offer(double v, std::int64_t j) {
        std::size_t p;
        if (filled < K)
            p = filled++;
        else if (v > wt[K - 1])
            p = K - 1;
        else
            return;
        while (p > 0 && wt[p - 1] < v) {
            wt[p] = wt[p - 1], idx[p] = idx[p - 1];
            --p;
        }
        wt[p] = v, idx[p] = j;
    }
};

}  // namespace

template <typename T>
void summarize_row(const T* w, const T* x, const bool* visible, std::size_t lo, std::size_t hi, long long q,
                   const long long* key_pos, bool normalise, Summary& s, std::size_t row, double* bins) {
    const std::size_t n = hi - lo, K = s.K;
    // 1) Top-k (and the largest weight: top-1), and the visible keys.
    std::int64_t best_idx[1];
    double best_wt[1];
    std::int64_t* idx = K ? &s.topk_index[row * K] : best_idx;
    double* wt = K ? &s.topk_weight[row * K] : best_wt;
    const std::size_t Kk = std::max<std::size_t>(K, 1);
    std::fill(idx, idx + Kk, std::int64_t(-1));
    std::fill(wt, wt + Kk, 0.0);
    TopK<T> top{Kk, 0, idx, wt};
    std::size_t seen = 0, j = 0;
    if (visible) {
        for (std::size_t k = 0; k < n; ++k) seen += visible[k];
        for (; j < n && top.filled < Kk; ++j)
            if (visible[j]) top.offer(double(w[j]), std::int64_t(lo + j));
    } else {
        seen = n;
        for (; j < n && top.filled < Kk; ++j) top.offer(double(w[j]), std::int64_t(lo + j));
    }
    // Once full, hidden keys (weight 0) can never enter: no flags needed.
    // (a NaN weight never enters: it beats no weight)
    for (; j + 32 <= n; j += 32) {
        if (!(double(max32(w + j)) > wt[Kk - 1])) continue;
        for (std::size_t l = 0; l < 32; ++l) top.offer(double(w[j + l]), std::int64_t(lo + j + l));
    }
    for (; j < n; ++j) top.offer(double(w[j]), std::int64_t(lo + j));
    s.visible_keys[row] = std::int64_t(seen);
    if (seen == 0) {
        s.entropy[row] = s.effective_keys[row] = s.max_weight[row] = 0;
        s.sink_mass[row] = s.local_mass[row] = s.mean_distance[row] = s.row_sum[row] = 0;
        s.max_key[row] = -1;
        return;
    }
    s.max_weight[row] = wt[0];
    s.max_key[row] = idx[0];
    const T xm = x[std::size_t(idx[0]) - lo];
    // 2) Masses by segment.
    const long long sinks = (long long)s.spec.sink_keys,
                    local = (long long)std::min<std::size_t>(s.spec.local, std::size_t{1} << 60);
    double total = 0, dist = 0, wx = 0, sink = 0, near = 0;
    if (!key_pos) {
        // Keys [a, b] (positions = indices), all in bin `bin`, on the left (j <= q) or right.
        auto piece = [&](long long a, long long b, std::size_t bin, bool left) {
            a = std::max(a, (long long)lo), b = std::min(b, (long long)hi - 1);
            if (a > b) return;
            // split at the sink boundary (k < sinks) and the local one (k > q - local)
            long long cuts[4] = {a, b + 1, b + 1, b + 1};
            std::size_t nc = 1;
            for (long long c : {sinks, q - local + 1})
                if (c > a && c <= b) cuts[nc++] = c;
            std::sort(cuts, cuts + nc);
            cuts[nc] = b + 1;
            for (std::size_t k = 0; k < nc; ++k) {
                const long long u = cuts[k], v = cuts[k + 1];
                if (u >= v) continue;
                const std::size_t o = std::size_t(u) - lo;
                const Sums sm =
                    segment(w + o, x + o, std::size_t(v - u), T(left ? q - u : u - q), T(left ? -1 : 1), xm);
                total += sm.w, dist += sm.wd, wx += sm.wx;
                bins[std::min(bin, s.bins - 1)] += sm.w;
                if (u < sinks) sink += sm.w;
                if (left && u > q - local) near += sm.w;
            }
        };
        piece(q, q, 0, true);
        for (std::size_t k = 1; k < 64; ++k) {
            const long long a = 1LL << (k - 1), b = (1LL << k) - 1;  // distances [a, b]
            const bool more = q - b > (long long)lo || q + b < (long long)hi - 1;
            piece(q - b, q - a, k, true);
            piece(q + a, q + b, k, false);
            if (!more) break;
        }
    } else {
        for (std::size_t k = 0; k < n; ++k) {
            const double v = double(w[k]);
            if (v == 0) continue;  // hidden keys, and weights that underflowed
            const long long kp = key_pos[k];
            const unsigned long long d = kp > q ? (unsigned long long)(kp - q) : (unsigned long long)(q - kp);
            total += v, dist += v * double(d), wx += v * double(x[k] - xm);
            bins[std::min(distance_bin(d), s.bins - 1)] += v;
            if (kp >= 0 && kp < sinks) sink += v;
            if (kp <= q && kp > q - local) near += v;
        }
    }
    double H = wt[0] > 0 ? -wx - total * std::log(wt[0]) : 0;
    if (normalise && total > 0) H = H / total + std::log(total);
    H = H > 0 ? H : 0.0;  // never below 0 (nor -0) by rounding
    s.entropy[row] = H;
    s.effective_keys[row] = std::exp(H);
    s.sink_mass[row] = sink;
    s.local_mass[row] = near;
    s.mean_distance[row] = dist;
    s.row_sum[row] = total;
}

template void summarize_row<float>(const float*, const float*, const bool*, std::size_t, std::size_t, long long,
                                   const long long*, bool, Summary&, std::size_t, double*);
template void summarize_row<double>(const double*, const double*, const bool*, std::size_t, std::size_t, long long,
                                    const long long*, bool, Summary&, std::size_t, double*);

}  // namespace summary_detail
}  // namespace attnscope
