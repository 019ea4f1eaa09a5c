// `run --sweep NAME=V1,V2,...` (docs/classroom.md, "Sweeps"): the run once per value of d_k,
// the scale or the temperature, and one table of what the weight rows do (analysis/sweep.hpp).
// d_k is varied by drawing W_Q and W_K of that width with make's generator (splitmix64,
// seed kSweepSeed), x and every other input as given, so that the sweep is reproducible.
#include "attnscope/analysis/sweep.hpp"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "attnscope/base/errors.hpp"
#include "attnscope/base/text.hpp"
#include "attnscope/core/attention.hpp"
#include "attnscope/core/view.hpp"
#include "attnscope/io/write.hpp"
#include "attnscope/report/report.hpp"
#include "attnscope/report/sweep_report.hpp"
#include "run.hpp"
#include "run_output.hpp"
#include "splitmix.hpp"

namespace attnscope::cli {
namespace {

constexpr std::size_t kMaxSweepValues = 16;
constexpr std::size_t kMaxSweepDk = 65536;
constexpr std::uint64_t kSweepSeed = 0;

struct SweepPlan {
    std::string over;  // dk, scale, temperature
    std::vector<std::string> texts;
    std::vector<double> values;
};

[[noreturn]] void bad_sweep(const std::string& text, const std::string& why) {
    throw UsageError("--sweep " + escape_control(text) + ": " + why);
}

double sweep_value(const std::string& text, const std::string& over, const std::string& v) {
    if (over == "dk") {
        std::size_t n = 0;
        const auto r = std::from_chars(v.data(), v.data() + v.size(), n);
        if (r.ec != std::errc() || r.ptr != v.data() + v.size() || n < 1 || n > kMaxSweepDk)
            bad_sweep(text, "expected whole numbers 1.." + std::to_string(kMaxSweepDk) + " for dk, found '" +
                                escape_control(v) + "'");
        return double(n);
    }
    if (over == "scale" && v == "none") return 1;
    char* end = nullptr;
    const double x = std::strtod(v.c_str(), &end);
    if (v.empty() || end != v.c_str() + v.size() || !std::isfinite(x) || (over == "temperature" && x <= 0))
        bad_sweep(text, "expected " + std::string(over == "scale" ? "finite numbers (or none)" : "numbers above 0") +
                            " for " + over + ", found '" + escape_control(v) + "'");
    return x;
}

SweepPlan parse_sweep(const std::string& text) {
    SweepPlan p;
    const std::size_t eq = text.find('=');
    p.over = text.substr(0, eq);
    if (eq == std::string::npos || (p.over != "dk" && p.over != "scale" && p.over != "temperature"))
        bad_sweep(text, "expected NAME=V1,V2,... with NAME dk, scale or temperature");
    std::string item;
    for (std::size_t k = eq + 1; k <= text.size(); ++k) {
        if (k < text.size() && text[k] != ',') {
            item += text[k];
            continue;
        }
        if (item.empty()) bad_sweep(text, "expected a value before each comma and at the end");
        p.values.push_back(sweep_value(text, p.over, item));
        p.texts.push_back(item);
        item.clear();
    }
    if (p.values.size() > kMaxSweepValues)
        bad_sweep(text,
                  "at most " + std::to_string(kMaxSweepValues) + " values, found " + std::to_string(p.values.size()));
    return p;
}

// A (rows, cols) weight matrix of the sweep's generator, in `layout` ((cols, rows) for torch).
Array drawn(SplitMix64& rng, std::size_t rows, std::size_t cols, Layout layout, const std::string& origin) {
    Array a;
    a.dtype = "float64";
    a.origin = origin;
    a.shape = layout == Layout::torch ? std::vector<std::size_t>{cols, rows} : std::vector<std::size_t>{rows, cols};
    a.values.resize(rows * cols);
    const double s = std::sqrt(double(rows));
    for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t c = 0; c < cols; ++c)
            a.values[layout == Layout::torch ? c * rows + r : r * cols + c] = rng.symmetric() / s;
    return a;
}

// `b` with W_Q (Dm, H·dk) and W_K (Dkv, G·dk) drawn from splitmix64(kSweepSeed), W_Q first,
// row by row, each number / sqrt(rows): make's draw of W_Q and W_K (docs/classroom.md, "The
// numbers"). The query and key biases go: they have the old width.
Bundle with_dk(const Bundle& b, const Spec& spec, std::size_t dk, std::size_t limit) {
    const auto x = b.arrays.find("x");
    if (x == b.arrays.end() || x->second.ndim() < 2 || b.arrays.count("in_proj_weight"))
        throw UsageError("--sweep dk: draws W_Q and W_K for x; " + escape_control(b.source) +
                         (x == b.arrays.end() || x->second.ndim() < 2 ? " has no x of 2 or 3 axes"
                                                                      : " packs W_Q, W_K and W_V in in_proj_weight"));
    const auto m = b.arrays.find("memory");
    const std::size_t dm = x->second.shape.back(), dkv = m != b.arrays.end() ? m->second.shape.back() : dm;
    const std::size_t H = spec.heads, G = spec.kv_heads.value_or(H);
    if (double(dm + dkv) * double(H) * double(dk) * 8 > double(limit))
        throw MemoryLimitError("--sweep dk=" + std::to_string(dk) + ": W_Q and W_K would take " +
                               format_bytes(std::size_t((dm + dkv) * H * dk * 8)) + ", more than {max_memory}");
    Bundle out = b;
    for (const char* name : {"W_Q", "W_K", "b_Q", "b_K", "q_proj_weight", "k_proj_weight"}) out.arrays.erase(name);
    SplitMix64 rng{kSweepSeed};
    const std::string origin = "--sweep dk=" + std::to_string(dk) + ": ";
    out.arrays["W_Q"] = drawn(rng, dm, H * dk, spec.layout, origin + "W_Q");
    out.arrays["W_K"] = drawn(rng, dkv, G * dk, spec.layout, origin + "W_K");
    return out;
}

// One run: its problem, computed with the stages of the diagnostics kept; the rows' statistics.
template <typename T>
RowStats run_stats(const RunOptions& o, const Bundle& b, const Spec& spec, std::size_t limit, double& scale,
                   Dims& dims) {
    const auto run = attend_checked(b, problem_of<T>(o, b, spec, limit), kDiagnoseNeeds, o.threads, limit);
    const TraceView& v = run->view;
    TextOptions chosen;
    chosen.batches = o.batches, chosen.heads = o.heads_shown;
    check_selection(chosen, v.dims);
    scale = v.scale, dims = v.dims;
    return row_stats(v, o.batches, o.heads_shown);
}

RowStats stats_of(const RunOptions& o, const Bundle& b, const Spec& spec, std::size_t limit, double& scale,
                  Dims& dims) {
    return o.dtype == Precision::float32 ? run_stats<float>(o, b, spec, limit, scale, dims)
                                         : run_stats<double>(o, b, spec, limit, scale, dims);
}

// The run of value k: d_k's scaled by 1/sqrt(d_k) and unscaled; the scale's; the temperature's
// (dividing a checkpoint's own scale, as --temperature does).
SweepRow sweep_row(const RunOptions& o, const Bundle& b, const Spec& spec, const SweepPlan& p, std::size_t k,
                   std::size_t limit, Dims& dims) {
    SweepRow row{p.texts[k], p.values[k], 1, {}, std::nullopt};
    Spec s = spec;
    s.temperature = 1;
    if (p.over == "dk") {
        const Bundle drawn_bundle = with_dk(b, spec, std::size_t(row.value), limit);
        s.scale = 1 / std::sqrt(row.value), s.scale_source = "1/sqrt(d_k), d_k = " + row.text;
        row.run = stats_of(o, drawn_bundle, s, limit, row.scale, dims);
        double one = 1;
        s.scale = 1, s.scale_source = "1 (unscaled)";
        row.unscaled = stats_of(o, drawn_bundle, s, limit, one, dims);
        return row;
    }
    if (p.over == "scale") {
        s.scale = row.value, s.scale_source = "--sweep scale=" + row.text;
    } else if (spec.scale) {
        s.scale = *spec.scale / row.value, s.scale_source = spec.scale_source + " / temperature " + row.text;
    } else {
        s.temperature = row.value;
    }
    row.run = stats_of(o, b, s, limit, row.scale, dims);
    return row;
}

}  // namespace

int run_sweep(const RunOptions& o) {
    const SweepPlan plan = parse_sweep(o.sweep);
    if (!o.html.empty()) check_output_target(o.html, o.force, "{html} " + o.html);
    const std::size_t limit = memory_limit(o);
    Spec spec = spec_of(o);
    const Bundle bundle = load_inputs(o, limit, spec);
    Sweep s;
    s.over = plan.over, s.source = bundle.source, s.seed = kSweepSeed;
    Dims dims;
    for (std::size_t k = 0; k < plan.values.size(); ++k)
        s.rows.push_back(sweep_row(o, bundle, spec, plan, k, limit, dims));
    s.B = dims.B, s.H = dims.H, s.Tq = dims.Tq, s.Tk = dims.Tk;
    if (!o.html.empty()) {
        AtomicTextFile f(o.html, o.force);
        write_sweep_html(f, s);
        f.commit();
        say_written(o, o.html, "HTML sweep");
    }
    if (o.json)
        write_sweep_json(std::cout, s);
    else if (o.html.empty() && !o.quiet)
        write_sweep_text(std::cout, s);
    std::cout.flush();
    if (!std::cout) throw RuntimeFailure("<stdout>: cannot write the report");
    return 0;
}

}  // namespace attnscope::cli
