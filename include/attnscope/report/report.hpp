// attnscope — report layer: a computed Trace as text for a person, JSON for a script,
// and .npy/.npz dumps for numpy. Knows nothing of how the trace was computed.
#pragma once

#include <cstddef>
#include <functional>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "attnscope/analysis/compare.hpp"
#include "attnscope/analysis/diagnostics.hpp"
#include "attnscope/base/json_writer.hpp"
#include "attnscope/core/view.hpp"
#include "attnscope/io/write.hpp"

namespace attnscope {

// How a terminal shows colour: none (plain text, e.g. not a terminal, NO_COLOR),
// the xterm 256-colour palette, or 24-bit truecolor.
enum class ColorMode { none, c256, truecolor };

// How heatmaps (terminal, --panels, HTML, SVG) place values on their palette: one scale
// per stage, shared by every head and panel drawn; scores and masked_scores share one;
// weights and sink_weight on 0..1; signed stages -m..m (white at 0). `mode` (--range):
// automatic (that rule over the matrices drawn), fixed (over every batch item and head of
// the run), row (each query row on its own scale), given (lo..hi). `log` (--log-scale):
// weights and sink_weight by log10. Every legend states the rule it used.
struct ColourRange {
    enum Mode { automatic, fixed, row, given } mode = automatic;
    double lo = 0, hi = 1;  // given
    bool log = false;
};

// "auto", "fixed", "row" or "LO,HI" (LO < HI, finite); UsageError naming {range} otherwise.
ColourRange parse_range(const std::string& text, bool log = false);

// Long axes, the one rule of every view: an axis up to a view's limit is drawn whole;
// a longer one shows its first and last cells around a gap ("…") and says what it left
// out. Limits: printed numbers 2·edgeitems + 2 and the terminal's width; terminal
// heatmaps the terminal's width (keys); HTML kHtmlMaxAxis cells per axis and
// kHtmlPageCells cells per page (further matrices are listed as left out); SVG
// kSvgMaxAxis. `full` (--full) lifts every limit.
inline constexpr std::size_t kHtmlMaxAxis = 2048;
inline constexpr std::size_t kHtmlPageCells = std::size_t(8) << 20;
inline constexpr std::size_t kSvgMaxAxis = 256;

struct TextOptions {
    std::vector<std::string> stages;          // which stages, pipeline order
    std::vector<std::size_t> batches, heads;  // which items and heads; empty = all
    int decimals = 4;
    std::size_t edgeitems = 3;  // an axis longer than 2*edgeitems + 2 shows its ends around "…"
    bool full = false;          // never summarise
    bool heatmap = false;       // scores, mask, masked_scores, weights as heatmaps
    bool panels = false;        // scores | masked_scores | weights side by side, per head
    bool explain = false;       // narrate each stage: formula, shapes with numbers, masks
    ColorMode color = ColorMode::none;
    std::size_t width = 80;  // terminal columns, for heads side by side
    ColourRange range;       // --range, --log-scale
};

// What the HTML page and the SVG figure draw besides the stages: --full, --range.
struct FigureOptions {
    bool full = false;
    ColourRange range;
    std::vector<std::size_t> batches, heads;  // SVG: those chosen (the scale is theirs); empty: all
};

// Heatmaps of one (Tq, Tk) stage for the chosen batch items and heads, several heads
// side by side when `width` allows, with token labels, a legend with numbers, and
// masked cells drawn apart from small values. Viridis colours (colour-blind safe);
// without colour, a character ramp.
void write_heatmaps(std::ostream& out, const TraceView& view, const StageView& stage, const TextOptions& options);
// The stages write_heatmaps draws: (query, key) matrices, and sink_weight as an (H, Tq)
// matrix per batch item on the probability scale.
bool drawn_as_heatmap(const StageView& stage);

// What each view needs kept, besides the stages it shows. A front end adds these to
// Compute::keep; a view missing one refuses with UsageError.
// (A stage the run does not have is ignored by Compute::keep: Q_rot and K_rot come with
// RoPE, bias with ALiBi or a float attn_mask, sink_weight with sinks. A -inf bias hides
// its key as the mask rule does, so the heatmaps keep the bias to mark those cells.)
inline const StageSet kHeatmapNeeds = StageSet().set(kMask).set(kBias);  // masked cells are marked
inline const StageSet kPanelsNeeds = StageSet().set(kScores).set(kMaskedScores).set(kWeights).set(kMask).set(kBias);
// clang-format off
inline const StageSet kCellNeeds = StageSet().set(kQ).set(kK).set(kV).set(kQRot).set(kKRot).set(kScores)
    .set(kBias).set(kMask).set(kMaskedScores).set(kWeights).set(kSinkWeight).set(kContext);
// clang-format on

// For each chosen batch item and head: scores | masked_scores | weights side by side.
void write_panels(std::ostream& out, const TraceView& view, const TextOptions& options);

// One cell's arithmetic, for (batch, head, query i, key j): q_i · k_j term by term, the
// sum, times the scale, the mask, the row max, exp, the row sum, the weight, and then
// key j's value vector's share w_ij · v_j of context row i. With the variants the run has:
// the K/V head the query head reads, each RoPE pair turned (Q -> Q_rot, K -> K_rot), the
// softcap, the bias (ALiBi's slope times k_pos - q_pos, a float attn_mask), each part of
// the mask rule with its numbers (the verdict is MaskRule::visible's), the sink's logit and
// share. Needs every stage from Q to context in the view that the run has (kCellNeeds).
// UsageError for a cell that does not exist.
struct CellRef {
    std::size_t batch = 0, head = 0, query = 0, key = 0;
};
void write_cell(std::ostream& out, const TraceView& view, const CellRef& cell, int decimals);
void check_cell(const CellRef& cell, const Dims& dims);  // UsageError for a cell that does not exist

// Lines narrating how a stage was computed, with the actual shapes and numbers.
std::vector<std::string> explain_stage(const TraceView& view, const StageView& stage);
// --zero-key J's story: key J's score column is 0, its weights exp(0 - max)/Σ (not 0), one
// row's numbers when the view has them, and the masking command to compare (explain.cpp).
// Empty without --zero-key.
std::vector<std::string> zero_key_story(const TraceView& view);

// UsageError when a chosen batch item or head does not exist. Called by write_text, and
// by a front end before it writes anything, so a bad choice leaves no output behind.
void check_selection(const TextOptions& options, const Dims& dims);

// The header of the readable report: what ran (sizes, scale, masks, experiments), which
// batch items and heads are shown, and the rows that see no key.
void write_run_header(std::ostream& out, const TraceView& view, const TextOptions& options);

// The readable report: a header, then each chosen stage with its formula, shape and values.
void write_text(std::ostream& out, const TraceView& view, const TextOptions& options);

// One JSON document (RFC 8259, schema attnscope.run/1 of docs/json.md): config, dims,
// tokens, masked rows, and the chosen stages as nested lists. -inf, inf and NaN are
// written as the strings "-inf", "inf", "nan", which numpy.array(..., dtype=float) turns
// back into numbers. Streamed, never held whole. `extra`: writes more members of the
// document (key and value), e.g. a run's summaries.
void write_json(std::ostream& out, const TraceView& view, const std::vector<std::string>& stages,
                const std::vector<RowDiagnostics>* diagnostics = nullptr,
                const std::function<void(JsonWriter&)>& extra = {});
// That document's members after "schema", into the object `w` has open (an element of
// attnscope.layers/1's "layers").
void write_json_members(JsonWriter& w, const TraceView& view, const std::vector<std::string>& stages,
                        const std::vector<RowDiagnostics>* diagnostics = nullptr,
                        const std::function<void(JsonWriter&)>& extra = {});

// A self-contained HTML page (no network access, no external files; its script is
// inline): every chosen stage and head as a heatmap with token labels (a table with the
// numbers in its cells when small, else a canvas with zoom and scroll), the value of a
// cell and of the same cell in every other (query, key) stage on hover, masked cells
// marked apart from small weights; then the head view (query and key tokens in two
// columns joined by lines as opaque as the weight, per head) and the query text coloured
// by the attention a chosen query gives each token. `batches`, `heads`: which batch items
// and heads to draw (as --batch/--head; empty = all).
void write_html(std::ostream& out, const TraceView& view, const std::vector<std::string>& stages,
                const std::vector<std::size_t>& batches = {}, const std::vector<std::size_t>& heads = {},
                const FigureOptions& figure = {});

// The model view: several runs (layers, one per bundle, labelled `names`) x their heads
// as thumbnails of weights; a click opens one large, with its tooltips and zoom. With
// `head_view`: below them, that layer's head view and coloured text (batch item 0).
void write_model_html(std::ostream& out, const std::vector<const TraceView*>& layers,
                      const std::vector<std::string>& names, const FigureOptions& figure = {},
                      std::optional<std::size_t> head_view = std::nullopt);

// One stage of one batch item and head as a self-contained SVG heatmap (for slides),
// with token labels, a colour legend, and masked cells marked.
void write_svg(std::ostream& out, const TraceView& view, const std::string& stage, std::size_t batch, std::size_t head,
               const FigureOptions& figure = {});

// The chosen stages as .npy files NAME.npy in a directory (created if needed), or as one
// .npz archive when `path` ends in ".npz". Every file is written under a temporary name
// and renamed once all are complete.
void write_dump(const std::string& path, const TraceView& view, const std::vector<std::string>& stages);
bool dump_is_npz(const std::string& path);  // the archive form of write_dump

// write_dump, prepared before the computation so that large stages are computed straight
// into their files. For a directory, place() creates NAME.npy under a temporary name,
// reserves its size on disk (a full disk is reported here, before any work) and maps its
// data region, which starts at byte 4096 (the header is padded to one page), for the
// stage to live in: no second copy in memory and no write() afterwards. commit() writes
// the headers and every stage not placed, then moves the dump into place at once: a new
// dump directory is built under a temporary name beside its path and renamed (claiming
// the name: of two runs, one wins); with `replace`, an old dump directory is exchanged
// for the new one as a whole (a directory holding other files is refused); without, an
// existing directory gets the new files, each claimed. Destroyed uncommitted, it leaves
// nothing behind. An .npz dump places nothing.
class Dump {
   public:
    // `replace`: whether existing files may be replaced (AtomicFile's rule).
    Dump(std::string path, std::vector<std::string> stages, bool replace = true);
    ~Dump();
    Dump(const Dump&) = delete;
    Dump& operator=(const Dump&) = delete;
    // Memory for stage `name` of `bytes` bytes, or null (ordinary memory) when it is not
    // dumped, small, an .npz member, or the file system cannot map it.
    std::shared_ptr<Placement> place(const std::string& name, std::size_t bytes);
    // `extra`: arrays written beside the stages (e.g. a run's summaries).
    void commit(const TraceView& view, const std::vector<OutArray>& extra = {});

    struct Impl;

   private:
    std::unique_ptr<Impl> impl_;
};

// --diagnose: a table per batch item and head, and a one-line summary per head.
void write_diagnostics_text(std::ostream& out, const TraceView& view, const std::vector<RowDiagnostics>& rows,
                            const TextOptions& options);

// --diagnose for --json: an array of row objects (no surrounding document).
void write_diagnostics_json(JsonWriter& out, const std::vector<RowDiagnostics>& rows);

// --compare --json: one document (attnscope.compare/1) with the words run B added, both scales, and per stage
// the shapes, the largest difference, where it is, and the mean difference.
void write_compare_json(std::ostream& out, const std::vector<std::string>& b_adds, double scale_a, double scale_b,
                        const std::vector<StageDiff>& diffs);

}  // namespace attnscope
