// A KV-cache decoding as text and as JSON (see decode_report.hpp).
#include "attnscope/report/decode_report.hpp"

#include <algorithm>
#include <cstdio>
#include <ostream>
#include <string>
#include <vector>
#include <xtensor/xview.hpp>

#include "attnscope/base/json_writer.hpp"
#include "attnscope/base/text.hpp"
#include "attnscope/io/write.hpp"
#include "text_util.hpp"

namespace attnscope {
namespace {

using namespace text;

constexpr const char* kRamp = " .:-=+*#%@";  // as the heatmaps without colour: darker to denser
constexpr const char* kMasked = "×";

// ---- shared pieces ----------------------------------------------------------------------

// A shape, the batch axis dropped for a 2-D x: "(1, 2, 4, 8)" or [1,2,4,8].
std::vector<std::size_t> shown_shape(const std::array<std::size_t, 4>& s, bool batched) {
    return batched ? std::vector<std::size_t>(s.begin(), s.end()) : std::vector<std::size_t>(s.begin() + 1, s.end());
}

std::string shape_words(const std::array<std::size_t, 4>& s, bool batched) {
    std::string t;
    for (std::size_t n : shown_shape(s, batched)) t += (t.empty() ? "" : ", ") + std::to_string(n);
    return "(" + t + ")";
}

// 1234567 -> "1,234,567"
std::string grouped(std::uint64_t n) {
    std::string digits = std::to_string(n), out;
    for (std::size_t k = 0; k < digits.size(); ++k) {
        if (k && (digits.size() - k) % 3 == 0) out += ',';
        out += digits[k];
    }
    return out;
}

// `first` and `second` on one line when it fits in `width`, else `second` on the next,
// indented by two.
void put_fitting(std::ostream& out, const std::string& first, const std::string& sep, const std::string& second,
                 std::size_t width) {
    if (display_width(first) + display_width(sep) + display_width(second) <= width)
        out << first << sep << second << '\n';
    else
        out << first << "\n  " << second << '\n';
}

// A difference, to three significant digits: "0", "0.998", "16.2", "1.11e-16".
std::string sci(double v) {
    if (v == 0) return "0";
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3g", v);
    return buf;
}

// Each stage's largest difference, named: "weights 0.998, context 3.12, output 16.2"
// (and the sink's share, with sinks).
std::string diff_words(const DecodeDiff& d, bool sinks) {
    return "weights " + sci(d.weights) + (sinks ? ", sink_weight " + sci(d.sink_weight) : std::string()) +
           ", context " + sci(d.context) + ", output " + sci(d.output);
}

// The stage holding the largest of d's differences.
std::string worst_stage(const DecodeDiff& d) {
    const double m = d.max();
    return m == d.output ? "output" : m == d.context ? "context" : m == d.weights ? "weights" : "sink_weight";
}

// `text` wrapped to `width`, its first line indented by `first`, the rest by `first` + 2.
void put_wrapped(std::ostream& out, const std::string& first, const std::string& text, std::size_t width) {
    const auto lines = wrap(text, width - display_width(first) - 2);
    for (std::size_t k = 0; k < lines.size(); ++k) out << first << (k ? "  " : "") << lines[k] << '\n';
}

// The token of position t of batch item b, escaped and clipped, or "".
template <typename T>
std::string token(const Problem<T>& p, std::size_t b, std::size_t t) {
    if (b >= p.query_tokens.size() || t >= p.query_tokens[b].size()) return "";
    return clip_label(escape_control(p.query_tokens[b][t]), 16);
}

// The label of key j of batch item b: its token, escaped, else "k" and its index (as the
// other views label keys).
template <typename T>
std::string key_label(const Problem<T>& p, std::size_t b, std::size_t j) {
    if (b < p.key_tokens.size() && j < p.key_tokens[b].size()) return escape_control(p.key_tokens[b][j]);
    return "k" + std::to_string(j);
}

// The step's token in words: " 'tok'" when the chosen items share it, else each item's
// (" b0 'tok' b1 'other'"), or "" without tokens.
template <typename T>
std::string step_tokens(const Problem<T>& p, std::size_t t, const std::vector<std::size_t>& batches) {
    if (p.query_tokens.empty()) return "";
    bool same = true;
    for (std::size_t b : batches) same = same && p.query_tokens[b][t] == p.query_tokens[batches[0]][t];
    if (same) return " '" + token(p, batches[0], t) + "'";
    std::string s;
    for (std::size_t b : batches) s += " b" + std::to_string(b) + " '" + token(p, b, t) + "'";
    return s;
}

// What the run computes, in words: "RoPE half R=8, ALiBi, window 3, softcap 30, sinks, key padding".
template <typename T>
std::string variants(const Problem<T>& p) {
    std::string v = "causal (implied: a step sees only the cache)";
    auto add = [&](const std::string& s) { v += ", " + s; };
    if (p.rope_dim)
        add(std::string("RoPE ") + (p.spec.rope->style == RopeStyle::half ? "half" : "interleaved") +
            " R=" + std::to_string(p.rope_dim));
    if (p.alibi_slopes) add("ALiBi");
    if (p.mask.window()) add("window " + std::to_string(*p.mask.window()));
    if (p.spec.softcap) add("softcap " + format_number(*p.spec.softcap, 4));
    if (p.sinks) add("sinks");
    if (p.mask.has_padding()) add("key padding");
    return v;
}

// ---- text ---------------------------------------------------------------------------------

// The keys a row of L weights shows within `room` columns: all, or its ends around kGap ("…").
std::size_t cell_width(const DecodeTextOptions& o) { return o.heatmap ? 1 : std::size_t(o.decimals) + 3; }
std::vector<std::size_t> row_columns(std::size_t L, std::size_t room, const DecodeTextOptions& o) {
    const std::size_t fit = std::max<std::size_t>(room / cell_width(o), 3);
    return shown(L, fit, (fit - 1) / 2);
}

// One weight row as numbers (" 0.1234" a key), or as a heatmap row (a glyph a key).
template <typename T>
std::string row_text(const T* w, const bool* visible, const std::vector<std::size_t>& cols,
                     const DecodeTextOptions& o) {
    std::string s;
    for (std::size_t j : cols) {
        if (j == kGap)
            s += o.heatmap ? "…" : " …";
        else if (!o.heatmap)
            s += " " + format_number(double(w[j]), o.decimals);
        else if (!visible[j])
            s += kMasked;
        else
            s += kRamp[std::size_t(std::lround(std::clamp(double(w[j]), 0.0, 1.0) * 9))];
    }
    return s;
}

// The keys' labels over the columns of row_text: each key's token (else its index), right-
// aligned and clipped to its cell; in a heatmap (a column a key) the indices of every
// tenth key where they fit.
// `label(j)`: key j's label.
template <typename Label>
std::string key_header(const Label& label, const std::vector<std::size_t>& cols, const DecodeTextOptions& o) {
    std::string s;
    if (!o.heatmap) {
        const std::size_t cell = cell_width(o);
        for (std::size_t j : cols) s += j == kGap ? " …" : " " + pad_left(clip_label(label(j), cell - 1), cell - 1);
        return s;
    }
    std::vector<std::string> glyph(cols.size(), " ");
    for (std::size_t c = 0, next_free = 0; c < cols.size(); ++c) {
        if (cols[c] == kGap) {
            glyph[c] = "…";
            continue;
        }
        const std::string n = std::to_string(cols[c]);
        if (cols[c] % 10 != 0 || c < next_free || c + n.size() > cols.size()) continue;
        bool room = true;
        for (std::size_t k = 0; k < n.size(); ++k) room = room && cols[c + k] != kGap;
        if (!room) continue;
        for (std::size_t k = 0; k < n.size(); ++k) glyph[c + k] = std::string(1, n[k]);
        next_free = c + n.size() + 1;
    }
    for (const std::string& g : glyph) s += g;
    return s;
}

// Whether the chosen batch items label keys 0..L-1 alike (one line of key labels serves all).
template <typename T>
bool same_keys(const Problem<T>& p, const std::vector<std::size_t>& batches, std::size_t L) {
    for (std::size_t b : batches)
        for (std::size_t j = 0; j < L; ++j)
            if (key_label(p, b, j) != key_label(p, batches[0], j)) return false;
    return true;
}

template <typename T>
void write_header(std::ostream& out, const Problem<T>& p, const DecodeRun<T>& run, const DecodeTextOptions& o) {
    const Dims& d = p.dims;
    out << "attnscope decode: " << escape_control(o.source) << " (" << (sizeof(T) == 4 ? "float32" : "float64")
        << ")\n";
    out << "  B=" << d.B << " T=" << d.Tq << " Dm=" << d.Dm << " H=" << d.H << " G=" << d.G << " Dk=" << d.Dk
        << " Dv=" << d.Dv << " Dout=" << d.Dout << "; scale " << escape_control(p.scale_source) << '\n';
    for (const std::string& line : wrap(variants(p), o.width - 2)) out << "  " << line << '\n';
    if (run.bug != DecodeBug::none) {
        const std::string what = run.bug == DecodeBug::rope_position_zero ? "query and new key rotated at position 0"
                                 : run.bug == DecodeBug::attend_before_append
                                     ? "the query attends before its own key/value is appended"
                                     : "the query sits at position t - 1";
        for (const std::string& line :
             wrap("bug " + std::string(bug_name(run.bug)) + " (a teaching experiment): " + what, o.width - 2))
            out << "  " << line << '\n';
    }
    if (!o.batches.empty() || !o.heads.empty()) {
        const auto list = [](const char* what, const std::vector<std::size_t>& chosen, std::size_t n) {
            std::string s;
            for (std::size_t i : chosen) s += (s.empty() ? "" : ",") + std::to_string(i);
            return std::string(what) + (chosen.size() == 1 ? " " : "s ") + s + " of " + std::to_string(n);
        };
        std::string shown;
        if (!o.batches.empty()) shown = list("batch item", o.batches, d.B);
        if (!o.heads.empty()) shown += (shown.empty() ? "" : "; ") + list("head", o.heads, d.H);
        put_wrapped(out, "  ", "shown: " + shown + " (--batch, --head)", o.width);
    }
    if (o.heatmap) out << "  heatmap rows: '" << kRamp << "' = weight 0..1, " << kMasked << " = masked key\n";
    if (run.prefill == 0) {
        out << "prefill: none, the cache starts empty\n";
        return;
    }
    put_fitting(
        out,
        "prefill: " + (run.prefill == 1 ? "position 0" : "positions 0.." + std::to_string(run.prefill - 1)) +
            " in one causal run",
        "; ",
        "K cache " + shape_words(run.prefill_k_shape, p.batched) + ", V " + shape_words(run.prefill_v_shape, p.batched),
        o.width);
    out << "  FLOPs " << grouped(run.prefill_flops) << '\n';
    put_wrapped(out, "  ", "max |diff| " + diff_words(run.prefill_diff, p.sinks.has_value()), o.width);
}

template <typename T>
void write_step(std::ostream& out, const Problem<T>& p, const DecodeStep<T>& s, const DecodeTextOptions& o) {
    const auto batches = chosen_or_all(o.batches, p.dims.B), heads = chosen_or_all(o.heads, p.dims.H);
    std::string head = "step t=" + std::to_string(s.t) + step_tokens(p, s.t, batches);
    if (s.query_position != (long long)s.t) head += " (query at " + std::to_string(s.query_position) + ")";
    put_fitting(out, head + ": cache " + std::to_string(s.cache_length), ", ",
                "K " + shape_words(s.k_cache_shape, p.batched) + ", V " + shape_words(s.v_cache_shape, p.batched),
                o.width);
    const std::size_t L = s.weights.shape(3), label_width = p.batched ? 9 : 6;
    const std::string bar = o.heatmap ? " |" : "";
    const auto cols = row_columns(L, o.width - label_width - bar.size() - (p.sinks ? 12 : 1), o);
    const bool one_header = same_keys(p, batches, L);
    const auto b_ = [&](std::size_t b) { return p.batched ? "b" + std::to_string(b) + " " : std::string(); };
    for (std::size_t b : batches) {
        if (b == batches[0] || !one_header)
            out << pad_right("  " + (one_header ? std::string() : b_(b)) + "keys", label_width) << bar
                << key_header([&](std::size_t j) { return key_label(p, b, j); }, cols, o) << (o.heatmap ? "|" : "")
                << '\n';
        for (std::size_t h : heads) {
            std::string line = pad_right("  " + b_(b) + "h" + std::to_string(h), label_width) + bar;
            line += row_text(&s.weights(b, h, 0, 0), &s.mask(b, 0, 0), cols, o);
            if (o.heatmap) line += "|";
            if (p.sinks) line += "  sink " + format_number(double(s.sink_weight(b, h, 0)), 2);
            out << line << '\n';
        }
    }
    for (std::size_t b : s.fully_masked)
        if (std::find(batches.begin(), batches.end(), b) != batches.end())
            out << "  " << (p.batched ? "b" + std::to_string(b) + ": " : "") << "no key visible: weights 0\n";
    const double ratio = s.flops_cached ? double(s.flops_recompute) / double(s.flops_cached) : 0;
    char r[32];
    std::snprintf(r, sizeof r, "%.1fx", ratio);
    out << "  FLOPs " << grouped(s.flops_cached) << " cached, " << grouped(s.flops_recompute) << " recomputed (" << r
        << ")\n";
    put_wrapped(out, "  ", "max |diff| " + diff_words(s.diff, p.sinks.has_value()), o.width);
}

template <typename T>
void write_summary(std::ostream& out, const Problem<T>& p, const DecodeRun<T>& run, std::size_t width) {
    std::uint64_t cached = run.prefill_flops, recompute = run.prefill_flops;
    std::size_t worst = 0;
    DecodeDiff most = run.prefill_diff;  // each stage's largest, over the prefill and the steps
    for (std::size_t k = 0; k < run.steps.size(); ++k) {
        const DecodeDiff& d = run.steps[k].diff;
        cached += run.steps[k].flops_cached;
        recompute += run.steps[k].flops_recompute;
        if (d.max() > run.steps[worst].diff.max()) worst = k;
        most.weights = std::max(most.weights, d.weights), most.sink_weight = std::max(most.sink_weight, d.sink_weight);
        most.context = std::max(most.context, d.context), most.output = std::max(most.output, d.output);
    }
    put_fitting(out,
                (run.prefill ? "prefill + " : "") + std::to_string(run.steps.size()) +
                    (run.steps.size() == 1 ? " step" : " steps") + ": FLOPs " + grouped(cached) + " with the cache,",
                " ", grouped(recompute) + " recomputing each prefix", width);
    const double tol = sizeof(T) == 4 ? 1e-5 : 1e-12;
    const std::string stages = diff_words(most, p.sinks.has_value());
    if (run.bug == DecodeBug::none) {
        out << "max |diff| vs the full causal run "
            << (run.max_diff <= tol ? "(the cache gives the same rows):\n" : "(more than rounding):\n");
    } else {
        std::string where = worst_stage(most);
        if (!run.steps.empty() && run.steps[worst].diff.max() >= run.prefill_diff.max())
            where += ", at t=" + std::to_string(run.steps[worst].t);
        put_wrapped(out, "",
                    "bug " + std::string(bug_name(run.bug)) + ": drifts from the full run by up to " +
                        sci(run.max_diff) + " (" + where + ")",
                    width);
    }
    put_wrapped(out, "  ", stages, width);
}

// ---- JSON ---------------------------------------------------------------------------------

// A row-major tensor as nested lists (the batch axis, of size 1, dropped for a 2-D x).
template <typename E>
void put_tensor(JsonWriter& w, const E& t, bool batched) {
    std::vector<std::size_t> shape(t.shape().begin(), t.shape().end());
    if (!batched) shape.erase(shape.begin());
    const auto* data = t.data();
    w.nested(shape, [data](JsonWriter& j, std::size_t k) { j.value(data[k]); });
}

void put_diffs(JsonWriter& w, const DecodeDiff& d, bool sinks) {
    w.key("max_abs_diff").value(d.max()).key("diffs").begin_object().key("weights").value(d.weights);
    if (sinks) w.key("sink_weight").value(d.sink_weight);
    w.key("context").value(d.context).key("output").value(d.output).end_object();
}

template <typename T>
void put_json_config(JsonWriter& w, const Problem<T>& p) {
    const Dims& d = p.dims;
    w.key("config").begin_object().key("B").value(d.B).key("T").value(d.Tq).key("Dm").value(d.Dm);
    w.key("H").value(d.H).key("G").value(d.G).key("Dk").value(d.Dk).key("Dv").value(d.Dv).key("Dout").value(d.Dout);
    w.key("batched").value(p.batched).key("causal").value(true).key("scale").value(p.scale);
    w.key("scale_source").value(p.scale_source).key("rope");
    if (p.rope_dim) {
        w.begin_object().key("dim").value(p.rope_dim).key("base").value(p.spec.rope->base).key("style");
        w.value(p.spec.rope->style == RopeStyle::half ? "half" : "interleaved").end_object();
    } else {
        w.value(nullptr);
    }
    w.key("alibi").value(p.alibi_slopes.has_value()).key("window");
    p.mask.window() ? w.value(*p.mask.window()) : w.value(nullptr);
    w.key("softcap");
    p.spec.softcap ? w.value(*p.spec.softcap) : w.value(nullptr);
    w.key("sinks").value(p.sinks.has_value()).key("key_padding").value(p.mask.has_padding());
    w.key("has_W_O").value(p.W_O.has_value()).end_object();
}

template <typename T>
void put_json_step(JsonWriter& w, const Problem<T>& p, const DecodeStep<T>& s) {
    w.newline().begin_object().key("t").value(s.t).key("token");
    if (p.query_tokens.empty()) {
        w.value(nullptr);
    } else if (!p.batched) {
        w.value(p.query_tokens[0][s.t]);
    } else {
        w.begin_array();
        for (std::size_t b = 0; b < p.dims.B; ++b) w.value(p.query_tokens[b][s.t]);
        w.end_array();
    }
    w.key("query_position").value(s.query_position).key("cache_length").value(s.cache_length);
    w.key("k_cache_shape").list(shown_shape(s.k_cache_shape, p.batched));
    w.key("v_cache_shape").list(shown_shape(s.v_cache_shape, p.batched));
    put_tensor(w.key("mask"), s.mask, p.batched);
    put_tensor(w.key("weights"), s.weights, p.batched);
    if (p.sinks) put_tensor(w.key("sink_weight"), s.sink_weight, p.batched);
    put_tensor(w.key("context"), s.context, p.batched);
    put_tensor(w.key("output"), s.output, p.batched);
    w.key("fully_masked").list(s.fully_masked);
    w.key("flops_cached").value(s.flops_cached).key("flops_recompute").value(s.flops_recompute);
    put_diffs(w, s.diff, p.sinks.has_value());
    w.end_object();
}

}  // namespace

template <typename T>
void write_decode_text(std::ostream& out, const Problem<T>& p, const DecodeRun<T>& run,
                       const DecodeTextOptions& options) {
    write_header(out, p, run, options);
    for (const DecodeStep<T>& s : run.steps) write_step(out, p, s, options);
    write_summary(out, p, run, options.width);
}

template <typename T>
void write_decode_json(std::ostream& out, const Problem<T>& p, const DecodeRun<T>& run, const std::string& source) {
    JsonWriter w(out);
    w.begin_object().key("schema").value("attnscope.decode/1").key("source").value(source);
    w.key("dtype").value(sizeof(T) == 4 ? "float32" : "float64");
    put_json_config(w, p);
    w.key("bug");
    run.bug == DecodeBug::none ? w.value(nullptr) : w.value(bug_name(run.bug));
    w.key("prefill").begin_object().key("length").value(run.prefill);
    w.key("k_cache_shape").list(shown_shape(run.prefill_k_shape, p.batched));
    w.key("v_cache_shape").list(shown_shape(run.prefill_v_shape, p.batched));
    w.key("flops").value(run.prefill_flops);
    put_diffs(w, run.prefill_diff, p.sinks.has_value());
    w.end_object().key("steps").begin_array();
    for (const DecodeStep<T>& s : run.steps) put_json_step(w, p, s);
    w.end_array().key("max_abs_diff").value(run.max_diff).end_object();
    out << '\n';
}

template <typename T>
void write_decode_npz(const std::string& path, const Problem<T>& p, const DecodeRun<T>& run, bool replace) {
    const DType dt = sizeof(T) == 4 ? DType::float32 : DType::float64;
    std::vector<std::string> names;  // kept alive: OutArray borrows
    names.reserve(4 + 5 * run.steps.size());
    std::vector<OutArray> arrays;
    auto add = [&](std::string name, const auto& tensor, DType type) {
        std::vector<std::size_t> shape(tensor.shape().begin(), tensor.shape().end());
        if (!p.batched) shape.erase(shape.begin());
        names.push_back(std::move(name));
        arrays.push_back({names.back(), shape, type, tensor.data()});
    };
    if (run.prefill) {
        add("prefill_weights", run.prefill_trace.weights, dt);
        if (p.sinks) add("prefill_sink_weight", run.prefill_trace.sink_weight, dt);
        add("prefill_context", run.prefill_trace.context, dt);
        add("prefill_output", run.prefill_trace.output, dt);
    }
    for (const DecodeStep<T>& s : run.steps) {
        const std::string at = "step" + std::to_string(s.t) + "_";
        add(at + "mask", s.mask, DType::boolean);
        add(at + "weights", s.weights, dt);
        if (p.sinks) add(at + "sink_weight", s.sink_weight, dt);
        add(at + "context", s.context, dt);
        add(at + "output", s.output, dt);
    }
    AtomicFile file(path, replace);
    write_npz(file, arrays);
    file.commit();
}

// ---- generation -----------------------------------------------------------------------

namespace {

// The layers whose rows a step shows: the chosen one, or every layer.
std::vector<std::size_t> shown_layers(const Generation& g, const GenerationTextOptions& o) {
    if (o.layer) return {*o.layer};
    return chosen_or_all({}, g.dims.size());
}

// Token i's label, escaped and clipped: 'piece'.
std::string quoted(const GenerationTextOptions& o, std::size_t i, std::size_t clip = 16) {
    return "'" + clip_label(escape_control(o.labels.at(i)), clip) + "'";
}

// The layer with the largest difference at step s, and that difference.
std::pair<std::size_t, DecodeDiff> worst_layer(const GenerationStep& s) {
    std::size_t worst = 0;
    for (std::size_t l = 0; l < s.layers.size(); ++l)
        if (s.layers[l].diff.max() > s.layers[worst].diff.max()) worst = l;
    return {worst, s.layers.at(worst).diff};
}

// Head h's rows of the chosen layers (numbers or ramps) under one line of key labels.
void write_rows(std::ostream& out, const Generation& g, const GenerationStep& s, const GenerationTextOptions& o,
                const DecodeTextOptions& d) {
    const auto layers = shown_layers(g, o);
    const std::size_t L = s.t + 1, label_width = layers.size() > 1 ? 10 : 6;
    const std::string bar = o.heatmap ? " |" : "";
    const auto cols = row_columns(L, o.width - label_width - bar.size() - 1, d);
    const auto label = [&](std::size_t j) { return escape_control(o.labels.at(j)); };
    out << pad_right("  keys", label_width) << bar << key_header(label, cols, d) << (o.heatmap ? "|" : "") << '\n';
    for (std::size_t l : layers) {
        const DecodeStep<double>& r = s.layers[l];
        for (std::size_t h = 0; h < g.dims[l].H; ++h) {
            const std::string name = (layers.size() > 1 ? "L" + std::to_string(l) + " " : "") + "h" + std::to_string(h);
            out << pad_right("  " + name, label_width) << bar
                << row_text(&r.weights(0, h, 0, 0), &r.mask(0, 0, 0), cols, d) << (o.heatmap ? "|" : "") << '\n';
        }
    }
}

// A line per layer: its weights averaged over the heads, as a ramp (--heatmap) or its top 3 keys.
void write_layer_summary(std::ostream& out, const Generation& g, const GenerationStep& s,
                         const GenerationTextOptions& o, const DecodeTextOptions& d) {
    const std::size_t L = s.t + 1;
    const auto cols = row_columns(L, o.width - 8, d);
    if (o.heatmap)
        out << pad_right("  keys", 6) << " |" << key_header([](std::size_t j) { return std::to_string(j); }, cols, d)
            << "|\n";
    for (std::size_t l = 0; l < g.dims.size(); ++l) {
        const DecodeStep<double>& r = s.layers[l];
        std::vector<double> mean(L, 0.0);  // (L): the heads' mean row
        for (std::size_t h = 0; h < g.dims[l].H; ++h)
            for (std::size_t j = 0; j < L; ++j) mean[j] += r.weights(0, h, 0, j) / double(g.dims[l].H);
        std::string line = pad_right("  L" + std::to_string(l), 6);
        if (o.heatmap) {
            out << line << " |" << row_text(mean.data(), &r.mask(0, 0, 0), cols, d) << "|\n";
            continue;
        }
        std::vector<std::size_t> order(L);
        for (std::size_t j = 0; j < L; ++j) order[j] = j;
        const std::size_t n = std::min<std::size_t>(3, L);
        std::partial_sort(
            order.begin(), order.begin() + std::ptrdiff_t(n), order.end(),
            [&](std::size_t a, std::size_t b) { return mean[a] > mean[b] || (mean[a] == mean[b] && a < b); });
        line += " top keys";
        for (std::size_t k = 0; k < n; ++k)
            line += (k ? ", " : " ") + std::to_string(order[k]) + " " + quoted(o, order[k], 12) + " " +
                    format_number(mean[order[k]], 2);
        out << line << '\n';
    }
}

void write_generation_header(std::ostream& out, const Generation& g, const GenerationTextOptions& o) {
    const Dims& d = g.dims.at(0);
    const std::size_t P = g.prompt, N = g.steps.size();
    out << "attnscope decode: " << escape_control(o.source) << " (" << escape_control(o.model_type) << ", "
        << g.dims.size() << " layers, float64)\n";
    put_wrapped(out, "  ",
                "greedy generation of " + std::to_string(N) + (N == 1 ? " token" : " tokens") +
                    " with a KV cache in every layer (H=" + std::to_string(d.H) + " G=" + std::to_string(d.G) +
                    " Dk=" + std::to_string(d.Dk) + ")",
                o.width);
    std::string prompt;
    for (std::size_t i = 0; i < P; ++i)
        prompt += (i ? ", " : "") + std::to_string(i) + " " + quoted(o, i) + " " + std::to_string(g.ids[i]);
    put_wrapped(out, "  ", "prompt (" + std::to_string(P) + (P == 1 ? " token): " : " tokens): ") + prompt, o.width);
    if (o.layer) out << "  rows: layer " << *o.layer << "'s heads\n";
    if (!o.layer && !o.all_layers)
        out << "  rows: each layer's weights averaged over its heads" << (o.heatmap ? "" : ", their top keys") << '\n';
    if (o.heatmap) out << "  heatmap rows: '" << kRamp << "' = weight 0..1, " << kMasked << " = masked key\n";
    const auto k = g.steps.at(0).layers.at(o.layer.value_or(0)).k_cache_shape;
    put_wrapped(out, "",
                "prefill: " + (P == 1 ? std::string("position 0") : "positions 0.." + std::to_string(P - 1)) +
                    " in one causal run through every layer; layer " + std::to_string(o.layer.value_or(0)) +
                    "'s K cache " + shape_words(k, false),
                o.width);
}

void write_generation_step(std::ostream& out, const Generation& g, std::size_t k, const GenerationTextOptions& o) {
    const GenerationStep& s = g.steps[k];
    DecodeTextOptions d;
    d.heatmap = o.heatmap, d.decimals = o.decimals, d.width = o.width;
    out << (k == 0 ? "position " : "step t=") << s.t << ' ' << quoted(o, s.t) << (k == 0 ? " (the prompt's last)" : "")
        << ": cache " << s.t + 1 << '\n';
    if (o.layer || o.all_layers)
        write_rows(out, g, s, o, d);
    else
        write_layer_summary(out, g, s, o, d);
    char p[32];
    std::snprintf(p, sizeof p, "%.4f", s.next.probability);
    out << "  next: " << quoted(o, s.t + 1) << " (id " << s.next.id << "), p " << p << '\n';
    const auto [worst, diff] = worst_layer(s);
    out << "  max |diff| " << sci(diff.max());
    if (diff.max() > 0) out << " (layer " << worst << " " << worst_stage(diff) << ")";
    out << "; logits " << sci(s.logits_diff) << '\n';
}

void write_generation_summary(std::ostream& out, const Generation& g, const GenerationTextOptions& o) {
    const std::size_t N = g.steps.size();
    std::string ids;
    for (std::size_t i = g.prompt; i < g.ids.size(); ++i) ids += (ids.empty() ? "" : ", ") + std::to_string(g.ids[i]);
    const std::string what = "generated " + std::to_string(N) + (N == 1 ? " token: " : " tokens: ");
    if (o.text) put_wrapped(out, "", what + "'" + escape_control(*o.text) + "'", o.width);
    put_wrapped(out, o.text ? "  " : "", (o.text ? "ids " : what + "ids ") + ids, o.width);
    DecodeDiff most;  // each stage's largest, over every step and layer
    double logits = 0;
    for (const GenerationStep& s : g.steps) {
        logits = std::max(logits, s.logits_diff);
        for (const DecodeStep<double>& r : s.layers) {
            most.weights = std::max(most.weights, r.diff.weights),
            most.context = std::max(most.context, r.diff.context);
            most.output = std::max(most.output, r.diff.output);
        }
    }
    const bool same = most.max() <= 1e-12;
    put_wrapped(out, "",
                "max |diff| vs the full forward (" + std::to_string(g.ids.size()) + " tokens; " +
                    (same ? "the cache gives the same rows):" : "more than rounding):"),
                o.width);
    put_wrapped(out, "  ", diff_words(most, false) + "; logits " + sci(logits), o.width);
}

void put_generation_layer(JsonWriter& w, const DecodeStep<double>& r, std::size_t layer) {
    w.begin_object().key("layer").value(layer);
    const Tensor<double, 2> rows = xt::view(r.weights, 0, xt::all(), 0, xt::all());  // (H, L)
    put_tensor(w.key("weights"), rows, true);
    put_diffs(w, r.diff, false);
    w.end_object();
}

void put_generation_step(JsonWriter& w, const Generation& g, const GenerationStep& s, const GenerationTextOptions& o) {
    w.newline().begin_object().key("t").value(s.t).key("id").value(g.ids[s.t]).key("token").value(o.labels[s.t]);
    w.key("cache_length").value(s.t + 1);
    w.key("next").begin_object().key("id").value(s.next.id).key("token").value(o.labels[s.t + 1]);
    w.key("probability").value(s.next.probability).end_object();
    w.key("layers").begin_array();
    for (std::size_t l : shown_layers(g, o)) put_generation_layer(w, s.layers[l], l);
    w.end_array();
    const auto [worst, diff] = worst_layer(s);
    w.key("logits_max_abs_diff").value(s.logits_diff).key("max_abs_diff").value(std::max(diff.max(), s.logits_diff));
    w.end_object();
}

// Tokens [from, to) as tokens --json spells them: {"id", "piece" (the vocabulary's, null
// when unknown), "text" (as shown)}.
void put_pieces(JsonWriter& w, const Generation& g, const GenerationTextOptions& o, std::size_t from, std::size_t to) {
    w.key("pieces").begin_array();
    for (std::size_t i = from; i < to; ++i) {
        w.begin_object().key("id").value(g.ids[i]).key("piece");
        i < o.pieces.size() && o.pieces[i] ? w.value(*o.pieces[i]) : w.value(nullptr);
        w.key("text").value(o.labels[i]).end_object();
    }
    w.end_array();
}

}  // namespace

void write_generation_text(std::ostream& out, const Generation& g, const GenerationTextOptions& o) {
    write_generation_header(out, g, o);
    for (std::size_t k = 0; k < g.steps.size(); ++k) write_generation_step(out, g, k, o);
    write_generation_summary(out, g, o);
}

void write_generation_json(std::ostream& out, const Generation& g, const GenerationTextOptions& o) {
    JsonWriter w(out);
    w.begin_object().key("schema").value("attnscope.generate/1").key("source").value(o.source);
    w.key("model_type").value(o.model_type).key("dtype").value("float64").key("layers").value(g.dims.size());
    const auto ids = [&](std::size_t from, std::size_t to) {
        return std::vector<std::size_t>(g.ids.begin() + std::ptrdiff_t(from), g.ids.begin() + std::ptrdiff_t(to));
    };
    const auto labels = [&](std::size_t from, std::size_t to) {
        return std::vector<std::string>(o.labels.begin() + std::ptrdiff_t(from), o.labels.begin() + std::ptrdiff_t(to));
    };
    w.key("prompt").begin_object().key("length").value(g.prompt).key("ids").list(ids(0, g.prompt));
    w.key("tokens").list(labels(0, g.prompt));
    put_pieces(w, g, o, 0, g.prompt);
    w.end_object();
    std::vector<double> probabilities;
    for (const GenerationStep& s : g.steps) probabilities.push_back(s.next.probability);
    w.key("generated").begin_object().key("ids").list(ids(g.prompt, g.ids.size()));
    w.key("tokens").list(labels(g.prompt, g.ids.size()));
    put_pieces(w, g, o, g.prompt, g.ids.size());
    w.key("probabilities").list(probabilities).key("text");
    o.text ? w.value(*o.text) : w.value(nullptr);
    w.end_object().key("shown_layers").list(shown_layers(g, o)).key("steps").begin_array();
    for (const GenerationStep& s : g.steps) put_generation_step(w, g, s, o);
    w.end_array().key("max_abs_diff").value(g.max_diff).end_object();
    out << '\n';
}

template void write_decode_npz<float>(const std::string&, const Problem<float>&, const DecodeRun<float>&, bool);
template void write_decode_npz<double>(const std::string&, const Problem<double>&, const DecodeRun<double>&, bool);
template void write_decode_text<float>(std::ostream&, const Problem<float>&, const DecodeRun<float>&,
                                       const DecodeTextOptions&);
template void write_decode_text<double>(std::ostream&, const Problem<double>&, const DecodeRun<double>&,
                                        const DecodeTextOptions&);
template void write_decode_json<float>(std::ostream&, const Problem<float>&, const DecodeRun<float>&,
                                       const std::string&);
template void write_decode_json<double>(std::ostream&, const Problem<double>&, const DecodeRun<double>&,
                                        const std::string&);

}  // namespace attnscope
