// run --why B,H,I (report/why_report.hpp; docs/classroom.md, "Why this key").
#include "attnscope/report/why_report.hpp"

#include <cmath>
#include <cstdio>
#include <ostream>
#include <string>

#include "attnscope/base/json_writer.hpp"
#include "attnscope/base/text.hpp"

namespace attnscope {
namespace {

std::string num(double v, int width = 11) {
    char buf[48];
    std::snprintf(buf, sizeof buf, "%*.*g", width, 6, v);
    return width ? std::string(buf) : " " + std::string(buf);  // width 0: in running text
}

// " 'sat'" for a labelled position (clipped, escaped), "" otherwise.
std::string label(const TokenLabels& t, std::size_t b, std::size_t pos) {
    if (t.empty() || pos >= t[b].size()) return "";
    return " '" + escape_control(clip_fragment(t[b][pos], 12)) + "'";
}

std::string token_of(const TokenLabels& t, std::size_t b, std::size_t pos) {
    return t.empty() || pos >= t[b].size() ? std::string() : t[b][pos];
}

void narrate(std::ostream& out, const WhyRow& r) {
    const double gap = r.score_win - r.score_run, top = r.features.empty() ? 0 : r.features.front().diff();
    out << "  A key's score is scale * q . k = sum over d of scale * q_d * k_d, so the gap\n"
           "  between two keys is sum over d of scale * q_d * (k_win,d - k_run,d): a feature\n"
           "  with a large positive difference speaks for the winner, a negative one for\n"
           "  the runner-up. Feature "
        << r.features.front().d << " gives" << num(top, 0) << " of the gap" << num(gap, 0) << ".\n"
        << "  Softmax turns the gap into a ratio of weights: exp(gap) =" << num(std::exp(gap), 0)
        << ",\n  and w_win / w_run =" << num(r.weight_win / r.weight_run, 0)
        << "\n  (equal unless a bias or a soft-cap changed the scores after the product).\n\n";
}

}  // namespace

void write_why_text(std::ostream& out, const TraceView& v, const WhyRow& r, bool explain) {
    const std::size_t b = v.batched ? r.batch : 0;
    out << "attnscope: why query " << r.query << label(v.query_tokens, b, r.query) << " (batch " << r.batch << ", head "
        << r.head << ") weights key " << r.winner << label(v.key_tokens, b, r.winner) << " most\n"
        << "  winner     key " << r.winner << label(v.key_tokens, b, r.winner) << "  weight" << num(r.weight_win, 0)
        << "  score" << num(r.score_win, 0) << "\n  runner-up  key " << r.runner << label(v.key_tokens, b, r.runner)
        << "  weight" << num(r.weight_run, 0) << "  score" << num(r.score_run, 0) << "\n  gap       "
        << num(r.score_win - r.score_run, 0) << " = sum_d s * q_d * (k_win,d - k_run,d), s = scale" << num(r.scale, 0)
        << "\n"
        << (r.rope ? "  q and k are Q_rot's and K_rot's (RoPE)\n" : "") << '\n';
    if (explain) narrate(out, r);
    out << "     d"
        << "        q_d"
        << "    k_win,d"
        << "    k_run,d"
        << "  s*q*k_win"
        << "  s*q*k_run"
        << " difference\n";
    double win = 0, run = 0;
    for (const WhyFeature& f : r.features) {
        char d[24];
        std::snprintf(d, sizeof d, "%6zu", f.d);
        out << d << num(f.q) << num(f.k_win) << num(f.k_run) << num(f.win) << num(f.run) << num(f.diff()) << '\n';
        win += f.win, run += f.run;
    }
    out << "  total" << std::string(33, ' ') << num(win) << num(run) << num(win - run) << '\n';
}

void write_why_json(std::ostream& out, const TraceView& v, const WhyRow& r) {
    const std::size_t b = v.batched ? r.batch : 0;
    JsonWriter w(out);
    w.begin_object().key("schema").value("attnscope.why/1").key("source").value(v.source);
    w.key("batch").value(r.batch).key("head").value(r.head).key("query").value(r.query);
    w.key("query_token").value(token_of(v.query_tokens, b, r.query)).key("scale").value(r.scale);
    w.key("rope").value(r.rope);
    const auto key = [&](const char* name, std::size_t j, double weight, double score) {
        w.key(name).begin_object().key("key").value(j).key("token").value(token_of(v.key_tokens, b, j));
        w.key("weight").value(weight).key("score").value(score).end_object();
    };
    key("winner", r.winner, r.weight_win, r.score_win);
    key("runner_up", r.runner, r.weight_run, r.score_run);
    w.key("gap").value(r.score_win - r.score_run).newline().key("features").begin_array();
    for (const WhyFeature& f : r.features) {
        w.newline().begin_object().key("d").value(f.d).key("q").value(f.q).key("k_winner").value(f.k_win);
        w.key("k_runner_up").value(f.k_run).key("winner").value(f.win).key("runner_up").value(f.run);
        w.key("difference").value(f.diff()).end_object();
    }
    w.newline().end_array().end_object();
    out << '\n';
}

}  // namespace attnscope
