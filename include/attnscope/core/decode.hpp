// attnscope — core: KV-cache decoding, one new token at a time against a growing cache.
//
// Shape legend (attention.hpp): B batch, T positions of the sequence (Tq = Tk = T in the
// full run), Dm model width, H query heads, G K/V heads, Dk, Dv per-head widths, Dout
// output width, L the cache length (positions seen so far, the new one included).
//
// How a model generates text. Positions 0..P-1 (the prompt) run as one causal attend()
// over the prefix: the prefill. Its rotated keys K_rot (K without RoPE) and values V are
// kept in a KV cache, per batch item and K/V head. Each later position t then runs alone:
//   1) q, k, v of token t only:  x_t (B, Dm) · W_Q, W_K, W_V   -> (B, H*Dk), (B, G*Dk), (B, G*Dv)
//   2) RoPE at t's true position on q and k                     (the cache holds rotated keys)
//   3) append k, v to the cache                                  K cache (B, G, t+1, Dk)
//   4) scores  q · K_cacheᵀ · scale                              (B, H, 1, t+1)
//   5) masked  softcap + ALiBi, -inf where the mask rule hides a key (padding, causal,
//              window; bottom-right alignment: the query sits at position t)
//   6) weights softmax over the t+1 keys (and the sink)          (B, H, 1, t+1)
//   7) context weights · V_cache                                 (B, H, 1, Dv)
//   8) output  concat heads · W_O (+ b_O)                        (B, 1, Dout)
// Query head h reads K/V head h / (H/G). The prefix's projections are never recomputed:
// a step costs O(t) instead of the O(t²) of running the whole prefix again.
//
// Each step's rows must equal row t of one full causal run (to rounding: <= 1e-12 in
// float64); decode() runs both and reports the largest difference per step.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "attnscope/base/buffer.hpp"
#include "attnscope/core/attention.hpp"
#include "attnscope/model/model.hpp"

namespace attnscope {

// Teaching experiments: the classic KV-cache bugs, emulated on purpose so that a learner
// can see how far each one drifts from the full run. Never a default; a step without a
// bug is the correct computation.
enum class DecodeBug {
    none,
    rope_position_zero,    // the step's query and new key are rotated at position 0, not t
                           // (needs RoPE; the prefill is right)
    attend_before_append,  // the query attends the cache before its own key/value is appended:
                           // it cannot see itself (its own column gets weight 0)
    off_by_one,            // the query sits at position t - 1 (RoPE, causal rule, window, ALiBi):
                           // it cannot see its own key
};

// "rope-position-zero", "attend-before-append", "off-by-one" ("none" for none).
std::string_view bug_name(DecodeBug bug);
// The bug called `name`, if any.
std::optional<DecodeBug> find_bug(std::string_view name);
// Every bug's name, in the order of the enum (none excluded).
const std::vector<std::string_view>& bug_names();

// The cached keys (after RoPE) and values of the positions seen so far, per batch item and
// K/V head: each (b, g) holds a contiguous (L, Dk) block of keys and (L, Dv) of values, so
// a step's scores and context are one matrix product each. Grows by doubling its capacity
// (each position is copied O(1) times on average, never the whole cache per append).
template <typename T>
class KVCache {
   public:
    KVCache() = default;
    KVCache(std::size_t B, std::size_t G, std::size_t Dk, std::size_t Dv);

    std::size_t length() const { return length_; }      // L: positions held
    std::size_t capacity() const { return capacity_; }  // positions held without growing
    void reserve(std::size_t positions);
    // Appends one position for every batch item: k (B, G*Dk) and v (B, G*Dv), rows `stride_k`
    // and `stride_v` apart (the flat projections of one token).
    void append(const T* k, std::size_t stride_k, const T* v, std::size_t stride_v);
    // Appends n positions: K (B, G, n, Dk), V (B, G, n, Dv) (a prefill's K_rot and V).
    void append(const Tensor<T, 4>& K, const Tensor<T, 4>& V);

    // Keys (L, Dk) and values (L, Dv) of K/V head g of batch item b, rows contiguous.
    const T* keys(std::size_t b, std::size_t g) const { return k_.data() + (b * G_ + g) * capacity_ * Dk_; }
    const T* values(std::size_t b, std::size_t g) const { return v_.data() + (b * G_ + g) * capacity_ * Dv_; }
    std::array<std::size_t, 4> k_shape() const { return {B_, G_, length_, Dk_}; }  // (B, G, L, Dk)
    std::array<std::size_t, 4> v_shape() const { return {B_, G_, length_, Dv_}; }  // (B, G, L, Dv)
    // Positions copied when the storage grew, in all (amortised: at most about 2 L).
    std::size_t copied_positions() const { return copied_; }

