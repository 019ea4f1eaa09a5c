// --diagnose as text (a table per head) and as JSON rows.
#include "attnscope/analysis/diagnostics.hpp"

#include <cmath>
#include <cstdio>
#include <ostream>

#include "attnscope/report/report.hpp"
#include "text_util.hpp"

namespace attnscope {

using namespace text;

namespace {

// The key of the largest ||w_ij v_j|| and its share of the row's sum in percent: "mat 41".
std::string top_share(const TraceView& v, std::size_t b, const RowDiagnostics& r) {
    double total = 0;
    for (double c : r.contribution) total += c;
    const double top = r.max_contribution_key < r.contribution.size() ? r.contribution[r.max_contribution_key] : 0;
    const std::string share = total > 0 && std::isfinite(total) ? std::to_string(int(std::lround(100 * top / total)))
                              : std::isnan(total)               ? "nan"
                                                                : "-";  // every value 0 (or inf)
    return clip_label(axis_label(v, "Tk", b, r.max_contribution_key), 6) + " " + share;
}

}  // namespace

void write_diagnostics_text(std::ostream& out, const TraceView& v, const std::vector<RowDiagnostics>& rows,
                            const TextOptions& o) {
    const auto batches = chosen_or_all(o.batches, v.dims.B);
    const auto heads = chosen_or_all(o.heads, v.dims.H);
    auto fmt = [](double x, const char* f = "%.3f") {
        char buf[32];
        std::snprintf(buf, sizeof buf, f, x);
        return std::string(buf);
    };
    const std::string legend =
        "== diagnostics: n = visible keys; ent = the entropy -sum w ln w (0: one-hot, ln keys: uniform); eff = "
        "exp(ent), the effective number of keys; max w and the key it sits on; top w·v % = the key with the "
        "largest ||w_ij v_j|| and its share of the context in percent, ||w_ij v_j|| / sum_j ||w_ij v_j||; spread = max "
        "- min of the visible scores before → after scaling; sum = the row sum; "
        "flag: uniform when eff >= 90% of the visible keys, one-hot when max w >= 0.9";
    const bool sinks = !rows.empty() && rows[0].has_sink;
    const std::string legend_all =
        legend + (sinks ? "; sink = sink_weight, the share of the row the head's sink takes (sum + sink = 1); ent, eff "
                          "and the flags are of the weights over their sum"
                        : "");
    const auto lines = wrap(legend_all, o.width > 14 ? o.width - 4 : 10);
    out << '\n';
    for (std::size_t k = 0; k < lines.size(); ++k) out << (k ? "   " : "") << lines[k] << '\n';
    for (std::size_t b : batches)
        for (std::size_t h : heads) {
            out << "\n  -- " << (v.batched ? "batch " + std::to_string(b) + ", " : std::string()) << "head " << h;
            if (v.dims.G && v.dims.G != v.dims.H) out << " (reads K/V head " << v.dims.kv_head(h) << ")";
            out << '\n';
            std::vector<std::vector<std::string>> table = {
                {"query", "n", "ent", "eff", "max w", "at", "top w·v %", "spread", "sum", "flag"}};
            if (sinks) table[0].insert(table[0].begin() + 9, "sink");
            std::size_t uniform = 0, one_hot = 0, masked = 0, n = 0;
            for (const auto& r : rows) {
                if (r.batch != b || r.head != h) continue;
                ++n;
                std::string flags = r.fully_masked     ? "masked"
                                    : r.nearly_uniform ? "uniform"
                                    : r.nearly_one_hot ? "one-hot"
                                                       : "";
                uniform += r.nearly_uniform, one_hot += r.nearly_one_hot, masked += r.fully_masked;
                table.push_back(
                    {clip_label(axis_label(v, "Tq", b, r.query), 6), std::to_string(r.visible_keys), fmt(r.entropy),
                     fmt(r.effective_keys, "%.2f"), fmt(r.max_weight),
                     r.fully_masked ? "-" : clip_label(axis_label(v, "Tk", b, r.max_key), 6),
                     r.fully_masked ? "-" : top_share(v, b, r),
                     r.fully_masked ? "-" : fmt(r.score_spread_raw, "%.3g") + "→" + fmt(r.score_spread_scaled, "%.3g"),
                     fmt(r.row_sum, "%.3f"), flags});
                if (sinks) table.back().insert(table.back().begin() + 9, fmt(r.sink_weight, "%.3f"));
            }
            std::vector<std::size_t> w(table[0].size(), 0);
            for (const auto& row : table)
                for (std::size_t c = 0; c < row.size(); ++c) w[c] = std::max(w[c], display_width(row[c]));
            for (const auto& row : table) {
                std::string line = "    ";
                for (std::size_t c = 0; c < row.size(); ++c)
                    line += (c == 0 || c == 5 || c == 6 || c + 1 == row.size() ? pad_right(row[c], w[c])
                                                                               : pad_left(row[c], w[c])) +
                            (c + 1 < row.size() ? "  " : "");
                out << line.substr(0, line.find_last_not_of(' ') + 1) << '\n';
            }
            out << "    " << n << " rows: " << uniform << " nearly uniform, " << one_hot << " nearly one-hot, "
                << masked << " fully masked\n";
        }
}

void write_diagnostics_json(JsonWriter& w, const std::vector<RowDiagnostics>& rows) {
    w.begin_array();
    for (const auto& r : rows) {
        w.newline().begin_object();
        w.key("batch").value(r.batch).key("head").value(r.head).key("query").value(r.query);
        w.key("visible_keys").value(r.visible_keys).key("entropy").value(r.entropy);
        w.key("effective_keys").value(r.effective_keys).key("max_weight").value(r.max_weight);
        w.key("max_key").value(r.max_key).key("row_sum").value(r.row_sum);
        w.key("score_spread_raw").value(r.score_spread_raw).key("score_spread_scaled").value(r.score_spread_scaled);
        w.key("max_contribution_key").value(r.max_contribution_key).key("contribution").list(r.contribution);
        w.key("fully_masked").value(r.fully_masked).key("nearly_uniform").value(r.nearly_uniform);
        w.key("nearly_one_hot").value(r.nearly_one_hot);
        if (r.has_sink) w.key("sink_weight").value(r.sink_weight);
        w.end_object();
    }
    w.newline().end_array();
}

}  // namespace attnscope
