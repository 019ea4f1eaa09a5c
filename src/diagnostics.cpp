// Diagnostics over the weights, scores and values of a trace.
#include "attnscope/diagnostics.hpp"

#include "attnscope/errors.hpp"
#include "text_util.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <ostream>

namespace attnscope {

using namespace text;

std::vector<RowDiagnostics> diagnose(const TraceView& v) {
    v.require({"Q", "K", "scores", "mask", "weights", "V"}, "--diagnose");
    const Dims& d = v.dims;
    const StageView &S = v.stage("scores"), &M = v.stage("mask"), &W = v.stage("weights"), &V = v.stage("V"),
                    &Q = v.stage("Q"), &K = v.stage("K");
    std::vector<RowDiagnostics> out;
    for (std::size_t b = 0; b < d.B; ++b)
        for (std::size_t h = 0; h < d.H; ++h) {
            const std::size_t so = matrix_offset(S, b, h), mo = matrix_offset(M, b, 0), vo = matrix_offset(V, b, h),
                              qo = matrix_offset(Q, b, h), ko = matrix_offset(K, b, h);
            for (std::size_t i = 0; i < d.Tq; ++i) {
                RowDiagnostics r;
                r.batch = b, r.head = h, r.query = i;
                r.contribution.assign(d.Tk, 0.0);
                double lo = std::numeric_limits<double>::infinity(), hi = -lo, best_c = -1;
                double raw_lo = lo, raw_hi = hi;  // q_i · k_j before scaling, from Q and K themselves
                for (std::size_t j = 0; j < d.Tk; ++j) {
                    const double w = W.at(so + i * d.Tk + j);
                    r.row_sum += w;
                    if (w > r.max_weight || j == 0) r.max_weight = w, r.max_key = j;
                    if (w > 0) r.entropy -= w * std::log(w);
                    double norm = 0;  // ||w_ij v_j||
                    for (std::size_t k = 0; k < d.Dv; ++k) norm += std::pow(w * V.at(vo + j * d.Dv + k), 2);
                    r.contribution[j] = std::sqrt(norm);
                    if (r.contribution[j] > best_c) best_c = r.contribution[j], r.max_contribution_key = j;
                    if (M.at(mo + i * d.Tk + j) != 0) {
                        ++r.visible_keys;
                        const double s = S.at(so + i * d.Tk + j);
                        lo = std::min(lo, s), hi = std::max(hi, s);
                        double dot = 0;
                        for (std::size_t k = 0; k < d.Dk; ++k) dot += Q.at(qo + i * d.Dk + k) * K.at(ko + j * d.Dk + k);
                        raw_lo = std::min(raw_lo, dot), raw_hi = std::max(raw_hi, dot);
                    }
                }
                r.fully_masked = r.visible_keys == 0;
                r.effective_keys = r.fully_masked ? 0 : std::exp(r.entropy);
                if (!r.fully_masked) {
                    r.score_spread_scaled = hi - lo;
                    r.score_spread_raw = raw_hi - raw_lo;
                }
                if (r.visible_keys >= 2) {
                    r.nearly_uniform = r.effective_keys >= kUniformFraction * double(r.visible_keys);
                    r.nearly_one_hot = r.max_weight >= kOneHotWeight;
                }
                out.push_back(std::move(r));
            }
        }
    return out;
}

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
        "== diagnostics: n = visible keys; H = entropy -sum w ln w (0: one-hot, ln keys: uniform); eff = exp(H), the effective "
        "number of keys; max w and the key it sits on; top w·v = the key with the largest ||w_ij v_j||, its share "
        "of the context; spread = max - min of the visible scores before → after scaling; sum = the row sum; "
        "flag: uniform when eff >= 90% of the visible keys, one-hot when max w >= 0.9";
    const auto lines = wrap(legend, o.width > 14 ? o.width - 4 : 10);
    out << '\n';
    for (std::size_t k = 0; k < lines.size(); ++k) out << (k ? "   " : "") << lines[k] << '\n';
    for (std::size_t b : batches)
        for (std::size_t h : heads) {
            out << "\n  -- " << (v.batched ? "batch " + std::to_string(b) + ", " : std::string()) << "head " << h << '\n';
            std::vector<std::vector<std::string>> table = {
                {"query", "n", "H", "eff", "max w", "at", "top w·v", "spread", "sum", "flag"}};
            std::size_t uniform = 0, one_hot = 0, masked = 0, n = 0;
            for (const auto& r : rows) {
                if (r.batch != b || r.head != h) continue;
                ++n;
                std::string flags = r.fully_masked ? "masked" : r.nearly_uniform ? "uniform"
                                                            : r.nearly_one_hot   ? "one-hot"
                                                                                 : "";
                uniform += r.nearly_uniform, one_hot += r.nearly_one_hot, masked += r.fully_masked;
                table.push_back({clip_label(axis_label(v, "Tq", b, r.query), 6), std::to_string(r.visible_keys),
                                 fmt(r.entropy), fmt(r.effective_keys, "%.2f"), fmt(r.max_weight),
                                 r.fully_masked ? "-" : clip_label(axis_label(v, "Tk", b, r.max_key), 6),
                                 r.fully_masked ? "-" : clip_label(axis_label(v, "Tk", b, r.max_contribution_key), 6),
                                 r.fully_masked ? "-" : fmt(r.score_spread_raw, "%.3g") + "→" + fmt(r.score_spread_scaled, "%.3g"),
                                 fmt(r.row_sum, "%.3f"), flags});
            }
            std::vector<std::size_t> w(table[0].size(), 0);
            for (const auto& row : table)
                for (std::size_t c = 0; c < row.size(); ++c) w[c] = std::max(w[c], display_width(row[c]));
            for (const auto& row : table) {
                std::string line = "    ";
                for (std::size_t c = 0; c < row.size(); ++c)
                    line += (c == 0 || c == 5 || c == 6 || c == 9 ? pad_right(row[c], w[c]) : pad_left(row[c], w[c])) +
                            (c + 1 < row.size() ? "  " : "");
                out << line.substr(0, line.find_last_not_of(' ') + 1) << '\n';
            }
            out << "    " << n << " rows: " << uniform << " nearly uniform, " << one_hot << " nearly one-hot, " << masked
                << " fully masked\n";
        }
}

