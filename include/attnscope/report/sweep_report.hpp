// attnscope — report: a sweep (run --sweep NAME=V1,V2,...) as a table that fits 80 columns,
// as JSON (attnscope.sweep/1, docs/json.md) and as an HTML page with a small chart
// (docs/classroom.md, "Sweeps").
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "attnscope/analysis/sweep.hpp"

namespace attnscope {

// One value of the sweep: the run it makes, and for d_k the same run without 1/sqrt(d_k).
struct SweepRow {
    std::string text;  // the value as given ("16", "0.5")
    double value = 0;
    double scale = 1;  // the factor of the scores in `run`
    RowStats run;
    std::optional<RowStats> unscaled;  // d_k only: scale 1
};

struct Sweep {
    std::string over;  // "dk", "scale" or "temperature"
    std::string source;
    std::size_t B = 0, H = 0, Tq = 0, Tk = 0;
    std::uint64_t seed = 0;  // d_k: the splitmix64 seed of W_Q and W_K
    std::vector<SweepRow> rows;
};

void write_sweep_text(std::ostream& out, const Sweep& s);
void write_sweep_json(std::ostream& out, const Sweep& s);
void write_sweep_html(std::ostream& out, const Sweep& s);

// `s` as HTML character data or an attribute's value (html.cpp's escaping).
std::string html_text(std::string_view s);

}  // namespace attnscope
