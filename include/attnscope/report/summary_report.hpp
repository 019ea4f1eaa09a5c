// attnscope — report: the per-row summaries of a long run (core/summary.hpp) as text, JSON,
// line-delimited JSON and arrays for a dump.
#pragma once

#include <cstddef>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "attnscope/core/summary.hpp"
#include "attnscope/core/view.hpp"
#include "attnscope/io/write.hpp"
#include "attnscope/report/report.hpp"

namespace attnscope {

// The arrays, named as in summary.hpp, for --dump: (B, H, Tq) (no B for a 2-D input),
// topk_index / topk_weight (B, H, Tq, K), distance_profile (B, H, bins). They borrow s.
std::vector<OutArray> summary_arrays(const Summary& s, bool batched);

// After a blank line: per chosen batch item and head (o.batches, o.heads), the
// classification, mean masses, effective keys, distance and a sparkline of the distance
// profile under a ruler of its bins, within 80 columns; the thresholds; the heads' rows
// whose logits were not finite; then the top-k keys (with their tokens, from v) of the
// first and last o.edgeitems rows of each head (every row with o.full), within o.width.
void write_summary_text(std::ostream& out, const Summary& s, const TraceView& v, const TextOptions& o);
// The summary as one JSON object (a member of --json's document).
void write_summary_json(JsonWriter& out, const Summary& s, bool batched);

// --jsonl: one object a line (schema attnscope.jsonl/1 on each). The run's header line; rows [i0, i0 + n) of (b, h),
// one line each; one line per head (its profile and class); one line per (stage, batch, head) of a dense stage (a stage
// without a head axis: per batch item). `layer`: each line names it (run --layer all).
void write_jsonl_header(std::ostream& out, const std::string& source, const Dims& d, bool batched, const Summary* s,
                        std::optional<std::size_t> layer = std::nullopt);
void write_jsonl_rows(std::ostream& out, const Summary& s, bool batched, std::size_t b, std::size_t h, std::size_t i0,
                      std::size_t n, std::optional<std::size_t> layer = std::nullopt);
void write_jsonl_heads(std::ostream& out, const Summary& s, bool batched,
                       std::optional<std::size_t> layer = std::nullopt);
void write_jsonl_stage(std::ostream& out, const StageView& stage, bool batched,
                       std::optional<std::size_t> layer = std::nullopt);

}  // namespace attnscope
