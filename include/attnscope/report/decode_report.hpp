// attnscope — report: a KV-cache decoding (core/decode.hpp) as text for a person and as
// one JSON document for a script.
#pragma once

#include <cstddef>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "attnscope/core/decode.hpp"
#include "attnscope/lm/generate.hpp"
#include "attnscope/model/model.hpp"

namespace attnscope {

struct DecodeTextOptions {
    std::string source;    // the bundle's file name, for the header
    bool heatmap = false;  // each weight row as one line of a character ramp, not numbers
    int decimals = 4;
    std::size_t width = 80;                   // lines never longer (long rows show their ends around "…")
    std::vector<std::size_t> batches, heads;  // the rows shown (empty: all); checked by the caller
};

// Per step: the token and its position (each batch item's, where they differ), the cache
// length, the K/V cache shapes, the keys' labels (tokens, else indices; per batch item)
// over each chosen (batch item, head)'s weight row (numbers, or a heatmap row), the FLOPs
// with the cache against recomputing the prefix, and the largest difference from the full
// causal run, stage by stage; a summary at the end. Token labels are escaped
// (escape_control).
template <typename T>
void write_decode_text(std::ostream& out, const Problem<T>& p, const DecodeRun<T>& run,
                       const DecodeTextOptions& options);

// One JSON document: source, dtype, config, bug (null or its name), prefill {length,
// k_cache_shape, v_cache_shape, flops, max_abs_diff, diffs}, steps [{t, token,
// query_position, cache_length, k_cache_shape, v_cache_shape, mask, weights, sink_weight
// (sinks only), context, output, fully_masked, flops_cached, flops_recompute,
// max_abs_diff, diffs}], max_abs_diff. Arrays drop the batch axis for a 2-D x;
// non-finite numbers are the strings "nan", "inf", "-inf".
template <typename T>
void write_decode_json(std::ostream& out, const Problem<T>& p, const DecodeRun<T>& run, const std::string& source);

// The rows of every step as one .npz archive at `path` (written under a temporary name
// and renamed into place): prefill_weights, prefill_context, prefill_output (P > 0), and
// per step t: step{t}_mask, step{t}_weights, step{t}_context, step{t}_output, and
// step{t}_sink_weight with sinks (the names of modern_reference.py --decode --dump-npz).
// `replace`: whether an existing file may be replaced.
template <typename T>
void write_decode_npz(const std::string& path, const Problem<T>& p, const DecodeRun<T>& run, bool replace);

// A greedy generation (lm/generate.hpp), as `decode --model DIR --generate N` shows it.
struct GenerationTextOptions {
    std::string source;               // the model folder
    std::string model_type;           // config.json's
    std::vector<std::string> labels;  // (P + N): each token's readable piece or id (escaped when printed)
    std::vector<std::optional<std::string>> pieces;  // (P + N) or empty: each token's vocabulary piece, if known
    std::optional<std::string> text;                 // the generated tokens as text (a tokenizer's decode), if any
    std::optional<std::size_t> layer;                // the layer whose rows are shown; none: every layer
    bool all_layers = false;  // every layer's rows; neither: a line per layer (its top keys, mean over heads)
    bool heatmap = false;     // rows (or the per-layer mean rows) as lines of a character ramp
    int decimals = 4;
    std::size_t width = 80;
};

// The prompt's tokens; per step (the prefill's last row, then a step per token fed back): the
// position and token, the cache length, the chosen rows, the token its logits pick (piece,
// id, probability) and the largest difference from one full forward on the final sequence
// (naming the layer and stage; the logits' too); a summary at the end.
void write_generation_text(std::ostream& out, const Generation& g, const GenerationTextOptions& o);
// One JSON document, schema attnscope.generate/1 (docs/json.md).
void write_generation_json(std::ostream& out, const Generation& g, const GenerationTextOptions& o);

extern template void write_decode_npz<float>(const std::string&, const Problem<float>&, const DecodeRun<float>&, bool);
extern template void write_decode_npz<double>(const std::string&, const Problem<double>&, const DecodeRun<double>&,
                                              bool);
extern template void write_decode_text<float>(std::ostream&, const Problem<float>&, const DecodeRun<float>&,
                                              const DecodeTextOptions&);
extern template void write_decode_text<double>(std::ostream&, const Problem<double>&, const DecodeRun<double>&,
                                               const DecodeTextOptions&);
extern template void write_decode_json<float>(std::ostream&, const Problem<float>&, const DecodeRun<float>&,
                                              const std::string&);
extern template void write_decode_json<double>(std::ostream&, const Problem<double>&, const DecodeRun<double>&,
                                               const std::string&);

}  // namespace attnscope
