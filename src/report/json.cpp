// JSON output (schema attnscope.run/1 and attnscope.compare/1, docs/json.md), streamed
// element by element through the JSON writer: no document is built in memory.
// Numbers use the shortest form that reads back to the same float32/float64 value;
// non-finite numbers, which JSON cannot spell, are the strings "-inf", "inf", "nan".
#include <ostream>

#include "attnscope/analysis/compare.hpp"
#include "attnscope/analysis/diagnostics.hpp"
#include "attnscope/base/json_writer.hpp"
#include "attnscope/report/report.hpp"
#include "text_util.hpp"

namespace attnscope {
namespace {

// A list of indices, or null when it is empty.
void index_or_null(JsonWriter& w, const std::vector<std::size_t>& v) {
    if (v.empty())
        w.value(nullptr);
    else
        w.list(v);
}

// A stage's elements as nested lists in C order, each in the stage's own type.
void put_stage_data(JsonWriter& w, const StageView& s) {
    w.nested(s.shape, [&s](JsonWriter& j, std::size_t k) {
        switch (s.dtype) {
            case DType::float32:
                j.value(static_cast<const float*>(s.data)[k]);
                break;
            case DType::float64:
                j.value(static_cast<const double*>(s.data)[k]);
                break;
            case DType::boolean:
                j.value(static_cast<const bool*>(s.data)[k]);
                break;
            case DType::int64:
                j.value(static_cast<const std::int64_t*>(s.data)[k]);
                break;
        }
    });
}

// The tokens of one side: a list of strings (a list of them per batch item when batched), or null.
void put_tokens(JsonWriter& w, const TokenLabels& t, bool batched) {
    if (t.empty()) {
        w.value(nullptr);
    } else if (!batched) {
        w.list(t[0]);
    } else {
        w.begin_array();
        for (std::size_t b = 0; b < t.size(); ++b) w.list(t[b]);
        w.end_array();
    }
}

// A list of numbers, or null when there is none.
void numbers_or_null(JsonWriter& w, const std::vector<double>& xs) {
    if (xs.empty())
        w.value(nullptr);
    else
        w.list(xs);
}

// The config of the modern variants: kv_heads, rope {base, dim, style}, alibi, window,
// softcap, attn_mask_means (null when not given), and what came from the bundle or was
// derived: attn_mask ("bool", "float" or null), alibi_slopes and sinks (one number per
// head, or null), positions (true when q/k_positions were given).
void put_variants(JsonWriter& w, const TraceView& v) {
    const Dims& d = v.dims;
    const text::Variants r = text::variants_of(v);
    w.key("kv_heads").value(d.G ? d.G : d.H).key("rope");
    if (v.spec.rope)
        w.begin_object()
            .key("base")
            .value(v.spec.rope->base)
            .key("dim")
            .value(v.spec.rope->dim.value_or(d.Dk))
            .key("style")
            .value(v.spec.rope->style == RopeStyle::half ? "half" : "interleaved")
            .end_object();
    else
        w.value(nullptr);
    w.key("alibi").value(v.spec.alibi).key("window");
    v.spec.window ? w.value(*v.spec.window) : w.value(nullptr);
    w.key("softcap");
    v.spec.softcap ? w.value(*v.spec.softcap) : w.value(nullptr);
    w.key("attn_mask_means");
    const MaskMeans means = v.spec.attn_mask_means;
    means == MaskMeans::allow ? w.value("allow") : means == MaskMeans::block ? w.value("block") : w.value(nullptr);
    w.key("attn_mask");
    r.bool_mask ? w.value("bool") : r.float_mask ? w.value("float") : w.value(nullptr);
    w.key("alibi_slopes");
    numbers_or_null(w, v.alibi_slopes);
    w.key("sinks");
    numbers_or_null(w, v.sinks);
    w.key("positions").value(r.positions);
}

// The options a bundle's config record set, when it has one: "bundle_config":{"heads":
// {"value":2,"overridden":false},...}, overridden when the command line gave its own.
void put_bundle_options(JsonWriter& w, const std::vector<BundleOption>& options) {
    if (options.empty()) return;
    w.key("bundle_config").begin_object();
    for (const BundleOption& b : options) {
        w.key(b.key).begin_object().key("value");
        b.string ? w.value(b.value) : w.raw(b.value);  // a JSON number as written, or true/false
        w.key("overridden").value(b.overridden).end_object();
    }
    w.end_object();
}

// The document's "config" member: what ran, the variants, the experiments and selections.
void put_config(JsonWriter& w, const TraceView& v) {
    w.key("config").begin_object();
    w.key("source").value(v.source).key("mode").value(v.cross ? "cross" : "self").key("dtype").value(v.dtype);
    w.key("heads").value(v.dims.H).key("scale").value(v.scale).key("scale_source").value(v.scale_source);
    w.key("causal").value(v.spec.causal).key("causal_align");
    w.value(v.spec.causal_align == CausalAlign::top_left ? "top-left" : "bottom-right");
    w.key("key_padding_mask").value(v.has_padding()).key("layout");
    w.value(v.spec.layout == Layout::math ? "math" : "torch").key("batched").value(v.batched);
    put_variants(w, v);
    w.key("qkv");
    v.given_from.empty() ? w.value(nullptr) : w.value(v.given_from);
    // Experiments and selections: everything that makes this output differ from a plain run.
    w.key("temperature").value(v.spec.temperature).key("zero_key");
    v.spec.zero_key ? w.value(*v.spec.zero_key) : w.value(nullptr);
    put_bundle_options(w, v.spec.bundle_options);
    w.key("key_padding_mask_dropped").value(v.spec.padding_dropped);
    w.key("selection").begin_object().key("batch");
    index_or_null(w, v.selected_batches);
    w.key("head");
    index_or_null(w, v.selected_heads);
    w.end_object().end_object();
}

// The "dims" and "tokens" members.
void put_dims_tokens(JsonWriter& w, const TraceView& v) {
    const Dims& d = v.dims;
    w.newline().key("dims").begin_object();
    w.key("B").value(d.B).key("Tq").value(d.Tq).key("Tk").value(d.Tk).key("Dm").value(d.Dm).key("Dkv").value(d.Dkv);
    w.key("H").value(d.H).key("G").value(d.G ? d.G : d.H).key("Dk").value(d.Dk).key("Dv").value(d.Dv);
    w.key("Dout").value(d.Dout).end_object();
    w.newline().key("tokens").begin_object().key("query");
    put_tokens(w, v.query_tokens, v.batched);
    w.key("key");
    put_tokens(w, v.key_tokens, v.batched);
    w.end_object();
}

// One stage's member: "NAME":{formula, axes, shape, dtype, data}.
void put_stage(JsonWriter& w, const TraceView& v, const StageView& s) {
    w.key(s.name).begin_object().key("formula").value(s.formula).key("axes").list(s.axes);
    w.key("shape").list(s.shape).key("dtype").value(s.dtype == DType::boolean ? "bool" : v.dtype);
    w.key("data");
    put_stage_data(w, s);
    w.end_object();
}

}  // namespace

void write_json(std::ostream& out, const TraceView& v, const std::vector<std::string>& stages,
                const std::vector<RowDiagnostics>* diagnostics, const std::function<void(JsonWriter&)>& extra) {
    JsonWriter w(out);
    w.begin_object().key("schema").value("attnscope.run/1");
    write_json_members(w, v, stages, diagnostics, extra);
    w.end_object();
    out << '\n';
}

void write_json_members(JsonWriter& w, const TraceView& v, const std::vector<std::string>& stages,
                        const std::vector<RowDiagnostics>* diagnostics, const std::function<void(JsonWriter&)>& extra) {
    // 1) config, dims, tokens; fully masked rows; warnings; diagnostics when asked for.
    put_config(w, v);
    put_dims_tokens(w, v);
    w.newline().key("fully_masked_rows").begin_array();
    for (const auto& r : v.fully_masked)
        w.begin_object().key("batch").value(r.batch).key("query").value(r.query).end_object();
    w.end_array();
    w.newline().key("warnings").list(v.warnings);
    if (diagnostics) {
        w.newline().key("diagnostics");
        write_diagnostics_json(w, *diagnostics);
    }
    if (extra) extra(w.newline());
    // 2) The chosen stages, in the order asked.
    w.newline().key("stages").begin_object();
    for (const auto& name : stages) put_stage(w.newline(), v, v.stage(name));
    w.newline().end_object();
}

void write_compare_json(std::ostream& out, const std::vector<std::string>& b_adds, double scale_a, double scale_b,
                        const std::vector<StageDiff>& diffs) {
    JsonWriter w(out);
    w.begin_object().key("schema").value("attnscope.compare/1").key("compare").begin_object();
    w.key("b_adds").list(b_adds).key("scale").begin_object().key("a").value(scale_a).key("b").value(scale_b);
    w.end_object().end_object().key("stages").begin_object();
    for (const StageDiff& d : diffs) {
        w.key(stage_info(d.id).name).begin_object();
        w.key("shape_a").list(d.shape_a).key("shape_b").list(d.shape_b);
        if (d.same_shape) {
            w.key("max_abs_diff").value(d.max_abs).key("at");
            index_or_null(w, d.at);
            w.key("mean_abs_diff").value(d.mean_abs).key("infinite_diffs").value(d.infinite);
            w.key("finite_mean_abs_diff").value(d.finite_mean_abs);
        }
        w.end_object();
    }
    w.end_object().end_object();
    out << '\n';
}

}  // namespace attnscope
