// The result of `attnscope check`, as text and as JSON.
#include "attnscope/report/check_report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "attnscope/base/errors.hpp"
#include "attnscope/base/json_writer.hpp"
#include "attnscope/base/text.hpp"
#include "text_util.hpp"

namespace attnscope {
namespace {

std::string num(double v) {
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3g", v);
    return buf;
}

// Theirs and the reference's numbers with as many digits as it takes to tell them apart
// (3 to 17): "0.58312, 0.58315", not "0.583, 0.583".
std::pair<std::string, std::string> distinct_nums(double a, double b) {
    char x[40], y[40];
    for (int digits = 3; digits <= 17; ++digits) {
        std::snprintf(x, sizeof x, "%.*g", digits, a);
        std::snprintf(y, sizeof y, "%.*g", digits, b);
        if (std::string_view(x) != std::string_view(y)) break;
    }
    return {std::isfinite(a) ? x : num(a), std::isfinite(b) ? y : num(b)};
}

// A number of two significant digits above v: 3.14e-5 -> "3.2e-05" (a tolerance that
// accepts a largest difference of v, with room for the rounding of |Δ| / |ref|).
std::string round_up(double v) {
    const double step = std::pow(10.0, std::floor(std::log10(v)) - 1);
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2g", std::ceil(v * (1 + 1e-9) / step) * step);
    return buf;
}

std::string index_text(const std::vector<std::size_t>& at) {
    std::string out = "[";
    for (std::size_t k = 0; k < at.size(); ++k) out += (k ? ", " : "") + std::to_string(at[k]);
    return out + "]";
}

// "batch 0, head 1, query 2, key 3" for an index of the reference stage.
std::string cell_words(const StageCheck& s) {
    std::string out;
    for (std::size_t k = 0; k < s.at_ref.size() && k < s.ref_axes.size(); ++k) {
        const std::string& a = s.ref_axes[k];
        const std::string word = a == "B"    ? "batch"
                                 : a == "H"  ? "head"
                                 : a == "G"  ? "K/V head"
                                 : a == "Tq" ? "query"
                                 : a == "Tk" ? "key"
                                             : "feature";
        out += (out.empty() ? "" : ", ") + word + " " + std::to_string(s.at_ref[k]);
    }
    return out;
}

std::string tolerance_text(const Tolerance& t) {
    if (t.atol == t.rtol) return num(t.atol) + " · max(1, |ref|)";
    return "max(" + num(t.atol) + ", " + num(t.rtol) + " · |ref|)";
}

// `words` in lines of at most `width` columns, each line after the first starting with `indent`.
std::string wrap(const std::string& words, std::size_t indent, std::size_t width = 80) {
    std::string out, line;
    std::size_t start = 0;
    while (start < words.size()) {
        std::size_t end = words.find(' ', start);
        if (end == std::string::npos) end = words.size();
        const std::string word = words.substr(start, end - start);
        if (!line.empty() && indent + text::display_width(line) + 1 + text::display_width(word) > width) {
            out += line + "\n" + std::string(indent, ' ');
            line.clear();
        }
        line += (line.empty() ? "" : " ") + word;
        start = end + 1;
    }
    return out + line;
}

std::string flag_of_field(std::string_view f) { return "--" + std::string(f); }

void write_stage_line(std::ostream& out, const StageCheck& s, std::size_t width) {
    out << "  " << text::pad_right(s.name, width) << "  ";
    if (!s.given) {
        out << "not given\n";
        return;
    }
    const std::string theirs = escape_control(clip_fragment(s.their_name, 40)) + " (" + s.axes + ", " + s.dtype + ")";
    const std::string pad(width + 4, ' ');
    const auto reading = [&] {
        if (!s.reading.empty()) out << pad << wrap(s.reading, pad.size()) << '\n';
    };
    if (s.match) {
        out << "matches  " << theirs << ", max |Δ| " << num(s.max_abs_diff) << '\n';
        reading();
        if (s.large_negative_fill)
            out << pad
                << wrap(std::to_string(s.large_negative_fill) +
                            " masked cells hold a large negative number, not -inf: softmax gives 0 alike",
                        pad.size())
                << '\n';
        return;
    }
    out << "differs  " << theirs << '\n';
    reading();
    const auto [u, r] = distinct_nums(s.theirs_at, s.ref_at);
    out << pad
        << wrap("max |Δ| " + num(s.max_abs_diff) + " at " + index_text(s.at) + " (" + cell_words(s) + "): theirs " + u +
                    ", reference " + r,
                pad.size())
        << '\n';
    std::string counts = "relative error " + num(s.relative_error) + "; " + std::to_string(s.mismatched) + " of " +
                         std::to_string(s.cells) + " cells differ";
    if (s.nonfinite)
        counts +=
            ", " + std::to_string(s.nonfinite) + (s.nonfinite == 1 ? " is" : " are") + " ±inf or NaN on one side only";
    out << pad << wrap(counts, pad.size()) << '\n';
    if (s.rounding_level)
        out << pad
            << wrap("at " + s.precision + "'s rounding level (|Δ| <= " + num(s.rtol_needed) +
                        " · max(1, |ref|)): if theirs was computed in " + s.precision + ", " +
                        spell_fields("{rtol} ", flag_of_field) + round_up(s.rtol_needed) + " accepts it",
                    pad.size())
            << '\n';
}

void write_diagnosis_text(std::ostream& out, const CheckResult& r) {
    const std::string first = stage_name(*r.first_divergent);
    if (!r.diagnosis.empty()) {
        out << "diagnosis: " << (r.diagnosis.size() == 1 ? "this mistake reproduces " : "these mistakes reproduce ")
            << first << " (best first)\n";
        std::size_t n = 0;
        for (const Diagnosis& d : r.diagnosis) {
            out << "  " << ++n << ". " << d.id << ": " << d.title;
            if (!d.variant.empty()) out << " (" << d.variant << ")";
            std::string line = first + " reproduced within " + num(d.max_abs_diff);
            if (!d.also.empty()) {
                std::string also;
                for (const auto& s : d.also) also += (also.empty() ? "" : ", ") + s;
                line += "; so are " + also;
            }
            if (!d.not_later.empty()) {
                std::string no;
                for (const auto& s : d.not_later) no += (no.empty() ? "" : ", ") + s;
                line += "; not " + no + " (another mistake later?)";
            }
            out << "\n     " << wrap(line, 5) << "\n     " << wrap(d.explanation, 5) << "\n     "
                << wrap("Fix: " + d.fix, 5) << '\n';
        }
        return;
    }
    out << "diagnosis: no catalogued mistake reproduces " << first;
    if (!r.no_diagnosis.empty()) out << " (" << r.no_diagnosis << ")";
    out << ".\n";
    if (!r.where.empty()) out << "  where the difference is:\n";
    // A finding names an option by its field ("{axes}"): spelled here as the flag.
    const auto flag = [](std::string_view f) { return "--" + std::string(f); };
    for (const Finding& f : r.where) out << "  - " << wrap(escape_control(spell_fields(f.detail, flag)), 4) << '\n';
}

// A difference as a JSON number, always: JSON has no infinity, so an infinite one (±inf or
// NaN on one side only) is the largest double, which every threshold rejects.
JsonWriter& measure(JsonWriter& w, double v) {
    return w.value(std::isfinite(v) ? v : std::numeric_limits<double>::max());
}

// A list of indices, or null when it is empty.
JsonWriter& index_or_null(JsonWriter& w, const std::vector<std::size_t>& v) {
    return v.empty() ? w.value(nullptr) : w.list(v);
}

void put_stage_json(JsonWriter& w, const StageCheck& s) {
    w.key(s.name).begin_object().key("given").value(s.given);
    if (!s.given) {
        for (const char* k : {"match", "max_abs_diff", "at", "axes"}) w.key(k).value(nullptr);
        w.end_object();
        return;
    }
    measure(w.key("match").value(s.match).key("max_abs_diff"), s.max_abs_diff).key("at");
    index_or_null(w, s.at).key("axes").value(s.axes).key("name").value(s.their_name).key("reading").value(s.reading);
    w.key("dtype").value(s.dtype).key("shape").list(s.their_shape).key("at_reference");
    index_or_null(w, s.at_ref).key("precision").value(s.precision);
    measure(w.key("relative_error"), s.relative_error);
    measure(w.key("rtol_needed"), s.rtol_needed).key("rounding_level").value(s.rounding_level);
    w.key("mismatched_cells").value(s.mismatched).key("nonfinite_cells").value(s.nonfinite);
    w.key("cells").value(s.cells).key("tolerance").begin_object();
    w.key("atol").value(s.tol.atol).key("rtol").value(s.tol.rtol).end_object().end_object();
}

void put_diagnosis_json(JsonWriter& w, const Diagnosis& d) {
    w.begin_object().key("id").value(d.id).key("stage").value(stage_name(d.stage));
    measure(w.key("max_abs_diff"), d.max_abs_diff).key("variant").value(d.variant).key("title").value(d.title);
    w.key("explanation").value(d.explanation).key("fix").value(d.fix);
    w.key("also_reproduces").list(d.also).key("does_not_reproduce").list(d.not_later).end_object();
}

}  // namespace

void write_check_text(std::ostream& out, const CheckResult& r, const TraceView& ref, const std::string& theirs) {
    out << "attnscope check: " << escape_control(theirs) << "\n  against   " << escape_control(ref.source) << " ("
        << ref.dims.H << (ref.dims.H == 1 ? " head" : " heads") << "; the reference in float64)\n";
    std::vector<std::string> tolerances;
    for (const auto& s : r.stages) {
        if (!s.given) continue;
        const std::string t = "|Δ| <= " + tolerance_text(s.tol) + " (" + s.dtype +
                              (s.precision == s.dtype ? "" : ", computed in " + s.precision) + ")";
        if (std::find(tolerances.begin(), tolerances.end(), t) == tolerances.end()) tolerances.push_back(t);
    }
    for (const auto& t : tolerances) out << "  tolerance " << t << '\n';
    if (!r.inputs.empty()) {
        std::string names;
        for (const auto& n : r.inputs) names += (names.empty() ? "" : ", ") + n;
        out << "  inputs    " << escape_control(names) << " equal to the bundle's\n";
    }
    std::size_t width = 0;
    for (const auto& s : r.stages) width = std::max(width, text::display_width(s.name));
    for (const auto& s : r.stages) write_stage_line(out, s, width);
    if (r.matches()) {
        out << "verdict: match (every stage given matches the reference)\n";
        return;
    }
    out << "first divergent stage: " << stage_name(*r.first_divergent) << '\n';
    write_diagnosis_text(out, r);
}

void write_check_json(std::ostream& out, const CheckResult& r, const TraceView& ref, const std::string& theirs) {
    const auto flag = [](std::string_view f) { return "--" + std::string(f); };
    JsonWriter w(out);
    w.begin_object().key("schema").value("attnscope.check/1").key("verdict").value(r.matches() ? "match" : "mismatch");
    w.key("theirs").value(theirs).key("against").value(ref.source).key("inputs_checked").list(r.inputs);
    w.key("stages").begin_object();
    for (const auto& s : r.stages) put_stage_json(w, s);
    w.end_object().key("first_divergent_stage");
    r.first_divergent ? w.value(stage_name(*r.first_divergent)) : w.value(nullptr);
    w.key("diagnosis").begin_array();
    for (const Diagnosis& d : r.diagnosis) put_diagnosis_json(w, d);
    w.end_array().key("where").begin_array();
    for (const Finding& f : r.where)
        w.begin_object().key("kind").value(f.kind).key("detail").value(spell_fields(f.detail, flag)).end_object();
    w.end_array().key("note").value(r.no_diagnosis).end_object();
    out << '\n';
}

}  // namespace attnscope
