// attnscope — core: per-row summaries of the attention weights, computed tile by tile.
//
// For long contexts the (B, H, Tq, Tk) weights cannot be held (T = 65,536, H = 8: 128 GiB
// in float32). attend() with Compute::summary computes, for every (batch, head, query) row,
// the quantities below from blocks of scores as they are made, then drops them: memory
// grows with Tq, never with Tq·Tk.
//
// Per row (B, H, Tq), positions as the mask rule gives them (q = q_pos(i), k = k_pos(j)):
//   entropy        -Σ_j w_ij ln w_ij (natural log; with a sink, of w / Σ_j w, as --diagnose)
//   effective_keys exp(entropy); 0 for a row that sees no key
//   max_weight     the largest weight; max_key its key (lowest index on ties; -1: no key)
//   topk_index     (B, H, Tq, K) the K largest weights' keys, largest first; ties go to
//   topk_weight      the lower key index; slots beyond the visible keys hold -1 and 0
//   sink_mass      Σ w_ij over keys with 0 <= k < s   (--sink-keys s; default sink_window(Tk))
//   local_mass     Σ w_ij over keys with q - w < k <= q        (--local w)
//   mean_distance  Σ_j w_ij · |q - k|
//   visible_keys   the keys the mask rule lets the row see
//   row_sum        Σ_j w_ij (1, or 1 - the sink's share, or 0 with no key)
// A row whose logits (or its head's sink) hold a NaN or an infinity has no weights to
// summarise (its dense weights are NaN): every number above is NaN, max_key and topk_index
// are -1 (topk_weight NaN), visible_keys stays the count; it is counted in nonfinite_rows
// and left out of its head's profile and means.
// Per head (B, H, bins):
//   distance_profile  bin 0: distance 0; bin k >= 1: distances 2^(k-1) .. 2^k - 1; the mass
//                     of each row in each bin, averaged over the finite rows that see a key
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace attnscope {

struct SummarySpec {
    std::size_t topk = 8;
    std::optional<std::size_t> sink_keys;  // none: sink_window(Tk); a Summary's is always set
    std::size_t local = 64;
};
// The sink window when none is given: Tk / 16 keys, at least key 0 and at most keys 0..3
// (key 0 alone below 32 keys, keys 0..3 from 64), so that a short sentence's first keys
// are not a third of it (docs/long-context.md).
std::size_t sink_window(std::size_t Tk);
inline constexpr std::size_t kMaxSinkWindow = 4;

struct Summary {
    std::size_t B = 0, H = 0, Tq = 0, Tk = 0, K = 0, bins = 0;
    SummarySpec spec;
    // (B, H, Tq)
    std::vector<double> entropy, effective_keys, max_weight, sink_mass, local_mass, mean_distance, row_sum;
    std::vector<std::int64_t> max_key, visible_keys;
    // (B, H, Tq, K)
    std::vector<std::int64_t> topk_index;
    std::vector<double> topk_weight;
    // (B, H, bins), the rows each head's profile averages and its non-finite rows: (B, H)
    std::vector<double> distance_profile;
    std::vector<std::int64_t> profile_rows, nonfinite_rows;

    std::size_t row(std::size_t b, std::size_t h, std::size_t i) const { return (b * H + h) * Tq + i; }
    // Whether row r's logits were all finite (its numbers then are; NaN marks the others).
    bool finite(std::size_t r) const { return !std::isnan(row_sum[r]); }
    // A row the head's profile and means count: finite, and seeing a key.
    bool counted(std::size_t r) const { return visible_keys[r] > 0 && finite(r); }
};

// Distance bin of |q - k|: 0 for 0, else bit_width(d) (2^(k-1) <= d < 2^k).
inline std::size_t distance_bin(unsigned long long d) { return d == 0 ? 0 : std::size_t(64 - __builtin_clzll(d)); }

// The one-line classification of a head, from its rows' means. The thresholds are
// printed with it; the first rule that holds names the head.
struct HeadClass {
    std::string label;  // sink, diagonal, previous-token, local, broad (or "no rows")
    double sink = 0, diagonal = 0, previous = 0, local = 0, effective_keys = 0, distance = 0;  // means over rows
};
inline constexpr double kSinkHead = 0.5;      // mean sink_mass >= this: sink
inline constexpr double kDiagonalHead = 0.5;  // mean mass at distance 0 >= this: diagonal
inline constexpr double kPreviousHead = 0.5;  // mean mass at distance 1 >= this: previous-token
inline constexpr double kLocalHead = 0.8;     // mean local_mass >= this: local; else broad
HeadClass classify_head(const Summary& s, std::size_t b, std::size_t h);
std::string head_class_rule(const SummarySpec& spec);  // the thresholds in words
std::string sink_keys_words(std::size_t sink_keys);    // "keys 0..3", "key 0", "no key"

namespace summary_detail {

// One row's summary while its keys arrive in blocks, in increasing key order, with an
// online softmax: the sums are kept relative to the largest logit seen so far, m, and
// rescaled by exp(m - m') when a block raises it to m'. No weight is ever formed but the
// top-k's; the row's keys need not be held together.
//   z  = Σ e_j,  e_j = exp(x_j - m)          wx = Σ e_j (x_j - m)   (entropy: ln z - wx / z)
//   wd = Σ e_j |q - k_j|   sink, near: Σ e_j over the sink and local keys   bins: by distance
// The top-k is kept by logit (the weights' order), in the Summary's own slots: index and,
// until finish(), the logit in place of the weight.
struct Sums {
    double z = 0, wx = 0, wd = 0, sink = 0, near = 0;
    // The same sums relative to m + by (each term times a = exp(-by)); returns a.
    double shift(double by) {
        const double a = std::exp(-by);
        wx = a * (wx - by * z);  // Σ e (x - m) -> Σ e a (x - m - by)
        z *= a, wd *= a, sink *= a, near *= a;
        return a;
    }
    void add(const Sums& o) { z += o.z, wx += o.wx, wd += o.wd, sink += o.sink, near += o.near; }
};
struct RowState {
    double m = -std::numeric_limits<double>::infinity();
    Sums sum;
    std::int64_t seen = 0;
    std::size_t filled = 0, used_bins = 0;
    std::int64_t own_index = -1;  // the top-1 slot when K = 0
    double own_logit = 0;
    bool nan_block = false;  // a block of visible keys had no largest logit, and a NaN
};

// Where a row's state and its slots live: the state, its K top-k slots (the Summary's,
// or the state's own one when K = 0) and its distance-bin sums (bins of them).
struct RowSlots {
    RowState* st;
    std::int64_t* index;
    double* logit;
    double* bins;
    std::size_t K;  // >= 1
};
RowSlots row_slots(Summary& s, std::size_t row, RowState& st, double* bins);

// Adds keys [lo, hi) of one row: x their logits (-inf for hidden keys), visible their
// flags (null: all visible), key_pos their positions (null: k_pos(j) = j), q the query's
// position, e scratch for hi - lo values.
template <typename T>
void absorb(const T* x, const bool* visible, std::size_t lo, std::size_t hi, long long q, const long long* key_pos,
            const Summary& s, const RowSlots& r, T* e);

// Writes the row's entries of s from its state; `sink`: the head's sink logit, which joins
// the denominator only (null: none); adds the row's bin masses to tile_bins[0, s.bins).
// A row whose sums are not finite (a NaN or an infinity among its logits or the sink)
// is marked as summary.hpp says, once, here: the loops above never test a value.
void finish(const RowSlots& r, const double* sink, Summary& s, std::size_t row, double* tile_bins);

extern template void absorb<float>(const float*, const bool*, std::size_t, std::size_t, long long, const long long*,
                                   const Summary&, const RowSlots&, float*);
extern template void absorb<double>(const double*, const bool*, std::size_t, std::size_t, long long, const long long*,
                                    const Summary&, const RowSlots&, double*);

}  // namespace summary_detail

}  // namespace attnscope