   private:
    void grow(std::size_t capacity);
    std::size_t B_ = 0, G_ = 0, Dk_ = 0, Dv_ = 0, length_ = 0, capacity_ = 0, copied_ = 0;
    Buffer<T> k_, v_;  // (B, G, capacity, Dk), (B, G, capacity, Dv)
};

// FLOPs (2 x multiply-adds of the matrix products, over every batch item) of n_new
// projected tokens, n_q queries against n_k keys (dense: masked entries included) and n_q
// output rows (only with W_O). Softmax, RoPE, biases and masks are not counted.
//   2 n_new (Dm H Dk + Dkv G (Dk + Dv)) + 2 H n_q n_k (Dk + Dv) + 2 n_q H Dv Dout
std::uint64_t attention_flops(const Dims& d, bool has_W_O, std::size_t n_q, std::size_t n_k, std::size_t n_new);

// Largest |step - full run| per stage, over the step's rows (weights padded with zeros to
// the full run's T keys, so a weight the step never gave counts too).
struct DecodeDiff {
    double weights = 0, sink_weight = 0, context = 0, output = 0;
    double max() const;
};

// One decoding step: position t as a single query against the cache.
template <typename T>
struct DecodeStep {
    std::size_t t = 0;                                            // the new token's position
    long long query_position = 0;                                 // where its query sat (t; t - 1 with off-by-one)
    std::size_t cache_length = 0;                                 // L = t + 1 once its key and value are appended
    std::array<std::size_t, 4> k_cache_shape{}, v_cache_shape{};  // (B, G, L, Dk), (B, G, L, Dv)
    Tensor<bool, 3> mask;                                         // (B, 1, L): true where the query may see key j
    Tensor<T, 4> weights;                                         // (B, H, 1, L)
    Tensor<T, 3> sink_weight;                                     // (B, H, 1), with sinks only
    Tensor<T, 4> context;                                         // (B, H, 1, Dv)
    Tensor<T, 3> output;                                          // (B, 1, Dout)
    std::vector<std::size_t> fully_masked;                        // batch items whose query saw no key
    std::uint64_t flops_cached = 0;                               // this step with the cache: 1 token, 1 query x L keys
    std::uint64_t flops_recompute = 0;                            // the whole prefix of L tokens from scratch
    DecodeDiff diff;                                              // vs the full run (filled by decode())
};

// Refuses (UsageError, one line) a problem decode cannot run: cross-attention, explicit
// q/k positions, an attn_mask, appended key/value positions, a run that is not causal, a
// prefill longer than the sequence, rope-position-zero without RoPE.
template <typename T>
void check_decodable(const Problem<T>& p, std::size_t prefill, DecodeBug bug);

// The decoder of one problem (the whole sequence, causal self-attention): prefill(P),
// then step() for t = P, P+1, ..., T-1. Holds the cache; keeps a reference to `p`.
template <typename T>
class Decoder {
   public:
    explicit Decoder(const Problem<T>& p, DecodeBug bug = DecodeBug::none);

    // Positions 0..P-1 as one causal attend() over the prefix (x sliced to P rows); fills
    // the cache with its K_rot (K without RoPE) and V. Returns the prefix's trace, keeping
    // `how.keep` and the stages the cache needs. P = 0: an empty cache and trace.
    Trace<T> prefill(std::size_t P, const Compute& how = {});
    // Position t = cache length: projects only token t, appends, attends. t < T.
    DecodeStep<T> step();

    const KVCache<T>& cache() const { return cache_; }
    // Tokens whose q, k, v were projected so far (P by the prefill, one per step).
    std::size_t projected_tokens() const { return projected_; }

   private:
    void project_token(std::size_t t);
    void rotate(T* rows, std::size_t heads, long long position) const;
    void attend_row(DecodeStep<T>& s, std::size_t b, std::size_t h, const MaskRule& rule, std::size_t keys);
    MaskRule step_rule(std::size_t keys, long long query_position) const;

    const Problem<T>& p_;
    DecodeBug bug_;
    KVCache<T> cache_;
    std::size_t next_ = 0, projected_ = 0;
    Buffer<T> q_, k_, v_, ctx_;     // token t: (B, H*Dk), (B, G*Dk), (B, G*Dv); merged context (B, H*Dv)
    std::vector<T> logits_, bias_;  // (L): a row's logits, its ALiBi terms
};

// A whole decoding: the full causal run, the prefill, every step, and each one's
// difference from the full run.
template <typename T>
struct DecodeRun {
    DecodeBug bug = DecodeBug::none;
    std::size_t prefill = 0;
    Trace<T> prefill_trace;  // weights (B, H, P, P), context, output, ... (empty when P = 0)
    std::array<std::size_t, 4> prefill_k_shape{}, prefill_v_shape{};
    std::uint64_t prefill_flops = 0;
    DecodeDiff prefill_diff;
    std::vector<DecodeStep<T>> steps;
    Trace<T> full;        // the full causal run: weights, sink_weight, context, output
    double max_diff = 0;  // over the prefill and every step
};

// check_decodable, then the full run, prefill(P) and every step; `how` for the two
// attend() calls (threads; its keep is replaced).
template <typename T>
DecodeRun<T> decode(const Problem<T>& p, std::size_t prefill, DecodeBug bug = DecodeBug::none, const Compute& how = {});

// The difference of a step's rows (or a prefill's rows 0..P-1) from the full run.
template <typename T>
DecodeDiff diff_step(const DecodeStep<T>& step, const Trace<T>& full);
template <typename T>
DecodeDiff diff_prefill(const Trace<T>& prefill, const Trace<T>& full);

extern template class KVCache<float>;
extern template class KVCache<double>;
extern template class Decoder<float>;
extern template class Decoder<double>;
extern template void check_decodable<float>(const Problem<float>&, std::size_t, DecodeBug);
extern template void check_decodable<double>(const Problem<double>&, std::size_t, DecodeBug);
extern template DecodeRun<float> decode<float>(const Problem<float>&, std::size_t, DecodeBug, const Compute&);
extern template DecodeRun<double> decode<double>(const Problem<double>&, std::size_t, DecodeBug, const Compute&);
extern template DecodeDiff diff_step<float>(const DecodeStep<float>&, const Trace<float>&);
extern template DecodeDiff diff_step<double>(const DecodeStep<double>&, const Trace<double>&);
extern template DecodeDiff diff_prefill<float>(const Trace<float>&, const Trace<float>&);
extern template DecodeDiff diff_prefill<double>(const Trace<double>&, const Trace<double>&);

}  // namespace attnscope
