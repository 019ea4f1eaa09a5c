// Core, inside attend(): what the steps of one run share (the problem, what to keep, the
// flat projections, the trace being filled), the tile sizes of the memory plan, and the
// thread pool. attention.cpp projects, masks and orchestrates; dense_tiles.cpp computes
// tiles of whole rows, summary_tiles.cpp the per-row summaries.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <exception>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "attnscope/core/arena.hpp"
#include "attnscope/core/attention.hpp"

namespace attnscope::run {

// Run-time check of a shape comment, so the comments cannot drift from the code.
template <typename E, std::size_t N>
void check_shape(const E& t, const std::array<std::size_t, N>& expected, const char* name) {
    const auto& s = t.shape();
    if (s.size() != N || !std::equal(s.begin(), s.end(), expected.begin()))
        throw std::logic_error(std::string("internal shape check failed for ") + name);
}

// Per-row summaries: query rows per tile, and keys per block of scores. A block, 240 x 1024
// scores (960 KiB in float32), is computed by one product (float: our register tiles,
// kernels.hpp; double: BLAS), then absorbed row by row (summary_tiles.cpp).
constexpr std::size_t kSummaryRows = 240, kSummaryKeys = 1024;

// Query rows per tile: about 16 MiB of scores. Large enough that BLAS's packing of the
// head's K and V (once per call) is amortised over many rows (T=4096, H=16: 4% faster
// than 4 MiB tiles); small enough that the working set stays bounded whatever Tq is.
inline std::size_t tile_rows(const Dims& d, std::size_t value_size) {
    std::size_t rows = (std::size_t{16} << 20) / std::max<std::size_t>(1, d.Tk * value_size);
    // At least 8 tiles in all, to share among threads when (batch, head) pairs are few.
    // (Never by thread count: --threads must not change how BLAS rounds a row.)
    const std::size_t pairs = std::max<std::size_t>(d.B * d.H, 1);
    if (pairs < 8) rows = std::min(rows, (d.Tq * pairs + 7) / 8);
    return std::min(std::max<std::size_t>(rows, 64), std::max<std::size_t>(d.Tq, 1));
}

inline std::size_t thread_count(const Compute& how) {
    std::size_t n = how.threads ? how.threads : std::thread::hardware_concurrency();
    return std::max<std::size_t>(n, 1);
}

// Threads that hold a tile of their own: no more than there are tiles.
inline std::size_t tile_workers(const Dims& d, std::size_t value_size, const Compute& how) {
    const std::size_t rows = tile_rows(d, value_size);
    const double tiles = double(d.B) * double(d.H) * double((d.Tq + rows - 1) / rows);
    return std::max<std::size_t>(1, tiles < double(thread_count(how)) ? std::size_t(tiles) : thread_count(how));
}

// Whether a run computes tiles of whole rows: for a kept (query, key) stage or what needs
// the context; with summaries alone, it does not (they come by key blocks of their own).
inline bool wants_dense_tiles(const StageSet& keep, bool summary) {
    if (!summary) return true;
    for (Stage s : {kScores, kBias, kMaskedScores, kWeights, kSinkWeight, kContext, kHeadOutput, kOutput})
        if (keep[s]) return true;
    return false;
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

// What the steps of one run of attend() share.
template <typename T>
struct State {
    State(const Problem<T>& problem, const Compute& compute) : p(problem), how(compute), d(problem.dims) {}

    const Problem<T>& p;
    const Compute& how;
    const Dims& d;
    StageSet keep, need;  // the stages kept; those computed (the kept ones and their prerequisites)
    std::size_t threads = 1;
    // scan_scores: look for non-finite scores (they may overflow); narrow: a dense tile's
    // scores span its rows' keys only (no (query, key) stage kept); exact: each row's
    // softmax runs over its own key span, without flags.
    bool scan_scores = false, narrow = false, exact = false;
    Trace<T> tr;
    Buffer<T> qf, kf, vf, merged;  // (B, Tq, H*Dk), (B, Tk, G*Dk), (B, Tk, G*Dv), (B, Tq, H*Dv)

    // Records stage s at `at` unless an earlier stage, or an earlier index of s, is noted.
    void note_nonfinite(Stage s, std::array<std::size_t, 4> at, std::size_t rank) {
        std::lock_guard<std::mutex> g(nonfinite_lock_);
        auto& first = tr.first_nonfinite;
        if (!first || s < first->stage || (s == first->stage && at < first->at)) first = {{s, at, rank}};
    }

    // Where each kept stage lives when Compute::place gives it a place of its own (e.g.
    // its dump file), asked once per stage before anything is computed; else null.
    std::array<std::shared_ptr<Placement>, kStageCount> placed;
    Arena* arena = nullptr;  // where everything else kept or worked in lives

    // Bytes of stage s in this run (the stage table's elements, in T or as bools).
    std::size_t stage_bytes(Stage s) const {
        return stage_info(s).elements(d) * (stage_info(s).value == ValueKind::boolean ? sizeof(bool) : sizeof(T));
    }
    // Where kept stage s is to live: its own place, else the arena (null: ordinary
    // memory). A PlaceNext holding it applies it to the stage's allocation.
    std::shared_ptr<Placement> place(Stage s) const { return placed[s] ? placed[s] : scratch(stage_bytes(s)); }
    // Where a working buffer of `bytes` is to live: the arena (null: ordinary memory).
    std::shared_ptr<Placement> scratch(std::size_t bytes) const { return arena ? arena->take(bytes) : nullptr; }

   private:
    std::mutex nonfinite_lock_;
};

// Query rows per dense tile. Skipping what the mask hides needs short tiles: a tile computes
// every key any of its rows sees (128 rows: the triangle wasted on the diagonal is
// 64 / Tk of a row). The same tiles whatever is kept: a tile's key span is the length
// of its context product, and another length may round differently.
template <typename T>
std::size_t dense_rows(const State<T>& s) {
    const std::size_t rows = tile_rows(s.d, sizeof(T));
    return s.p.mask.causal() || s.p.mask.window() ? std::min<std::size_t>(rows, 128) : rows;
}

// 3) scores .. context by tiles of whole query rows (dense_tiles.cpp).
template <typename T>
void dense_tiles(State<T>& s);
// 3') the per-row summaries by tiles of their own (summary_tiles.cpp); `scan`: look for
//     the first non-finite score (no dense tile does).
template <typename T>
void summary_tiles(State<T>& s, bool scan);

extern template void dense_tiles<float>(State<float>&);
extern template void dense_tiles<double>(State<double>&);
extern template void summary_tiles<float>(State<float>&, bool);
extern template void summary_tiles<double>(State<double>&, bool);

}  // namespace attnscope::run
