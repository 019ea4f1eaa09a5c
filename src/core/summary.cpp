// Per-row summaries of attention weights (see summary.hpp).
//
// A row's keys arrive in blocks (attention.cpp: one product of scores per block of keys,
// held in cache), and each block is read a few times while it is there: the first keys
// fill the top-k; then, by segments of keys that share a distance bin and lie wholly
// inside or outside the sink and local ranges, e = exp(x - m) with Σ e, Σ e·d and
// Σ e·(x - m) in one vectorised pass, which also finds the block's largest logit (a
// larger one than the row's m rescales the sums); last, only when that largest logit
// beats the k-th, a vectorised scan for the keys that enter the top-k. The entropy needs
// no logarithm per key: with p_j = e_j / z,  -Σ p_j ln p_j = ln z - Σ e_j (x_j - m) / z.
#include "attnscope/core/summary.hpp"

#include <algorithm>
#include <cmath>

#include "kernels.hpp"

namespace attnscope {

HeadClass classify_head(const Summary& s, std::size_t b, std::size_t h) {
    HeadClass c;
    const std::size_t n = std::size_t(s.profile_rows[b * s.H + h]);
    if (n == 0) {
        c.label = "no rows";
        return c;
    }
    for (std::size_t i = 0; i < s.Tq; ++i) {
        const std::size_t r = s.row(b, h, i);
        if (!s.counted(r)) continue;
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

std::size_t sink_window(std::size_t Tk) { return std::clamp<std::size_t>(Tk / 16, 1, kMaxSinkWindow); }

std::string sink_keys_words(std::size_t s) {
    return s == 0 ? "no key" : s == 1 ? "key 0" : "keys 0.." + std::to_string(s - 1);
}

std::string head_class_rule(const SummarySpec& spec) {
    auto pct = [](double v) { return std::to_string(int(std::lround(v * 100))) + "%"; };
    return "sink: mean mass on " + sink_keys_words(spec.sink_keys.value_or(kMaxSinkWindow)) + " >= " + pct(kSinkHead) +
           "; diagonal: at distance 0 >= " + pct(kDiagonalHead) +
           "; previous-token: at distance 1 >= " + pct(kPreviousHead) + "; local: within " +
           std::to_string(spec.local) + " >= " + pct(kLocalHead) + "; else broad";
}

namespace summary_detail {

RowSlots row_slots(Summary& s, std::size_t row, RowState& st, double* bins) {
    if (s.K == 0) return {&st, &st.own_index, &st.own_logit, bins, 1};
    return {&st, &s.topk_index[row * s.K], &s.topk_weight[row * s.K], bins, s.K};
}

namespace {

// Multiplies the row's sums by exp(m - m') for a new maximum m' > m.
void raise_max(const RowSlots& r, double m2) {
    RowState& st = *r.st;
    if (st.m == -std::numeric_limits<double>::infinity()) {  // nothing summed yet
        st.m = m2;
        return;
    }
    const double a = st.sum.shift(m2 - st.m);
    for (std::size_t k = 0; k < st.used_bins; ++k) r.bins[k] *= a;
    st.m = m2;
}

// The top-k by logit, largest first, ties to the lower key: keys arrive in increasing
// order, so a key enters only past logits strictly below its own.
inline void offer(const RowSlots& r, double v, std::int64_t j) {
    RowState& st = *r.st;
    std::size_t p;
    if (st.filled < r.K)
        p = st.filled++;
    else if (v > r.logit[r.K - 1])
        p = r.K - 1;
    else
        return;
    while (p > 0 && r.logit[p - 1] < v) {
        r.logit[p] = r.logit[p - 1], r.index[p] = r.index[p - 1];
        --p;
    }
    r.logit[p] = v, r.index[p] = j;
}

// One block's sums relative to m, kept apart until they are added to the row's: Σ e,
// Σ e (x - m), Σ e d, the sink and local masses, the bins, and the block's largest logit.
struct BlockSums {
    double m = 0, max = -std::numeric_limits<double>::infinity();
    Sums sum;
    std::size_t used_bins = 0;
    double bins[64];

    void add_bin(std::size_t bin, std::size_t bins_count, double v) {
        bin = std::min(bin, bins_count - 1);
        for (; used_bins <= bin; ++used_bins) bins[used_bins] = 0;
        bins[bin] += v;
    }
};

// The keys' bounds for the sink and local masses: k < sinks, q - local < k <= q.
struct MassBounds {
    long long sinks, local;
    explicit MassBounds(const Summary& s)
        : sinks((long long)s.spec.sink_keys.value_or(sink_window(s.Tk))),
          local((long long)std::min<std::size_t>(s.spec.local, std::size_t{1} << 60)) {}
};

// Keys at their indices (no key_pos): the block [lo, hi) summed piece by piece, bins in
// order of distance from the keys nearest q outwards, each piece cut at the sink and local
// boundaries, by the vectorised exp_sums.
template <typename T>
void sums_by_index(const T* x, std::size_t lo, std::size_t hi, long long q, const Summary& s, T m, BlockSums& blk) {
    const MassBounds mb(s);
    // Keys [a, b] (positions = indices), all in bin `bin`, on the left (k <= q) or right.
    auto piece = [&](long long a, long long b, std::size_t bin, bool left) {
        a = std::max(a, (long long)lo), b = std::min(b, (long long)hi - 1);
        if (a > b) return;
        // split at the sink boundary (k < sinks) and the local one (k > q - local)
        long long cuts[4] = {a, b + 1, b + 1, b + 1};
        std::size_t nc = 1;
        for (long long c : {mb.sinks, q - mb.local + 1})
            if (c > a && c <= b) cuts[nc++] = c;
        std::sort(cuts, cuts + nc);
        cuts[nc] = b + 1;
        for (std::size_t k = 0; k < nc; ++k) {
            const long long u = cuts[k], v = cuts[k + 1];
            if (u >= v) continue;
            const std::size_t o = std::size_t(u) - lo;
            const kernels::ExpSums sm =
                kernels::exp_sums(x + o, m, T(left ? q - u : u - q), T(left ? -1 : 1), std::size_t(v - u));
            blk.sum.z += sm.e, blk.sum.wd += sm.ed, blk.sum.wx += sm.ex;
            blk.max = sm.max > blk.max ? sm.max : blk.max;
            blk.add_bin(bin, s.bins, sm.e);
            if (u < mb.sinks) blk.sum.sink += sm.e;
            if (left && u > q - mb.local) blk.sum.near += sm.e;
        }
    };
    const long long first = (long long)lo, last = (long long)hi - 1;
    if (q >= first && q <= last) piece(q, q, 0, true);
    for (std::size_t k = 1; k < 63; ++k) {
        const long long a = 1LL << (k - 1), b = (1LL << k) - 1;  // distances [a, b]
        if (q - a >= first && q - b <= last) piece(q - b, q - a, k, true);
        if (q + a <= last && q + b >= first) piece(q + a, q + b, k, false);
        if (q - b <= first && q + b >= last) break;
    }
}

// Keys at positions key_pos (n of them): e = exp(x - m) into `e`, then each key's terms.
template <typename T>
void sums_by_position(const T* x, std::size_t n, long long q, const long long* key_pos, const Summary& s, T m, T* e,
                      BlockSums& blk) {
    const MassBounds mb(s);
    blk.max = double(kernels::row_max(x, n));
    kernels::exp_shifted(x, m, e, n);
    for (std::size_t k = 0; k < n; ++k) {
        const double v = double(e[k]);
        if (v == 0) continue;  // hidden keys, and terms that underflowed
        const long long kp = key_pos[k];
        const unsigned long long d = kp > q ? (unsigned long long)(kp - q) : (unsigned long long)(q - kp);
        blk.sum.z += v, blk.sum.wd += v * double(d), blk.sum.wx += v * (double(x[k]) - double(m));
        blk.add_bin(distance_bin(d), s.bins, v);
        if (kp >= 0 && kp < mb.sinks) blk.sum.sink += v;
        if (kp <= q && kp > q - mb.local) blk.sum.near += v;
    }
}

template <typename T>
BlockSums block_sums(const T* x, std::size_t lo, std::size_t hi, long long q, const long long* key_pos,
                     const Summary& s, T m, T* e) {
    BlockSums blk;
    blk.m = double(m);
    if (!key_pos)
        sums_by_index(x, lo, hi, q, s, m, blk);
    else
        sums_by_position(x, hi - lo, q, key_pos, s, m, e, blk);
    return blk;
}

// 1) Top-k by logit, and the visible keys. Until the slots are full only visible keys
//    enter; then hidden ones (-inf) never can. (A NaN logit beats none.) Returns the first
//    key not yet offered.
template <typename T>
std::size_t offer_first(const T* x, const bool* visible, std::size_t lo, std::size_t n, const RowSlots& r) {
    RowState& st = *r.st;
    std::size_t j = 0;
    if (visible) {
        for (std::size_t k = 0; k < n; ++k) st.seen += visible[k];
        for (; j < n && st.filled < r.K; ++j)
            if (visible[j]) offer(r, double(x[j]), std::int64_t(lo + j));
    } else {
        st.seen += std::int64_t(n);
        for (; j < n && st.filled < r.K; ++j) offer(r, double(x[j]), std::int64_t(lo + j));
    }
    return j;
}

// 2) The sums, relative to the running maximum m. The first block of a row sets m from
//    its largest logit; a later one is summed relative to the m it finds (its terms may
//    exceed 1), its largest logit found on the way, and then added in, m raised and every
//    sum rescaled when that is larger (or summed again, should it be so much larger that
//    a term could overflow). Returns the block's largest logit (-inf when none).
template <typename T>
double add_sums(const T* x, std::size_t lo, std::size_t hi, long long q, const long long* key_pos, const Summary& s,
                const RowSlots& r, T* e) {
    RowState& st = *r.st;
    const std::size_t n = hi - lo;
    const double neg_inf = -std::numeric_limits<double>::infinity();
    if (st.m == neg_inf) {
        const double mx = double(kernels::row_max(x, n));
        if (mx > st.m)
            raise_max(r, mx);
        else  // no largest logit: hidden keys (-inf), or NaN, which the sums would never see
            st.nan_block = st.nan_block || std::any_of(x, x + n, [](T v) { return std::isnan(v); });
    }
    if (st.m == neg_inf) return neg_inf;
    BlockSums blk = block_sums(x, lo, hi, q, key_pos, s, T(st.m), e);
    const double mx = blk.max;
    if (mx > st.m + 64) {  // exp(x - m) could leave float's range: again, relative to mx
        raise_max(r, mx);
        blk = block_sums(x, lo, hi, q, key_pos, s, T(st.m), e);
    } else if (mx > st.m) {
        raise_max(r, mx);
    }
    // the block's sums were made relative to blk.m: to st.m (as raise_max does)
    if (blk.m != st.m) {
        const double a = blk.sum.shift(st.m - blk.m);
        for (std::size_t k = 0; k < blk.used_bins; ++k) blk.bins[k] *= a;
    }
    st.sum.add(blk.sum);
    for (std::size_t k = 0; k < blk.used_bins; ++k) r.bins[k] += blk.bins[k];
    st.used_bins = std::max(st.used_bins, blk.used_bins);
    return mx;
}

}  // namespace

template <typename T>
void absorb(const T* x, const bool* visible, std::size_t lo, std::size_t hi, long long q, const long long* key_pos,
            const Summary& s, const RowSlots& r, T* e) {
    const std::size_t n = hi - lo;
    std::size_t j = offer_first(x, visible, lo, n, r);           // 1) top-k until full, visible keys
    const double mx = add_sums(x, lo, hi, q, key_pos, s, r, e);  // 2) the sums
    // 3) The keys past the k-th logit (a T: comparing in T is exact), by a vectorised scan.
    const RowState& st = *r.st;
    T kth = st.filled == r.K ? T(r.logit[r.K - 1]) : -std::numeric_limits<T>::infinity();
    if (!(mx > double(kth)) && mx != -std::numeric_limits<double>::infinity()) return;
    while ((j += kernels::first_above(x + j, n - j, kth)) < n) {
        offer(r, double(x[j]), std::int64_t(lo + j));
        kth = T(r.logit[r.K - 1]);
        ++j;
    }
}

namespace {

// A row without weights: `v` in every number (0 for a row that sees no key, NaN for one
// whose logits are not finite), -1 for every key, `slot` in every top-k weight.
void blank_row(const RowSlots& r, Summary& s, std::size_t row, double v, double slot) {
    s.entropy[row] = s.effective_keys[row] = s.max_weight[row] = v;
    s.sink_mass[row] = s.local_mass[row] = s.mean_distance[row] = s.row_sum[row] = v;
    s.max_key[row] = -1;
    std::fill(r.index, r.index + r.K, std::int64_t(-1));
    std::fill(r.logit, r.logit + r.K, slot);
}

}  // namespace

void finish(const RowSlots& r, const double* sink, Summary& s, std::size_t row, double* tile_bins) {
    const RowState& st = *r.st;
    s.visible_keys[row] = st.seen;
    if (st.seen == 0) return blank_row(r, s, row, 0.0, 0.0);
    // Weights are e^(x - M) / den, M = max(m, sink): the sums (relative to m) times f / den.
    const double M = sink && *sink > st.m ? *sink : st.m;
    const double f = st.m == M ? 1.0 : std::exp(st.m - M);
    const Sums& sum = st.sum;
    const double den = sum.z * f + (sink ? std::exp(*sink - M) : 0.0);
    const double unit = f / den;
    // A NaN logit makes z NaN; +inf makes it NaN (inf - inf); visible keys all -inf leave
    // it 0 (exp(-inf - -inf) is NaN in the dense softmax); a NaN or +inf sink, den NaN.
    if (st.nan_block || !(sum.z > 0) || !std::isfinite(sum.z + sum.wx + sum.wd) || !std::isfinite(unit)) {
        const double nan = std::numeric_limits<double>::quiet_NaN();
        return blank_row(r, s, row, nan, nan);
    }
    // The top-k's weights, and their order by weight (ties, should rounding make any, to
    // the lower key); the slots never filled hold -1 and 0.
    for (std::size_t k = 0; k < r.K; ++k)
        r.logit[k] = k < st.filled && r.index[k] >= 0 ? std::exp(r.logit[k] - M) / den : 0.0;
    for (std::size_t k = st.filled; k < r.K; ++k) r.index[k] = -1;
    for (std::size_t k = 1; k < st.filled; ++k)
        for (std::size_t p = k;
             p > 0 && (r.logit[p] > r.logit[p - 1] || (r.logit[p] == r.logit[p - 1] && r.index[p] < r.index[p - 1]));
             --p)
            std::swap(r.logit[p], r.logit[p - 1]), std::swap(r.index[p], r.index[p - 1]);
    s.max_weight[row] = r.logit[0];
    s.max_key[row] = r.index[0];
    // The entropy of the keys' own distribution (with a sink: of w / Σ w, as --diagnose).
    double H = sum.z > 0 ? std::log(sum.z) - sum.wx / sum.z : 0.0;
    H = H > 0 ? H : 0.0;  // never below 0 (nor -0) by rounding
    s.entropy[row] = H;
    s.effective_keys[row] = std::exp(H);
    s.sink_mass[row] = sum.sink * unit;
    s.local_mass[row] = sum.near * unit;
    s.mean_distance[row] = sum.wd * unit;
    s.row_sum[row] = sum.z * unit;
    for (std::size_t k = 0; k < st.used_bins; ++k) tile_bins[k] += r.bins[k] * unit;
}

template void absorb<float>(const float*, const bool*, std::size_t, std::size_t, long long, const long long*,
                            const Summary&, const RowSlots&, float*);
template void absorb<double>(const double*, const bool*, std::size_t, std::size_t, long long, const long long*,
                             const Summary&, const RowSlots&, double*);

}  // namespace summary_detail
}  // namespace attnscope
