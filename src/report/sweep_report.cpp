// A sweep as text, JSON and an HTML page (report/sweep_report.hpp; docs/classroom.md, "Sweeps").
#include "attnscope/report/sweep_report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ostream>
#include <string>

#include "attnscope/base/json_writer.hpp"
#include "attnscope/base/text.hpp"

namespace attnscope {
namespace {

std::string format(const char* f, double v) {
    char buf[48];
    std::snprintf(buf, sizeof buf, f, v);
    return buf;
}

std::string right(const std::string& s, std::size_t w) { return std::string(w > s.size() ? w - s.size() : 0, ' ') + s; }

const char* value_name(const Sweep& s) { return s.over == "dk" ? "d_k" : s.over.c_str(); }

// spread, entropy, uniform, one-hot: 8 columns each.
std::string stats_cells(const RowStats& r) {
    return right(format("%.4g", r.spread), 8) + right(format("%.4f", r.entropy), 9) +
           right(std::to_string(r.uniform), 9) + right(std::to_string(r.one_hot), 9);
}

void legend(std::ostream& out, const Sweep& s) {
    const std::size_t rows = s.rows.empty() ? 0 : s.rows[0].run.rows;
    out << "attnscope: sweep " << value_name(s) << " over " << escape_control(s.source) << "\n  rows     " << rows
        << " weight rows a value (B " << s.B << ", H " << s.H << ", Tq " << s.Tq << ", Tk " << s.Tk << ")\n";
    if (s.over == "dk")
        out << "  d_k      W_Q, W_K of d_k features a head, drawn as attnscope make draws them\n"
               "           (splitmix64 seed "
            << s.seed << ", number / sqrt(rows)); x and the rest as given\n";
    out << "  spread   max - min of a row's visible scores (scale included), mean\n"
           "  entropy  mean of -sum w ln w over a row (nats; equal weights: ln "
        << s.Tk << " = " << format("%.4f", std::log(double(std::max<std::size_t>(s.Tk, 1))))
        << ")\n"
           "  uniform  rows (2+ keys) with exp(entropy) >= "
        << format("%g", kUniformFraction) << " x visible keys, as --diagnose\n"
        << "  one-hot  rows (2+ keys) whose largest weight >= " << format("%g", kOneHotWeight) << "\n\n";
}

}  // namespace

void write_sweep_text(std::ostream& out, const Sweep& s) {
    legend(out, s);
    const bool dk = s.over == "dk";
    const std::string head = "  spread  entropy  uniform  one-hot";
    if (dk)
        out << "        "
            << "  ------- scale 1/sqrt(d_k) -------"
            << "  ----------- scale 1 -------------\n"
            << right(value_name(s), 8) << head << head << '\n';
    else
        out << right(value_name(s), 12) << right("scale", 10) << head << '\n';
    for (const SweepRow& r : s.rows) {
        if (dk)
            out << right(r.text, 8) << stats_cells(r.run) << stats_cells(*r.unscaled) << '\n';
        else
            out << right(r.text, 12) << right(format("%.4g", r.scale), 10) << stats_cells(r.run) << '\n';
    }
}

namespace {

void stats_json(JsonWriter& w, const RowStats& r, double scale) {
    w.begin_object().key("scale").value(scale).key("rows").value(r.rows).key("spread").value(r.spread);
    w.key("entropy").value(r.entropy).key("uniform").value(r.uniform).key("one_hot").value(r.one_hot).end_object();
}

}  // namespace

void write_sweep_json(std::ostream& out, const Sweep& s) {
    JsonWriter w(out);
    w.begin_object().key("schema").value("attnscope.sweep/1").key("source").value(s.source);
    w.key("over").value(s.over).key("dims").begin_object().key("B").value(s.B).key("H").value(s.H);
    w.key("Tq").value(s.Tq).key("Tk").value(s.Tk).end_object();
    w.key("thresholds").begin_object().key("one_hot_weight").value(kOneHotWeight);
    w.key("uniform_fraction").value(kUniformFraction).end_object();
    w.key("seed");
    s.over == "dk" ? w.value(s.seed) : w.value(nullptr);
    w.newline().key("values").begin_array();
    for (const SweepRow& r : s.rows) {
        w.newline().begin_object().key("value").value(r.value).key("run");
        stats_json(w, r.run, r.scale);
        w.key("unscaled");
        r.unscaled ? stats_json(w, *r.unscaled, 1.0) : (void)w.value(nullptr);
        w.end_object();
    }
    w.newline().end_array().end_object();
    out << '\n';
}

namespace {

// The chart: a line per measure, its share of the rows (0..1) per value, values evenly spaced.
struct Series {
    std::string name, colour;
    bool dashed;
    std::vector<double> y;  // 0..1
};

std::vector<Series> series_of(const Sweep& s) {
    std::vector<Series> out;
    const double ln_tk = std::log(double(std::max<std::size_t>(s.Tk, 2)));
    const auto add = [&](const std::string& suffix, bool dashed, auto stats) {
        Series one{"one-hot rows" + suffix, "#c0392b", dashed, {}}, uni{"uniform rows" + suffix, "#2471a3", dashed, {}},
            ent{"entropy / ln Tk" + suffix, "#1e8449", dashed, {}};
        for (const SweepRow& r : s.rows) {
            const RowStats& st = stats(r);
            const double n = double(std::max<std::size_t>(st.rows, 1));
            one.y.push_back(double(st.one_hot) / n), uni.y.push_back(double(st.uniform) / n);
            ent.y.push_back(std::min(1.0, st.entropy / ln_tk));
        }
        out.push_back(one), out.push_back(uni), out.push_back(ent);
    };
    add(s.over == "dk" ? " (1/sqrt(d_k))" : "", false, [](const SweepRow& r) -> const RowStats& { return r.run; });
    if (s.over == "dk") add(" (scale 1)", true, [](const SweepRow& r) -> const RowStats& { return *r.unscaled; });
    return out;
}

void chart_svg(std::ostream& out, const Sweep& s) {
    const double W = 480, H = 200, left = 40, top = 10, plot_w = 420, plot_h = 160;
    const std::size_t n = s.rows.size();
    const auto x = [&](std::size_t k) { return left + (n > 1 ? plot_w * double(k) / double(n - 1) : plot_w / 2); };
    const auto y = [&](double v) { return top + plot_h * (1 - v); };
    out << "<svg class=\"sweep-chart\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H + 40
        << "\" role=\"img\" aria-label=\"sweep chart\">\n<rect x=\"" << left << "\" y=\"" << top << "\" width=\""
        << plot_w << "\" height=\"" << plot_h << "\" fill=\"none\" stroke=\"#999\"/>\n";
    for (double v : {0.0, 0.5, 1.0})
        out << "<text x=\"" << left - 4 << "\" y=\"" << y(v) + 4 << "\" text-anchor=\"end\" font-size=\"11\">" << v
            << "</text>\n";
    for (std::size_t k = 0; k < n; ++k)
        out << "<text x=\"" << x(k) << "\" y=\"" << top + plot_h + 16 << "\" text-anchor=\"middle\" font-size=\"11\">"
            << html_text(s.rows[k].text) << "</text>\n";
    out << "<text x=\"" << left + plot_w / 2 << "\" y=\"" << top + plot_h + 34
        << "\" text-anchor=\"middle\" font-size=\"12\">" << value_name(s) << "</text>\n";
    for (const Series& se : series_of(s)) {
        out << "<polyline fill=\"none\" stroke=\"" << se.colour << "\" stroke-width=\"2\""
            << (se.dashed ? " stroke-dasharray=\"5,4\"" : "") << " points=\"";
        for (std::size_t k = 0; k < n; ++k) out << (k ? " " : "") << x(k) << ',' << y(se.y[k]);
        out << "\"><title>" << html_text(se.name) << "</title></polyline>\n";
    }
    out << "</svg>\n";
}

void table_html(std::ostream& out, const Sweep& s) {
    out << "<table class=\"sweep\">\n<tr><th>" << value_name(s) << "</th><th>scale</th>"
        << "<th>spread</th><th>entropy</th><th>uniform</th><th>one-hot</th>"
        << (s.over == "dk" ? "<th>spread (scale 1)</th><th>entropy</th><th>uniform</th><th>one-hot</th>" : "")
        << "</tr>\n";
    const auto cells = [&](const RowStats& r) {
        out << "<td>" << format("%.4g", r.spread) << "</td><td>" << format("%.4f", r.entropy) << "</td><td>"
            << r.uniform << "</td><td>" << r.one_hot << "</td>";
    };
    for (const SweepRow& r : s.rows) {
        out << "<tr><td>" << html_text(r.text) << "</td><td>" << format("%.4g", r.scale) << "</td>";
        cells(r.run);
        if (r.unscaled) cells(*r.unscaled);
        out << "</tr>\n";
    }
    out << "</table>\n";
}

}  // namespace

void write_sweep_html(std::ostream& out, const Sweep& s) {
    out << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>attnscope sweep " << value_name(s)
        << "</title>\n<style>body{font-family:sans-serif;margin:1em}table.sweep{border-collapse:collapse}"
           "table.sweep td,table.sweep th{border:1px solid #ccc;padding:2px 8px;text-align:right}"
           ".key span{margin-right:1.5em}</style></head><body>\n<h1>Sweep of "
        << value_name(s) << "</h1>\n<p>" << html_text(s.source) << ": " << (s.rows.empty() ? 0 : s.rows[0].run.rows)
        << " weight rows a value. Nearly uniform: exp(entropy) &ge; " << kUniformFraction
        << " &times; visible keys; nearly one-hot: largest weight &ge; " << kOneHotWeight
        << " (rows of 2 keys or more, as --diagnose).</p>\n";
    chart_svg(out, s);
    out << "<p class=\"key\">";
    for (const Series& se : series_of(s))
        out << "<span style=\"color:" << se.colour << "\">" << (se.dashed ? "- - " : "&mdash; ") << html_text(se.name)
            << "</span>";
    out << "</p>\n";
    table_html(out, s);
    out << "</body></html>\n";
}

}  // namespace attnscope
