// attnscope — core: scaled dot-product attention as a trace of named stages.
//
// Shape legend (outermost first, as numpy and PyTorch write them):
//   B    batch                         Tq   query positions
//   Tk   key/value positions           Dm   model width of the query source x
//   Dkv  width of the key/value source (memory; = Dm in self-attention)
//   H    heads                         Dk   per-head query/key width
//   Dv   per-head value width          Dout output width (= H*Dv without W_O)
//
// Stages, in order (docs/design.md, "The stage table"; the same names everywhere):
//   Q             x · W_Q (+ b_Q), split into heads        (B, H, Tq, Dk)
//   K             src · W_K (+ b_K), split into K/V heads  (B, G, Tk, Dk)
//   V             src · W_V (+ b_V), split into K/V heads  (B, G, Tk, Dv)
//   Q_rot, K_rot  Q and K rotated by position (RoPE only)  (B, H, Tq, Dk), (B, G, Tk, Dk)
//   scores        Q · Kᵀ · scale (Q_rot, K_rot with RoPE)  (B, H, Tq, Tk)
//   bias          ALiBi and/or a float attn_mask           (B, H, Tq, Tk)
//   mask          true where query i may see key j         (B, Tq, Tk)
//   masked_scores softcap(scores) + bias, -inf where mask is false (B, H, Tq, Tk)
//   weights       softmax over the key axis (and the sink) (B, H, Tq, Tk)
//   sink_weight   the sink's share of each row (sinks only) (B, H, Tq)
//   context       weights · V of the head's K/V head       (B, H, Tq, Dv)
//   head_output   context_h · W_O[h·Dv : (h+1)·Dv]         (B, Tq, H, Dout)
//   output        concat heads (B, Tq, H*Dv) · W_O (+ b_O) (B, Tq, Dout)
//
// G = H unless grouped-query attention shares each K/V head among H/G query heads:
// query head h reads K/V head h / (H/G). The repeated K/V heads are never materialised.
//
// The core never prints, exits or keeps global state. It is usable as a library:
// make_problem() (model.hpp) validates, attend() computes.
#pragma once

#include <array>
#include <atomic>
#include <bitset>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>
#include <xtensor/xtensor.hpp>

#include "attnscope/base/buffer.hpp"
#include "attnscope/core/arena.hpp"
#include "attnscope/core/stages.hpp"
#include "attnscope/core/summary.hpp"
#include "attnscope/model/model.hpp"