void write_diagnostics_json(std::ostream& out, const std::vector<RowDiagnostics>& rows) {
    auto num = [&](double x) { put_json_number(out, x); };
    out << '[';
    for (std::size_t k = 0; k < rows.size(); ++k) {
        const auto& r = rows[k];
        out << (k ? ",\n" : "\n") << "{\"batch\":" << r.batch << ",\"head\":" << r.head << ",\"query\":" << r.query
            << ",\"visible_keys\":" << r.visible_keys << ",\"entropy\":";
        num(r.entropy);
        out << ",\"effective_keys\":";
        num(r.effective_keys);
        out << ",\"max_weight\":";
        num(r.max_weight);
        out << ",\"max_key\":" << r.max_key << ",\"row_sum\":";
        num(r.row_sum);
        out << ",\"score_spread_raw\":";
        num(r.score_spread_raw);
        out << ",\"score_spread_scaled\":";
        num(r.score_spread_scaled);
        out << ",\"max_contribution_key\":" << r.max_contribution_key << ",\"contribution\":[";
        for (std::size_t j = 0; j < r.contribution.size(); ++j) {
            if (j) out << ',';
            num(r.contribution[j]);
        }
        out << "],\"fully_masked\":" << (r.fully_masked ? "true" : "false")
            << ",\"nearly_uniform\":" << (r.nearly_uniform ? "true" : "false")
            << ",\"nearly_one_hot\":" << (r.nearly_one_hot ? "true" : "false") << '}';
    }
    out << "\n]";
}

}  // namespace attnscope
