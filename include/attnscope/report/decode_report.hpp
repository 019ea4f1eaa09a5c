// attnscope — report: a KV-cache decoding (core/decode.hpp) as text for a person and as
// one JSON document for a script.
#pragma once

#include <cstddef>
#include <iosfwd>
#include <string>
#include <vector>

#include "attnscope/core/decode.hpp"
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
