// A KV-cache decoding as text and as JSON (see decode_report.hpp).
#include "attnscope/report/decode_report.hpp"

#include <cstdio>
#include <ostream>
#include <string>
#include <vector>

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

std::string sci(double v) {
    if (v == 0) return "0";
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1e", v);
    return buf;
}

// The token of position t of batch item b, escaped and clipped, or "".
template <typename T>
std::string token(const Problem<T>& p, std::size_t b, std::size_t t) {
    if (b >= p.query_tokens.size() || t >= p.query_tokens[b].size()) return "";
    return clip_label(escape_control(p.query_tokens[b][t]), 16);
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

// One weight row as numbers, or as a heatmap row; at most `room` columns: the ends of a
// long row around "…".
template <typename T>
std::string row_text(const T* w, const bool* visible, std::size_t L, std::size_t room, const DecodeTextOptions& o) {
    const std::size_t cell = o.heatmap ? 1 : std::size_t(o.decimals) + 3;  // "0.1234" + a space
    const std::size_t fit = std::max<std::size_t>(room / cell, 3);
    const std::size_t edge = (fit - 1) / 2;
    std::string s;
    for (std::size_t j : shown(L, fit, edge)) {
        if (j == kGap) {
            s += o.heatmap ? "…" : " …";
            continue;
        }
        if (o.heatmap) {
            if (!visible[j])
                s += kMasked;
            else
                s += kRamp[std::size_t(std::lround(std::clamp(double(w[j]), 0.0, 1.0) * 9))];
        } else {
            s += " " + format_number(double(w[j]), o.decimals);
        }
    }
    return s;
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
    put_fitting(out, "  FLOPs " + grouped(run.prefill_flops), "; ",
                "max |diff| vs the full run " + sci(run.prefill_diff.max()), o.width);
}

template <typename T>
void write_step(std::ostream& out, const Problem<T>& p, const DecodeStep<T>& s, const DecodeTextOptions& o) {
    const Dims& d = p.dims;
    std::string head = "step t=" + std::to_string(s.t);
    const std::string tok = token(p, 0, s.t);
    if (!tok.empty()) head += " '" + tok + "'";
    if (s.query_position != (long long)s.t) head += " (query at " + std::to_string(s.query_position) + ")";
    put_fitting(out, head + ": cache " + std::to_string(s.cache_length), ", ",
                "K " + shape_words(s.k_cache_shape, p.batched) + ", V " + shape_words(s.v_cache_shape, p.batched),
                o.width);
    const std::size_t L = s.weights.shape(3);
    for (std::size_t b = 0; b < d.B; ++b)
        for (std::size_t h = 0; h < d.H; ++h) {
            std::string label =
                "  " + (p.batched ? "b" + std::to_string(b) + " " : std::string()) + "h" + std::to_string(h);
            label = pad_right(label, p.batched ? 9 : 6);
            std::string line = label + (o.heatmap ? " |" : "");
            line += row_text(&s.weights(b, h, 0, 0), &s.mask(b, 0, 0), L,
                             o.width - display_width(line) - (p.sinks ? 12 : 1), o);
            if (o.heatmap) line += "|";
            if (p.sinks) line += "  sink " + format_number(double(s.sink_weight(b, h, 0)), 2);
            out << line << '\n';
        }
    for (std::size_t b : s.fully_masked)
        out << "  " << (p.batched ? "b" + std::to_string(b) + ": " : "") << "no key visible: weights 0\n";
    const double ratio = s.flops_cached ? double(s.flops_recompute) / double(s.flops_cached) : 0;
    char r[32];
    std::snprintf(r, sizeof r, "%.1fx", ratio);
    put_fitting(
        out,
        "  FLOPs " + grouped(s.flops_cached) + " cached, " + grouped(s.flops_recompute) + " recomputed (" + r + ")",
        "; ", "max |diff| " + sci(s.diff.max()), o.width);
}

template <typename T>
void write_summary(std::ostream& out, const DecodeRun<T>& run, std::size_t width) {
    std::uint64_t cached = run.prefill_flops, recompute = run.prefill_flops;
    std::size_t worst = 0;
    for (std::size_t k = 0; k < run.steps.size(); ++k) {
        cached += run.steps[k].flops_cached;
        recompute += run.steps[k].flops_recompute;
        if (run.steps[k].diff.max() > run.steps[worst].diff.max()) worst = k;
    }
    put_fitting(out,
                (run.prefill ? "prefill + " : "") + std::to_string(run.steps.size()) +
                    (run.steps.size() == 1 ? " step" : " steps") + ": FLOPs " + grouped(cached) + " with the cache,",
                " ", grouped(recompute) + " recomputing each prefix", width);
    const double tol = sizeof(T) == 4 ? 1e-5 : 1e-12;
    if (run.bug == DecodeBug::none) {
        out << "max |diff| vs the full causal run: " << sci(run.max_diff)
            << (run.max_diff <= tol ? " (the cache gives the same rows)\n" : " (more than rounding)\n");
    } else {
        out << "bug " << bug_name(run.bug) << ": drifts from the full run by up to " << sci(run.max_diff);
        if (!run.steps.empty()) out << " (step t=" << run.steps[worst].t << ")";
        out << '\n';
    }
}

// ---- JSON ---------------------------------------------------------------------------------

void put_shape(std::ostream& out, const std::vector<std::size_t>& v) {
    out << '[';
    for (std::size_t k = 0; k < v.size(); ++k) out << (k ? "," : "") << v[k];
    out << ']';
}

// Nested lists of a row-major array of `shape` (the batch axis, of size 1, dropped for a 2-D x).
template <typename V>
void put_array(std::ostream& out, const V* data, std::vector<std::size_t> shape, bool batched) {
    if (!batched) shape.erase(shape.begin());
    std::size_t n = 1;
    for (std::size_t s : shape) n *= s;
    const std::size_t nd = shape.size();
    std::vector<std::size_t> idx(nd, 0);
    if (n == 0) {
        for (std::size_t k = 0; k < nd; ++k) out << '[';
        for (std::size_t k = 0; k < nd; ++k) out << ']';
        return;
    }
    for (std::size_t k = 0; k < n; ++k) {
        std::size_t opens = 0;
        for (std::size_t a = nd; a-- > 0 && idx[a] == 0;) ++opens;
        if (k > 0 && opens < nd) out << ',';
        for (std::size_t a = 0; a < opens; ++a) out << '[';
        if constexpr (std::is_same_v<V, bool>)
            out << (data[k] ? "true" : "false");
        else
            put_json_number(out, data[k]);
        for (std::size_t a = nd; a-- > 0;) {
            if (++idx[a] < shape[a]) break;
            idx[a] = 0;
            out << ']';
        }
    }
}

template <typename E>
void put_tensor(std::ostream& out, const E& t, bool batched) {
    put_array(out, t.data(), std::vector<std::size_t>(t.shape().begin(), t.shape().end()), batched);
}

void put_diffs(std::ostream& out, const DecodeDiff& d, bool sinks) {
    out << "\"max_abs_diff\":";
    put_json_number(out, d.max());
    out << ",\"diffs\":{\"weights\":";
    put_json_number(out, d.weights);
    if (sinks) {
        out << ",\"sink_weight\":";
        put_json_number(out, d.sink_weight);
    }
    out << ",\"context\":";
    put_json_number(out, d.context);
    out << ",\"output\":";
    put_json_number(out, d.output);
    out << '}';
}

template <typename T>
void put_json_config(std::ostream& out, const Problem<T>& p) {
    const Dims& d = p.dims;
    out << "\"config\":{\"B\":" << d.B << ",\"T\":" << d.Tq << ",\"Dm\":" << d.Dm << ",\"H\":" << d.H
        << ",\"G\":" << d.G << ",\"Dk\":" << d.Dk << ",\"Dv\":" << d.Dv << ",\"Dout\":" << d.Dout
        << ",\"batched\":" << (p.batched ? "true" : "false") << ",\"causal\":true,\"scale\":";
    put_json_number(out, p.scale);
    out << ",\"scale_source\":";
    text::put_json_string(out, p.scale_source);
    out << ",\"rope\":";
    if (p.rope_dim) {
        out << "{\"dim\":" << p.rope_dim << ",\"base\":";
        put_json_number(out, p.spec.rope->base);
        out << ",\"style\":\"" << (p.spec.rope->style == RopeStyle::half ? "half" : "interleaved") << "\"}";
    } else {
        out << "null";
    }
    out << ",\"alibi\":" << (p.alibi_slopes ? "true" : "false") << ",\"window\":";
    if (p.mask.window())
        out << *p.mask.window();
    else
        out << "null";
    out << ",\"softcap\":";
    if (p.spec.softcap)
        put_json_number(out, *p.spec.softcap);
    else
        out << "null";
    out << ",\"sinks\":" << (p.sinks ? "true" : "false")
        << ",\"key_padding\":" << (p.mask.has_padding() ? "true" : "false")
        << ",\"has_W_O\":" << (p.W_O ? "true" : "false") << '}';
}

template <typename T>
void put_json_step(std::ostream& out, const Problem<T>& p, const DecodeStep<T>& s) {
    out << "{\"t\":" << s.t << ",\"token\":";
    if (p.query_tokens.empty()) {
        out << "null";
    } else if (!p.batched) {
        text::put_json_string(out, p.query_tokens[0][s.t]);
    } else {
        out << '[';
        for (std::size_t b = 0; b < p.dims.B; ++b) {
            out << (b ? "," : "");
            text::put_json_string(out, p.query_tokens[b][s.t]);
        }
        out << ']';
    }
    out << ",\"query_position\":" << s.query_position << ",\"cache_length\":" << s.cache_length
        << ",\"k_cache_shape\":";
    put_shape(out, shown_shape(s.k_cache_shape, p.batched));
    out << ",\"v_cache_shape\":";
    put_shape(out, shown_shape(s.v_cache_shape, p.batched));
    out << ",\"mask\":";
    put_tensor(out, s.mask, p.batched);
    out << ",\"weights\":";
    put_tensor(out, s.weights, p.batched);
    if (p.sinks) {
        out << ",\"sink_weight\":";
        put_tensor(out, s.sink_weight, p.batched);
    }
    out << ",\"context\":";
    put_tensor(out, s.context, p.batched);
    out << ",\"output\":";
    put_tensor(out, s.output, p.batched);
    out << ",\"fully_masked\":";
    put_shape(out, s.fully_masked);
    out << ",\"flops_cached\":" << s.flops_cached << ",\"flops_recompute\":" << s.flops_recompute << ',';
    put_diffs(out, s.diff, p.sinks.has_value());
    out << '}';
}

}  // namespace

