// attnscope — lm layer: greedy generation with a KV cache in every layer.
//
// Shape legend: forward.hpp's and core/decode.hpp's, plus P prompt tokens, N new tokens.
//
// The prompt runs once through every layer as a causal prefill: layer l's attention is the
// core Decoder (core/decode.hpp) of that layer's problem, whose prefill(P) keeps the prompt's
// keys (rotated, for RoPE models) and values in layer l's cache. Each new token then runs
// alone through every layer:
//   h (1, Dm) = embed(id) at its position t
//   each layer l: a = attention_input(h) (1, Dm), written into row t of layer l's x; the
//     decoder's step() projects that row only, rotates q and k at t, appends k and v to layer
//     l's cache and attends the t+1 cached keys -> (1, 1, Dm); then h += it and the MLP
//   logits (V) = head(h); the next token is their argmax (ties: the lowest id)
// Each layer's x is sized for the whole length (P + N) up front; a row is written before the
// decoder reads it. Decoder-only families only (gpt2, llama, mistral, qwen2).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "attnscope/core/attention.hpp"
#include "attnscope/core/decode.hpp"
#include "attnscope/lm/forward.hpp"

namespace attnscope {

// The argmax of logits (V) (ties: the lowest id).
Pick greedy_pick(const std::vector<double>& logits);

// One position through every layer, and the token its logits pick.
struct GenerationStep {
    std::size_t t = 0;                       // the position run: P-1 (the prefill's last row), then P, P+1, ...
    std::vector<DecodeStep<double>> layers;  // each layer's row: weights (1, H, 1, t+1), mask, context, output
    std::vector<double> logits;              // (V)
    Pick next;
    double logits_diff = 0;  // vs the full forward (check_generation)
};

struct Generation {
    std::vector<std::uint32_t> ids;         // (P + N): the prompt, then the generated tokens
    std::size_t prompt = 0;                 // P
    std::vector<Dims> dims;                 // each layer's attention
    std::vector<Trace<double>> prefill;     // each layer's prompt rows: weights (1, H, P, P), context, output
    std::vector<DecodeDiff> prefill_diffs;  // each layer's prompt rows vs the full forward (check_generation)
    // N steps: steps[0] is the prefill's last position (its rows are the prefill's row P-1; its
    // diffs those of the whole prefill), then one step per token fed back.
    std::vector<GenerationStep> steps;
    double max_diff = 0;  // over every layer's rows and the logits (check_generation)
};

// A model's forward pass one position at a time, a KV cache per layer.
class Generator {
   public:
    // Reads every layer's weights; `length` positions at most (P + N). InputError for an
    // encoder (BERT, RoBERTa), or a layer whose attention is not causal self-attention.
    Generator(const LanguageModel& m, std::size_t length, std::size_t threads = 0);
    ~Generator();
    Generator(const Generator&) = delete;
    Generator& operator=(const Generator&) = delete;

    // The prompt through every layer at once, filling each layer's cache; each layer's trace
    // (weights, mask, context, output) into `traces` when given. The last position's logits (V).
    std::vector<double> prefill(const std::vector<std::uint32_t>& prompt, std::vector<Trace<double>>* traces);
    // Token `id` at the next position alone through every layer; each layer's step into
    // `steps` when given. Its logits (V).
    std::vector<double> step(std::uint32_t id, std::vector<DecodeStep<double>>* steps);
    std::size_t position() const { return position_; }  // positions run so far
    const Dims& dims(std::size_t layer) const;
    // Layer l's K cache shape (1, G, L, Dk).
    std::array<std::size_t, 4> k_cache_shape(std::size_t layer) const;

   private:
    struct Layer;
    struct Head;  // the LM head, its unembedding converted once for every step
    const LanguageModel& m_;
    std::vector<std::unique_ptr<Layer>> layers_;
    std::unique_ptr<Head> head_;
    std::size_t length_ = 0, position_ = 0, threads_ = 0;
};

// Refuses (before any work) an encoder, ids outside the vocabulary, no prompt, or P + n
// positions beyond the model's; MemoryLimitError when the weights, or once they are read
// (before the prefill) the weights or check_generation's full forward, with the KV caches
// and every step's records, pass the model's limit. Then n tokens greedily: the prefill
// and n - 1 steps.
Generation generate(const LanguageModel& m, const std::vector<std::uint32_t>& prompt, std::size_t n,
                    std::size_t threads = 0);
// One full forward on g.ids: each step's rows (weights, context, output; every layer) and
// logits against the same rows of it, into the diffs and g.max_diff. MemoryLimitError when
// the full run's weights (H, T, T per layer) with g's records would pass the model's limit.
void check_generation(const LanguageModel& m, Generation& g, std::size_t threads = 0);

}  // namespace attnscope
