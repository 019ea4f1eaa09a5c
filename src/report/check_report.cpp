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
    if (s.match) {
        out << "matches  " << theirs << ", max |Δ| " << num(s.max_abs_diff) << '\n';
        if (s.large_negative_fill)
            out << pad
                << wrap(std::to_string(s.large_negative_fill) +
                            " masked cells hold a large negative number, not -inf: softmax gives 0 alike",
                        pad.size())
                << '\n';
        return;
    }
    out << "differs  " << theirs << '\n';
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
void put_measure(std::ostream& out, double v) {
    text::put_json_number(out, std::isfinite(v) ? v : std::numeric_limits<double>::max());
}

void put_index(std::ostream& out, const std::vector<std::size_t>& v) {
    out << '[';
    for (std::size_t k = 0; k < v.size(); ++k) out << (k ? "," : "") << v[k];
    out << ']';
}

void put_strings(std::ostream& out, const std::vector<std::string>& v) {
    out << '[';
    for (std::size_t k = 0; k < v.size(); ++k) {
        if (k) out << ',';
        text::put_json_string(out, v[k]);
    }
    out << ']';
}

void put_stage_json(std::ostream& out, const StageCheck& s) {
    text::put_json_string(out, s.name);
    out << ":{\"given\":" << (s.given ? "true" : "false");
    if (!s.given) {
        out << ",\"match\":null,\"max_abs_diff\":null,\"at\":null,\"axes\":null}";
        return;
    }
    out << ",\"match\":" << (s.match ? "true" : "false") << ",\"max_abs_diff\":";
    put_measure(out, s.max_abs_diff);
    out << ",\"at\":";
    if (s.at.empty())
        out << "null";
    else
        put_index(out, s.at);
    out << ",\"axes\":";
    text::put_json_string(out, s.axes);
    out << ",\"name\":";
    text::put_json_string(out, s.their_name);
    out << ",\"dtype\":";
    text::put_json_string(out, s.dtype);
    out << ",\"shape\":";
    put_index(out, s.their_shape);
    out << ",\"at_reference\":";
    if (s.at_ref.empty())
        out << "null";
    else
        put_index(out, s.at_ref);
    out << ",\"precision\":";
    text::put_json_string(out, s.precision);
    out << ",\"relative_error\":";
    put_measure(out, s.relative_error);
    out << ",\"rtol_needed\":";
    put_measure(out, s.rtol_needed);
    out << ",\"rounding_level\":" << (s.rounding_level ? "true" : "false");
    out << ",\"mismatched_cells\":" << s.mismatched << ",\"nonfinite_cells\":" << s.nonfinite
        << ",\"cells\":" << s.cells << ",\"tolerance\":{\"atol\":";
    text::put_json_number(out, s.tol.atol);
    out << ",\"rtol\":";
    text::put_json_number(out, s.tol.rtol);
    out << "}}";
}

void put_diagnosis_json(std::ostream& out, const Diagnosis& d) {
    out << "{\"id\":";
    text::put_json_string(out, d.id);
    out << ",\"stage\":";
    text::put_json_string(out, stage_name(d.stage));
    out << ",\"max_abs_diff\":";
    put_measure(out, d.max_abs_diff);
    out << ",\"variant\":";
    text::put_json_string(out, d.variant);
    out << ",\"title\":";
    text::put_json_string(out, d.title);
    out << ",\"explanation\":";
    text::put_json_string(out, d.explanation);
    out << ",\"fix\":";
    text::put_json_string(out, d.fix);
    out << ",\"also_reproduces\":";
    put_strings(out, d.also);
    out << ",\"does_not_reproduce\":";
    put_strings(out, d.not_later);
    out << '}';
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
    out << "{\"verdict\":" << (r.matches() ? "\"match\"" : "\"mismatch\"") << ",\"theirs\":";
    text::put_json_string(out, theirs);
    out << ",\"against\":";
    text::put_json_string(out, ref.source);
    out << ",\"inputs_checked\":";
    put_strings(out, r.inputs);
    out << ",\"stages\":{";
    for (std::size_t k = 0; k < r.stages.size(); ++k) {
        if (k) out << ',';
        put_stage_json(out, r.stages[k]);
    }
    out << "},\"first_divergent_stage\":";
    if (r.first_divergent)
        text::put_json_string(out, stage_name(*r.first_divergent));
    else
        out << "null";
    out << ",\"diagnosis\":[";
    for (std::size_t k = 0; k < r.diagnosis.size(); ++k) {
        if (k) out << ',';
        put_diagnosis_json(out, r.diagnosis[k]);
    }
    out << "],\"where\":[";
    for (std::size_t k = 0; k < r.where.size(); ++k) {
        out << (k ? "," : "") << "{\"kind\":";
        text::put_json_string(out, r.where[k].kind);
        out << ",\"detail\":";
        text::put_json_string(
            out, spell_fields(r.where[k].detail, [](std::string_view f) { return "--" + std::string(f); }));
        out << '}';
    }
    out << "],\"note\":";
    text::put_json_string(out, r.no_diagnosis);
    out << "}\n";
}

}  // namespace attnscope