namespace attnscope {

// The stages are the rows of the stage table (stages.hpp): `Stage` ids, `StageSet`s.
// The stages called `names` (std::invalid_argument for a name that is no stage).
StageSet stage_set(const std::vector<std::string>& names);

// How to compute (not what): which stages to keep, and on how many threads.
// A stage not kept is never held whole: when only later stages are wanted, scores and
// weights are computed tile by tile (a few query rows at a time) and dropped.
struct Compute {
    StageSet keep = default_stages();  // (stages the problem lacks are ignored)
    std::size_t threads = 0;           // 0: every core
    // A run with fewer floating-point operations stays on the calling thread (starting
    // threads would cost more than they save); 0 uses `threads` whatever the size.
    double parallel_min_flop = 1e7;
    // Optional progress counters, updated as tiles finish (a front end may poll them
    // from another thread to show progress; the core itself never prints).
    std::atomic<std::size_t>* progress_done = nullptr;
    std::atomic<std::size_t>* progress_total = nullptr;
    // Optional: where a kept stage of `bytes` bytes is to live (e.g. mapped into the
    // file it will be dumped to), or null for ordinary memory. Called on the calling
    // thread, once per kept stage, before that stage is computed.
    std::function<std::shared_ptr<Placement>(Stage, std::size_t bytes)> place;
    // Optional: where every kept stage without such a place, and the working buffers, are
    // to live (arena.hpp); null: an arena of this run's own. Lend one Arena to attend()
    // after attend() (layers, steps), dropping each Trace before the next call, and its
    // pages are touched once: its block is reused when nothing taken from it is alive.
    Arena* arena = nullptr;
    // Optional: per-row summaries of the weights (summary.hpp), computed tile by tile; the
    // weights need not be kept. When no (B, H, Tq, Tk) stage is kept, a tile's keys are
    // only those the mask rule can let its rows see (causal: tiles above the diagonal are
    // never computed).
    std::optional<SummarySpec> summary;
    // Optional: called as the summaries of query rows [i0, i0 + n) of (b, h) are complete
    // (from the computing threads, one call at a time per tile: the callee serialises).
    std::function<void(const Summary&, std::size_t b, std::size_t h, std::size_t i0, std::size_t n)> on_summary;
};

// A query row that can see no key at all (padding and/or causal mask): its weights are
// all zero (PyTorch's _safe_softmax behaviour), never NaN.
struct MaskedRow {
    std::size_t batch, query;
};

// The named stages of one run. Stages not in `kept` are empty tensors.
template <typename T>
struct Trace {
    Dims dims;
    bool batched = true;
    T scale = T(1);
    StageSet kept;
    Tensor<T, 4> Q;              // (B, H, Tq, Dk)
    Tensor<T, 4> K;              // (B, G, Tk, Dk)
    Tensor<T, 4> V;              // (B, G, Tk, Dv)
    Tensor<T, 4> Q_rot;          // (B, H, Tq, Dk)
    Tensor<T, 4> K_rot;          // (B, G, Tk, Dk)
    Tensor<T, 4> scores;         // (B, H, Tq, Tk)
    Tensor<T, 4> bias;           // (B, H, Tq, Tk)
    Tensor<bool, 3> mask;        // (B, Tq, Tk)
    Tensor<T, 4> masked_scores;  // (B, H, Tq, Tk); empty when it would equal scores (use masked())
    Tensor<T, 4> weights;        // (B, H, Tq, Tk)
    Tensor<T, 3> sink_weight;    // (B, H, Tq)
    Tensor<T, 4> context;        // (B, H, Tq, Dv)
    Tensor<T, 4> head_output;    // (B, Tq, H, Dout)
    Tensor<T, 3> output;         // (B, Tq, Dout)
    std::vector<MaskedRow> fully_masked;
    std::shared_ptr<Summary> summary;  // with Compute::summary
    // The first stage (in pipeline order) where a NaN or an infinity appears, and its
    // index in that stage's shape, e.g. scores at (0, 1, 3, 2) when the dot products
    // overflow. Masked cells' -inf do not count. With finite inputs, this is where the
    // arithmetic left the numbers a float can hold.
    struct NonFiniteAt {
        Stage stage;
        std::array<std::size_t, 4> at;
        std::size_t rank;
    };
    std::optional<NonFiniteAt> first_nonfinite;
    // The masked_scores stage. When nothing is masked it equals scores, and if both are
    // kept only scores is held (a T² tensor less): this returns scores then.
    const Tensor<T, 4>& masked() const { return masked_is_scores ? scores : masked_scores; }
    bool masked_is_scores = false;
};

// Bytes a run will allocate: the kept stages plus the working set (projections,
// per-thread tiles). Used to refuse a run before it allocates anything. `masking`:
// masked_scores differs from scores (a key masked, a bias, a softcap); without, masked_scores
// kept with scores costs nothing.
std::size_t planned_bytes(const Dims& d, std::size_t value_size, const Compute& how, bool masking = true);

// What a run holds at its peak: the arrays as read, the typed inputs, the kept stages
// and the working set. MemoryLimitError when that is over `limit`, before the
// computation allocates any of it.
template <typename T>
void check_memory_limit(const Bundle& bundle, const Problem<T>& p, const Compute& how, std::size_t limit);

// The stages problem p has: the classic ones; Q_rot and K_rot with RoPE; bias with ALiBi
// or a float attn_mask; sink_weight with sinks; head_output (kept only when asked for).
template <typename T>
StageSet stages_of(const Problem<T>& p) {
    StageSet s = classic_stages();
    s.set(kHeadOutput);
    if (p.rope_dim) s.set(kQRot).set(kKRot);
    if (p.has_bias()) s.set(kBias);
    if (p.sinks) s.set(kSinkWeight);
    return s;
}

template <typename T>
Trace<T> attend(const Problem<T>& p, const Compute& how = {});

extern template void check_memory_limit<float>(const Bundle&, const Problem<float>&, const Compute&, std::size_t);
extern template void check_memory_limit<double>(const Bundle&, const Problem<double>&, const Compute&, std::size_t);
extern template Trace<float> attend<float>(const Problem<float>&, const Compute&);
extern template Trace<double> attend<double>(const Problem<double>&, const Compute&);

}  // namespace attnscope
