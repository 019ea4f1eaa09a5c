// JSON output, streamed element by element (no document is built in memory).
// Numbers use the shortest form that reads back to the same float32/float64 value;
// non-finite numbers, which JSON cannot spell, are the strings "-inf", "inf", "nan".
#include <charconv>
#include <cmath>
#include <ostream>

#include "attnscope/analysis/compare.hpp"
#include "attnscope/analysis/diagnostics.hpp"
#include "attnscope/base/text.hpp"
#include "attnscope/report/report.hpp"
#include "text_util.hpp"

namespace attnscope {
namespace {

void put_index(std::ostream& out, const std::vector<std::size_t>& v) {
    out << '[';
    for (std::size_t k = 0; k < v.size(); ++k) out << (k ? "," : "") << v[k];
    out << ']';
}

void put_stage_data(std::ostream& out, const StageView& s) {
    // Nested lists in C order: open a bracket whenever an index along an axis restarts.
    const std::size_t nd = s.shape.size(), n = s.size();
    std::vector<std::size_t> idx(nd, 0);
    if (n == 0) {
        for (std::size_t k = 0; k < nd; ++k) out << '[';
        for (std::size_t k = 0; k < nd; ++k) out << ']';
        return;
    }
    for (std::size_t k = 0; k < n; ++k) {
        // Opening brackets for every axis whose index is 0 from the innermost moving axis out.
        std::size_t opens = 0;
        for (std::size_t a = nd; a-- > 0 && idx[a] == 0;) ++opens;
        if (k > 0 && opens < nd) out << ',';
        for (std::size_t a = 0; a < opens; ++a) out << '[';
        switch (s.dtype) {
            case DType::float32:
                text::put_json_number(out, static_cast<const float*>(s.data)[k]);
                break;
            case DType::float64:
                text::put_json_number(out, static_cast<const double*>(s.data)[k]);
                break;
            case DType::boolean:
                out << (static_cast<const bool*>(s.data)[k] ? "true" : "false");
                break;
            case DType::int64:
                out << static_cast<const std::int64_t*>(s.data)[k];
                break;
        }
        // Advance, closing a bracket for every axis that wraps.
        for (std::size_t a = nd; a-- > 0;) {
            if (++idx[a] < s.shape[a]) break;
            idx[a] = 0;
            out << ']';
        }
    }
}

void put_tokens(std::ostream& out, const TokenLabels& t, bool batched) {
    if (t.empty()) {
        out << "null";
        return;
    }
    auto list = [&](const std::vector<std::string>& row) {
        out << '[';
        for (std::size_t i = 0; i < row.size(); ++i) {
            if (i) out << ',';
            text::put_json_string(out, row[i]);
        }
        out << ']';
    };
    if (!batched) {
        list(t[0]);
        return;
    }
    out << '[';
    for (std::size_t b = 0; b < t.size(); ++b) {
        if (b) out << ',';
        list(t[b]);
    }
    out << ']';
}

// The config of the modern variants: kv_heads, rope {base, dim, style}, alibi, window,
// softcap, attn_mask_means (null when not given), and what came from the bundle or was
// derived: attn_mask ("bool", "float" or null), alibi_slopes and sinks (one number per
// head, or null), positions (true when q/k_positions were given).
void put_variants(std::ostream& out, const TraceView& v) {
    const Dims& d = v.dims;
    const text::Variants r = text::variants_of(v);
    out << ",\"kv_heads\":" << (d.G ? d.G : d.H) << ",\"rope\":";
    if (v.spec.rope) {
        out << "{\"base\":";
        text::put_json_number(out, v.spec.rope->base);
        out << ",\"dim\":" << v.spec.rope->dim.value_or(d.Dk) << ",\"style\":\""
            << (v.spec.rope->style == RopeStyle::half ? "half" : "interleaved") << "\"}";
    } else {
        out << "null";
    }
    out << ",\"alibi\":" << (v.spec.alibi ? "true" : "false") << ",\"window\":";
    if (v.spec.window)
        out << *v.spec.window;
    else
        out << "null";
    out << ",\"softcap\":";
    if (v.spec.softcap)
        text::put_json_number(out, *v.spec.softcap);
    else
        out << "null";
    out << ",\"attn_mask_means\":"
        << (v.spec.attn_mask_means == MaskMeans::allow   ? "\"allow\""
            : v.spec.attn_mask_means == MaskMeans::block ? "\"block\""
                                                         : "null");
    out << ",\"attn_mask\":" << (r.bool_mask ? "\"bool\"" : r.float_mask ? "\"float\"" : "null");
    const auto numbers = [&out](const std::vector<double>& xs) {
        if (xs.empty()) {
            out << "null";
            return;
        }
        out << '[';
        for (std::size_t k = 0; k < xs.size(); ++k) {
            if (k) out << ',';
            text::put_json_number(out, xs[k]);
        }
        out << ']';
    };
    out << ",\"alibi_slopes\":";
    numbers(v.alibi_slopes);
    out << ",\"sinks\":";
    numbers(v.sinks);
    out << ",\"positions\":" << (r.positions ? "true" : "false");
}

// The options a bundle's config record set, when it has one: "bundle_config":{"heads":
// {"value":2,"overridden":false},...}, overridden when the command line gave its own.
void put_bundle_options(std::ostream& out, const std::vector<BundleOption>& options) {
    if (options.empty()) return;
    out << ",\"bundle_config\":{";
    for (std::size_t k = 0; k < options.size(); ++k) {
        const BundleOption& b = options[k];
        out << (k ? "," : "");
        text::put_json_string(out, b.key);
        out << ":{\"value\":";
        if (b.string)
            text::put_json_string(out, b.value);
        else
            out << b.value;  // a JSON number as written, or true/false
        out << ",\"overridden\":" << (b.overridden ? "true" : "false") << '}';
    }
    out << '}';
}

// The opening of the document: its "config", "dims" and "tokens" members.
void put_config(std::ostream& out, const TraceView& v) {
    const Dims& d = v.dims;
    out << "{\"config\":{\"source\":";
    text::put_json_string(out, v.source);
    out << ",\"mode\":\"" << (v.cross ? "cross" : "self") << "\",\"dtype\":\"" << v.dtype << "\",\"heads\":" << d.H
        << ",\"scale\":";
    text::put_json_number(out, v.scale);
    out << ",\"scale_source\":";
    text::put_json_string(out, v.scale_source);
    out << ",\"causal\":" << (v.spec.causal ? "true" : "false") << ",\"causal_align\":\""
        << (v.spec.causal_align == CausalAlign::top_left ? "top-left" : "bottom-right") << "\""
        << ",\"key_padding_mask\":" << (v.has_padding() ? "true" : "false") << ",\"layout\":\""
        << (v.spec.layout == Layout::math ? "math" : "torch") << "\",\"batched\":" << (v.batched ? "true" : "false");
    put_variants(out, v);
    out << ",\"qkv\":";
    if (v.given_from.empty())
        out << "null";
    else
        text::put_json_string(out, v.given_from);
    // Experiments and selections: everything that makes this output differ from a plain run.
    out << ",\"temperature\":";
    text::put_json_number(out, v.spec.temperature);
    out << ",\"zero_key\":";
    if (v.spec.zero_key)
        out << *v.spec.zero_key;
    else
        out << "null";
    put_bundle_options(out, v.spec.bundle_options);
    out << ",\"key_padding_mask_dropped\":" << (v.spec.padding_dropped ? "true" : "false")
        << ",\"selection\":{\"batch\":";
    if (v.selected_batches.empty())
        out << "null";
    else
        put_index(out, v.selected_batches);
    out << ",\"head\":";
    if (v.selected_heads.empty())
        out << "null";
    else
        put_index(out, v.selected_heads);
    out << '}';
    out << "},\n\"dims\":{\"B\":" << d.B << ",\"Tq\":" << d.Tq << ",\"Tk\":" << d.Tk << ",\"Dm\":" << d.Dm
        << ",\"Dkv\":" << d.Dkv << ",\"H\":" << d.H << ",\"G\":" << (d.G ? d.G : d.H) << ",\"Dk\":" << d.Dk
        << ",\"Dv\":" << d.Dv << ",\"Dout\":" << d.Dout << "},\n\"tokens\":{\"query\":";
    put_tokens(out, v.query_tokens, v.batched);
    out << ",\"key\":";
    put_tokens(out, v.key_tokens, v.batched);
    out << '}';
}

// One stage's member: "NAME":{formula, axes, shape, dtype, data}.
void put_stage(std::ostream& out, const TraceView& v, const StageView& s) {
    text::put_json_string(out, s.name);
    out << ":{\"formula\":";
    text::put_json_string(out, s.formula);
    out << ",\"axes\":[";
    for (std::size_t k = 0; k < s.axes.size(); ++k) out << (k ? "," : "") << '"' << s.axes[k] << '"';
    out << "],\"shape\":[";
    for (std::size_t k = 0; k < s.shape.size(); ++k) out << (k ? "," : "") << s.shape[k];
    out << "],\"dtype\":\"" << (s.dtype == DType::boolean ? "bool" : v.dtype) << "\",\"data\":";
    put_stage_data(out, s);
    out << '}';
}

}  // namespace

void write_json(std::ostream& out, const TraceView& v, const std::vector<std::string>& stages,
                const std::vector<RowDiagnostics>* diagnostics, const std::function<void(std::ostream&)>& extra) {
    // 1) config, dims, tokens; fully masked rows; warnings; diagnostics when asked for.
    put_config(out, v);
    out << ",\n\"fully_masked_rows\":[";
    for (std::size_t k = 0; k < v.fully_masked.size(); ++k) {
        out << (k ? "," : "") << "{\"batch\":" << v.fully_masked[k].batch << ",\"query\":" << v.fully_masked[k].query
            << "}";
    }
    out << "],\n\"warnings\":[";
    for (std::size_t k = 0; k < v.warnings.size(); ++k) {
        if (k) out << ',';
        text::put_json_string(out, v.warnings[k]);
    }
    out << "],\n";
    if (diagnostics) {
        out << "\"diagnostics\":";
        write_diagnostics_json(out, *diagnostics);
        out << ",\n";
    }
    if (extra) {
        extra(out);
        out << ",\n";
    }
    // 2) The chosen stages, in the order asked.
    out << "\"stages\":{";
    bool first = true;
    for (const auto& name : stages) {
        out << (first ? "\n" : ",\n");
        first = false;
        put_stage(out, v, v.stage(name));
    }
    out << "\n}}\n";
}

void write_compare_json(std::ostream& out, const std::vector<std::string>& b_adds, double scale_a, double scale_b,
                        const std::vector<StageDiff>& diffs) {
    out << "{\"compare\":{\"b_adds\":[";
    for (std::size_t k = 0; k < b_adds.size(); ++k) {
        if (k) out << ',';
        text::put_json_string(out, b_adds[k]);
    }
    out << "],\"scale\":{\"a\":";
    text::put_json_number(out, scale_a);
    out << ",\"b\":";
    text::put_json_number(out, scale_b);
    out << "}},\"stages\":{";
    for (std::size_t k = 0; k < diffs.size(); ++k) {
        const StageDiff& d = diffs[k];
        out << (k ? "," : "") << '"' << stage_info(d.id).name << "\":{\"shape_a\":";
        put_index(out, d.shape_a);
        out << ",\"shape_b\":";
        put_index(out, d.shape_b);
        if (d.same_shape) {
            out << ",\"max_abs_diff\":";
            text::put_json_number(out, d.max_abs);
            out << ",\"at\":";
            if (d.at.empty())
                out << "null";
            else
                put_index(out, d.at);
            out << ",\"mean_abs_diff\":";
            text::put_json_number(out, d.mean_abs);
            out << ",\"infinite_diffs\":" << d.infinite << ",\"finite_mean_abs_diff\":";
            text::put_json_number(out, d.finite_mean_abs);
        }
        out << '}';
    }
    out << "}}\n";
}

}  // namespace attnscope