template <typename T>
void write_decode_text(std::ostream& out, const Problem<T>& p, const DecodeRun<T>& run,
                       const DecodeTextOptions& options) {
    write_header(out, p, run, options);
    for (const DecodeStep<T>& s : run.steps) write_step(out, p, s, options);
    write_summary(out, run, options.width);
}

template <typename T>
void write_decode_json(std::ostream& out, const Problem<T>& p, const DecodeRun<T>& run, const std::string& source) {
    out << "{\"source\":";
    text::put_json_string(out, source);
    out << ",\"dtype\":\"" << (sizeof(T) == 4 ? "float32" : "float64") << "\",";
    put_json_config(out, p);
    out << ",\"bug\":";
    if (run.bug == DecodeBug::none)
        out << "null";
    else
        out << '"' << bug_name(run.bug) << '"';
    out << ",\"prefill\":{\"length\":" << run.prefill << ",\"k_cache_shape\":";
    put_shape(out, shown_shape(run.prefill_k_shape, p.batched));
    out << ",\"v_cache_shape\":";
    put_shape(out, shown_shape(run.prefill_v_shape, p.batched));
    out << ",\"flops\":" << run.prefill_flops << ',';
    put_diffs(out, run.prefill_diff, p.sinks.has_value());
    out << "},\"steps\":[";
    for (std::size_t k = 0; k < run.steps.size(); ++k) {
        out << (k ? ",\n" : "\n");
        put_json_step(out, p, run.steps[k]);
    }
    out << "],\"max_abs_diff\":";
    put_json_number(out, run.max_diff);
    out << "}\n";
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
