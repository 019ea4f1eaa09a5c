// The topics of `attnscope lesson` (docs/classroom.md, "attnscope lesson"): each a few steps
// over data/'s bundles (or bundles `attnscope make` writes into a scratch folder), and
// questions whose answers are read from the runs, computed in this process (src/cli/lesson.hpp).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "lesson.hpp"
#include "lesson_prose.hpp"

namespace attnscope::cli::lesson {
namespace {

const Args kHeads2 = {"--heads", "2"};
std::string str(std::size_t n) { return std::to_string(n); }
Args run_of(const std::string& bundle, Args more = kHeads2) {
    more.insert(more.begin(), {"run", bundle});
    return more;
}
Args tail(const Args& a) { return Args(a.begin() + 1, a.end()); }  // a run's args without "run"

Question yes_no(std::string id, std::string text, bool yes, std::string why) {
    Question q{std::move(id), std::move(text), yes ? "yes" : "no", std::move(why), {}, {}, 1e-3, false};
    q.accepted = yes ? std::vector<std::string>{"yes", "y"} : std::vector<std::string>{"no", "n"};
    return q;
}

// Row i of head h, batch item b: the key with the largest weight.
std::size_t argmax_row(const Run& doc, std::size_t b, std::size_t h, std::size_t i) {
    std::size_t best = 0;
    for (std::size_t j = 0; j < dim(doc, "Tk"); ++j)
        if (at(doc, "weights", b, h, i, j) > at(doc, "weights", b, h, i, best)) best = j;
    return best;
}

// ---- questions ------------------------------------------------------------------------

// Which key query `q` of head 0 weights most: the label (keys sharing it tie) or its index.
// `head` names the run's head 0 (a run of one --head).
Question strongest_key(const std::string& bundle, const Args& args, std::size_t q, const std::string& head = "0") {
    const Run doc = compute(args);
    q = std::min(q, dim(doc, "Tq") - 1);
    const std::size_t Tk = dim(doc, "Tk"), best = argmax_row(doc, 0, 0, q);
    const auto w = [&](std::size_t j) { return at(doc, "weights", 0, 0, q, j); };
    const std::string who = label(doc, "query", 0, q), won = label(doc, "key", 0, best);
    std::size_t second = best;
    for (std::size_t j = 0; j < Tk; ++j)
        if (label(doc, "key", 0, j) != won && (second == best || w(j) > w(second))) second = j;
    Question Q;
    Q.id = "strongest-key";
    Q.text = "Which key will query '" + who + "' weight most in head " + head + " of " + bundle + "?";
    Q.answer = won;
    Q.accepted = {won};
    for (std::size_t j = 0; j < Tk; ++j)
        if (label(doc, "key", 0, j) == won) Q.accepted.push_back(str(j));
    Q.why = "Row '" + who + "' of head " + head + "'s weights: key " + str(best) + " '" + won + "' gets " +
            num(w(best)) + " (score " + num(at(doc, "scores", 0, 0, q, best)) + ")" +
            (second != best ? ", the runner-up '" + label(doc, "key", 0, second) + "' " + num(w(second)) : "") +
            ". The key whose k_j best matches q_i wins.";
    return Q;
}

Question softmax_axis(const Args& args, const std::string& head = "0") {
    const Run doc = compute(args);
    std::string terms;
    double sum = 0;
    for (std::size_t j = 0; j < dim(doc, "Tk"); ++j) {
        const double w = at(doc, "weights", 0, 0, 0, j);
        terms += (j ? " + " : "") + num(w), sum += w;
    }
    Question Q;
    Q.id = "softmax-axis";
    Q.text = "Is the softmax taken over the keys or over the values?";
    Q.answer = "keys";
    Q.accepted = {"keys", "key", "over the keys", "over keys"};
    Q.why = "Each row (one query) is a softmax over the " + str(dim(doc, "Tk")) + " keys: row 0 of head " + head +
            " is " + terms + " = " + num(sum) + ". Values are not in the softmax; they are mixed by its weights.";
    return Q;
}

Question scale_factor(const Args& args) {
    const Run doc = compute(args);
    const std::size_t Dk = dim(doc, "Dk");
    const double s = doc.view().scale;
    Question Q;
    Q.id = "scale";
    Q.text = "Queries and keys share Dk = " + str(Dk) +
             " features. By what number are the scores multiplied before the softmax?";
    Q.answer = num(s);
    Q.number = s;
    Q.accepted = {"1/sqrt(" + str(Dk) + ")", "1/sqrt(dk)", "1/√" + str(Dk)};
    Q.why = "scale = " + doc.view().scale_source + " = " + num(s) +
            ": dot products of Dk features grow like sqrt(Dk); dividing keeps the softmax from saturating.";
    return Q;
}

// `queries` and `keys` say what they are ("French queries"; "queries" by default).
Question scores_shape(const Run& doc, const std::string& queries = "queries", const std::string& keys = "keys") {
    const std::size_t Tq = dim(doc, "Tq"), Tk = dim(doc, "Tk");
    Question Q;
    Q.id = "scores-shape";
    Q.text = "Here Tq = " + str(Tq) + " " + queries + " and Tk = " + str(Tk) + " " + keys +
             ". What shape are one head's scores (rows x columns)?";
    Q.answer = str(Tq) + " x " + str(Tk);
    Q.accepted = {str(Tq) + "x" + str(Tk)};
    Q.numbers = true;
    Q.why = "One row per query, one column per key: (Tq, Tk) = (" + str(Tq) + ", " + str(Tk) +
            "); with the batch and the heads, (B, H, Tq, Tk).";
    return Q;
}

Question cross_keys(const Run& doc) {
    Question Q;
    Q.id = "cross-keys";
    Q.text = "In cross-attention, where do the keys come from: x (the decoder) or memory (the encoder)?";
    Q.answer = "memory";
    Q.accepted = {"memory", "the memory", "encoder", "the encoder", "memory (the encoder)"};
    Q.why = "K = memory · W_K: the keys (and values) come from the encoder's " + str(dim(doc, "Tk")) +
            " source tokens, the queries from the decoder's " + str(dim(doc, "Tq")) + ".";
    return Q;
}

std::vector<Question> cross_questions(const Args& args) {
    const Run doc = compute(args);
    return {scores_shape(doc, "French queries", "English keys"), cross_keys(doc)};
}

// Batch item 1 of a padded bundle, row 0 of head 0, and what its <pad> keys get.
Question pad_weight(const Args& args) {
    const Run doc = compute(args);
    std::string row;
    double pads = 0;
    for (std::size_t j = 0; j < dim(doc, "Tk"); ++j) {
        row += (j ? ", " : "") + num(at(doc, "weights", 1, 0, 0, j));
        if (label(doc, "key", 1, j) == "<pad>") pads += at(doc, "weights", 1, 0, 0, j);
    }
    const std::string q0 = label(doc, "query", 1, 0);
    Question Q;
    Q.id = "pad-weight";
    Q.text = "Batch item 1, '" + q0 + " " + label(doc, "query", 1, 1) + " " + label(doc, "query", 1, 2) +
             "', ends in <pad> keys that key_padding_mask hides. What weight does query '" + q0 + "' give a <pad> key?";
    Q.answer = "0";
    Q.number = 0;
    Q.tolerance = 0;
    Q.why = "Their scores become -inf and exp(-inf) = 0: row '" + q0 + "' of head 0 is [" + row + "], " + num(pads) +
            " on the <pad> keys.";
    return Q;
}

Question zeroed_key(const Args& args, std::size_t J, const std::string& head = "0") {
    const Run doc = compute(args);
    double lo = 1, hi = 0;
    const bool causal = doc.view().spec.causal;  // rows before J do not see key J
    for (std::size_t i = causal ? J : 0; i < dim(doc, "Tq"); ++i)
        lo = std::min(lo, at(doc, "weights", 0, 0, i, J)), hi = std::max(hi, at(doc, "weights", 0, 0, i, J));
    Question Q = yes_no("zeroed-key",
                        "--zero-key " + str(J) + " sets key '" + label(doc, "key", 0, J) +
                            "' to the zero vector, so its scores are 0. Do its weights become 0 (yes or no)?",
                        lo == 0 && hi == 0,
                        "Score 0 is not -inf: its weights are exp(0 - max)/sum, from " + num(lo) + " to " + num(hi) +
                            " in head " + head + ". Only a mask (key_padding_mask) makes them exactly 0.");
    return Q;
}

// The output row of query q (head 0, feature 0) worked out with the values and, wrongly,
// with the keys: the run's context matches the first.
Question keys_or_values(const Args& args, std::size_t q) {
    const Run doc = compute(args);
    q = std::min(q, dim(doc, "Tq") - 1);
    double by_v = 0, by_k = 0;
    for (std::size_t j = 0; j < dim(doc, "Tk"); ++j) {
        by_v += at(doc, "weights", 0, 0, q, j) * at(doc, "V", 0, 0, j, 0);
        by_k += at(doc, "weights", 0, 0, q, j) * at(doc, "K", 0, 0, j, 0);
    }
    const double got = at(doc, "context", 0, 0, q, 0);
    const bool values = std::fabs(got - by_v) <= std::fabs(got - by_k);
    Question Q;
    Q.id = "keys-vs-values";
    Q.text = "The output row of query '" + label(doc, "query", 0, q) +
             "' is a weighted sum of which vectors: the keys or the values?";
    Q.answer = values ? "values" : "keys";
    Q.accepted = values ? std::vector<std::string>{"values", "value", "the values", "v"}
                        : std::vector<std::string>{"keys", "key", "the keys", "k"};
    Q.why = "context[" + str(q) + "][0] = " + num(got) + " = sum_j w_j · V[j][0] = " + num(by_v) +
            "; sum_j w_j · K[j][0] would be " + num(by_k) +
            ". A key only decides its position's weight; the value, from its own W_V (learned apart from W_K), "
            "is what is added.";
    return Q;
}

// ---- the topics -----------------------------------------------------------------------

// A step: its title and paragraphs from the prose table (lesson_prose.hpp), its commands
// and questions from the runs.
Step step(std::string_view key, std::vector<Args> commands, std::vector<Question> questions) {
    const Prose& p = prose(key);
    return {p.title, p.words, std::move(commands), std::move(questions)};
}

// `attnscope run` over the subject, its head last (shown), or without it (asked: the run's head 0).
Args on(const Subject& s, Args more, bool shown = true) {
    Args a = {"run"};
    a.insert(a.end(), s.run.begin(), s.run.end());
    a.insert(a.end(), more.begin(), more.end());
    if (shown || s.head != "0") a.insert(a.end(), {"--head", s.head});
    return a;
}

// The steps over the subject alone (keys, scaling, the softmax); `given` adds its shape.
std::vector<Step> subject_steps(const Subject& s, bool given) {
    const auto asked = [&](const char* stages, Args more = {}) {
        return tail(on(s, with(std::move(more), {"--stages", stages}), false));
    };
    std::vector<Step> L;
    L.push_back(step("keys.scores", {on(s, {"--stages", "scores,weights"})},
                     {strongest_key(s.name, asked("scores,weights"), 2, s.head)}));
    if (given) L.back().questions.push_back(scores_shape(compute(asked("scores"))));
    L.push_back(
        step("keys.scale", {with(on(s, {"--stages", "scores"}), {"--explain"})}, {scale_factor(asked("scores"))}));
    L.push_back(step("keys.softmax", {on(s, {"--stages", "weights"})}, {softmax_axis(asked("weights"), s.head)}));
    return L;
}

std::vector<Step> keys_lesson(Places& p) {
    const bool given = p.subject.has_value();
    const Subject s = given ? *p.subject : Subject{{p.at("sentence.json"), "--heads", "2"}, p.at("sentence.json"), "0"};
    const Args P = run_of(p.at("padded.json")), C = run_of(p.at("cross.json"));
    std::vector<Step> L = subject_steps(s, given);
    if (!given) {
        L.push_back(step("keys.padding", {with(P, {"--stages", "weights", "--batch", "1", "--head", "0"})},
                         {pad_weight(tail(with(P, {"--stages", "weights"})))}));
        L.push_back(step("keys.cross", {with(C, {"--stages", "scores", "--head", "0"})},
                         cross_questions(tail(with(C, {"--stages", "scores"})))));
    }
    L.push_back(step("keys.zeroed", {on(s, {"--zero-key", "1", "--stages", "weights"})},
                     {zeroed_key(tail(on(s, {"--zero-key", "1", "--stages", "weights"}, false)), 1, s.head)}));
    L.push_back(step("keys.values", {on(s, {"--stages", "V,context"})},
                     {keys_or_values(tail(on(s, {"--stages", "K,V,weights,context"}, false)), 2)}));
    return L;
}

// ---- scaling and Dk ---------------------------------------------------------------------

// The largest weight of query q in head 0, from a run.
double row_max(const Run& doc, std::size_t q) { return at(doc, "weights", 0, 0, q, argmax_row(doc, 0, 0, q)); }

Question unscaled_max(const std::string& S, std::size_t q) {
    const Run a = compute({S, "--heads", "2", "--stages", "weights"});
    const Run b = compute({S, "--heads", "2", "--scale", "none", "--stages", "weights"});
    const bool larger = row_max(b, q) > row_max(a, q);
    Question Q;
    Q.id = "unscaled-max";
    Q.text = "Without the scale (--scale none), does the largest weight of query '" + label(a, "query", 0, q) +
             "' in head 0 get larger or smaller?";
    Q.answer = larger ? "larger" : "smaller";
    Q.accepted = larger ? std::vector<std::string>{"larger", "bigger", "higher", "grows"}
                        : std::vector<std::string>{"smaller", "lower", "shrinks"};
    Q.why = "Its largest weight is " + num(row_max(a, q)) + " with the scale, " + num(row_max(b, q)) +
            " without: scores " + (larger ? "farther apart make the softmax sharper." : "closer together.");
    return Q;
}

// The standard deviation of head 0's scores over every (query, key).
double score_sd(const Run& doc) {
    const std::size_t Tq = dim(doc, "Tq"), Tk = dim(doc, "Tk");
    double s = 0, s2 = 0;
    for (std::size_t i = 0; i < Tq; ++i)
        for (std::size_t j = 0; j < Tk; ++j) s += at(doc, "scores", 0, 0, i, j);
    const double mean = s / double(Tq * Tk);
    for (std::size_t i = 0; i < Tq; ++i)
        for (std::size_t j = 0; j < Tk; ++j) s2 += std::pow(at(doc, "scores", 0, 0, i, j) - mean, 2);
    return std::sqrt(s2 / double(Tq * Tk));
}

Question spread_growth(const std::string& small, const std::string& big) {
    const Run a = compute({small, "--scale", "none", "--stages", "scores"});
    const Run b = compute({big, "--scale", "none", "--stages", "scores"});
    const std::size_t da = dim(a, "Dk"), db = dim(b, "Dk");
    const double r = score_sd(b) / score_sd(a), root = std::sqrt(double(db) / double(da)), whole = double(db / da);
    const bool by_root = std::fabs(std::log(r / root)) < std::fabs(std::log(r / whole));
    Question Q;
    Q.id = "spread-growth";
    Q.text = "Dk grows " + str(db / da) + " times, from " + str(da) + " to " + str(db) +
             ". Without the scale, does the standard deviation of the scores grow about " + str(std::size_t(root)) +
             " or about " + str(db / da) + " times?";
    Q.answer = by_root ? str(std::size_t(root)) : str(db / da);
    Q.number = by_root ? std::floor(root) : whole;
    Q.tolerance = 0;
    Q.why = "Standard deviation of head 0's scores: " + num(score_sd(a)) + " at Dk " + str(da) + ", " +
            num(score_sd(b)) + " at Dk " + str(db) + ", " + num(r) + " times. A sum of Dk products grows like " +
            "sqrt(Dk); 1/sqrt(Dk) takes that back.";
    return Q;
}

// Rows of head 0 whose largest weight is at least 0.9 (--diagnose's "nearly one-hot").
Question one_hot_rows(const std::string& big, bool scaled) {
    Args args = {big, "--stages", "weights"};
    if (!scaled) args = with(args, {"--scale", "none"});
    const Run doc = compute(args);
    std::size_t n = 0;
    std::string maxes;
    for (std::size_t i = 0; i < dim(doc, "Tq"); ++i) {
        n += row_max(doc, i) >= 0.9 ? 1 : 0;
        maxes += (i ? ", " : "") + num(row_max(doc, i));
    }
    Question Q;
    Q.id = scaled ? "one-hot-scaled" : "one-hot-unscaled";
    Q.text = std::string(scaled ? "With" : "Without") + " the scale, how many of the " + str(dim(doc, "Tq")) +
             " rows at Dk " + str(dim(doc, "Dk")) + " are nearly one-hot (largest weight at least 0.9)?";
    Q.answer = str(n);
    Q.number = double(n);
    Q.tolerance = 0;
    Q.why = "The largest weight of each row " + std::string(scaled ? "with" : "without") + " the scale: " + maxes + ".";
    return Q;
}

std::vector<Step> scaling_lesson(Places& p) {
    const std::string S = p.at("sentence.json"), small = p.made("dk4.npz"), big = p.made("dk1024.npz");
    const Args make_small = {"make", "-o", small, "--dk", "4", "--seed", "1", "--force"};
    const Args make_big = {"make", "-o", big, "--dk", "1024", "--seed", "1", "--force"};
    run_quietly(make_small), run_quietly(make_big);
    std::vector<Step> L;
    L.push_back(step("scaling.scale", {run_of(S, {"--heads", "2", "--stages", "scores", "--head", "0", "--explain"})},
                     {scale_factor({S, "--heads", "2", "--stages", "scores"})}));
    L.push_back(step("scaling.none",
                     {run_of(S, {"--heads", "2", "--stages", "weights", "--head", "0"}),
                      run_of(S, {"--heads", "2", "--scale", "none", "--stages", "weights", "--head", "0"})},
                     {unscaled_max(S, 2)}));
    L.push_back(step("scaling.dk",
                     {make_small, make_big, run_of(small, {"--scale", "none", "--stages", "scores"}),
                      run_of(big, {"--scale", "none", "--stages", "scores"})},
                     {spread_growth(small, big)}));
    L.push_back(step("scaling.saturates",
                     {run_of(big, {"--scale", "none", "--diagnose", "--stages", "none"}),
                      run_of(big, {"--diagnose", "--stages", "none"})},
                     {one_hot_rows(big, false), one_hot_rows(big, true)}));
    return L;
}

// ---- masks: padding and causal ---------------------------------------------------------

// Keys of batch item 1, head 0 that every query gives weight exactly 0.
Question zero_keys(const Args& args) {
    const Run doc = compute(args);
    std::string list, shape;
    for (std::size_t j = 0; j < dim(doc, "Tk"); ++j) {
        bool zero = true;
        for (std::size_t i = 0; i < dim(doc, "Tq"); ++i) zero = zero && at(doc, "weights", 1, 0, i, j) == 0;
        if (zero) list += (list.empty() ? "" : ", ") + str(j), shape += (shape.empty() ? "" : "x") + str(j);
    }
    Question Q;
    Q.id = "masked-keys";
    Q.text = "Which keys of batch item 1 get weight 0 from every query (their numbers, from 0)?";
    Q.answer = list;
    Q.accepted = {shape};
    Q.numbers = true;
    Q.why = "Keys " + list + " are <pad> (key_padding_mask 1): their scores become -inf before the softmax, and " +
            "exp(-inf) = 0 in every row.";
    return Q;
}

// A number shown as the class would write it: 1 for a sum or weight of 1 (to 4 places).
std::string plain(double x) { return num(x) == "1.0000" ? "1" : num(x); }

Question visible_sum(const Args& args) {
    const Run doc = compute(args);
    double sum = 0;
    std::string terms;
    for (std::size_t j = 0; j < dim(doc, "Tk"); ++j)
        if (const double w = at(doc, "weights", 1, 0, 0, j); w > 0)
            sum += w, terms += (terms.empty() ? "" : " + ") + num(w);
    Question Q;
    Q.id = "visible-sum";
    Q.text = "What do the weights of query '" + label(doc, "query", 1, 0) + "' (batch item 1) over the keys it " +
             "can see add up to?";
    Q.answer = plain(sum);
    Q.number = sum;
    Q.why = terms + " = " + num(sum) + ": the softmax shares the whole row among the visible keys.";
    return Q;
}

Question causal_visible(const Args& args, std::size_t q) {
    const Run doc = compute(args);
    std::size_t n = 0, last = 0;
    for (std::size_t j = 0; j < dim(doc, "Tk"); ++j)
        if (at(doc, "weights", 0, 0, q, j) > 0) ++n, last = j;
    Question Q;
    Q.id = "causal-visible";
    Q.text = "With a causal mask, how many keys can query " + str(q) + " '" + label(doc, "query", 0, q) +
             "' see (give a weight above 0)?";
    Q.answer = str(n);
    Q.number = double(n);
    Q.tolerance = 0;
    Q.why = "Query " + str(q) + " sees keys 0 to " + str(last) + ", itself and the past; the " +
            str(dim(doc, "Tk") - n) + " later keys are -inf before the softmax, so weight 0.";
    return Q;
}

Question first_query(const Args& args) {
    const Run doc = compute(args);
    const double w = at(doc, "weights", 0, 0, 0, 0);
    Question Q;
    Q.id = "causal-first";
    Q.text = "What weight does query 0 '" + label(doc, "query", 0, 0) + "' give key 0, the only key it sees?";
    Q.answer = plain(w);
    Q.number = w;
    Q.why = "A softmax over one visible key: exp(m_00 - m_00) / exp(m_00 - m_00) = " + num(w) + ".";
    return Q;
}

std::vector<Step> masks_lesson(Places& p) {
    const Args P = run_of(p.at("padded.json")), C = {"run", p.at("causal.json"), "--causal"};
    const Args PW = tail(with(P, {"--stages", "weights"})), CW = tail(with(C, {"--stages", "weights"}));
    std::vector<Step> L;
    L.push_back(step("masks.padding", {with(P, {"--stages", "weights", "--batch", "1", "--head", "0"})},
                     {zero_keys(PW), pad_weight(PW)}));
    L.push_back(step("masks.row", {with(P, {"--stages", "masked_scores,weights", "--batch", "1", "--head", "0"})},
                     {visible_sum(PW)}));
    L.push_back(step("masks.causal", {with(C, {"--stages", "weights"})}, {causal_visible(CW, 2), first_query(CW)}));
    return L;
}

// ---- cross-attention -------------------------------------------------------------------

Question softmax_length(const Args& args) {
    const Run doc = compute(args);
    double sum = 0;
    for (std::size_t j = 0; j < dim(doc, "Tk"); ++j) sum += at(doc, "weights", 0, 0, 0, j);
    Question Q;
    Q.id = "cross-softmax";
    Q.text = "Over how many keys does each query's softmax run here: the " + str(dim(doc, "Tq")) + " target " +
             "tokens or the " + str(dim(doc, "Tk")) + " source tokens?";
    Q.answer = str(dim(doc, "Tk"));
    Q.number = double(dim(doc, "Tk"));
    Q.tolerance = 0;
    Q.accepted = {"source", "the source tokens", "source tokens"};
    Q.why = "Row 0 '" + label(doc, "query", 0, 0) + "' has " + str(dim(doc, "Tk")) + " weights, one per source " +
            "token, summing to " + num(sum) + ".";
    return Q;
}

Question same_sequence(const Args& args) {
    const Run doc = compute(args);
    bool same = dim(doc, "Tq") == dim(doc, "Tk");
    std::string words;
    for (std::size_t i = 0; same && i < dim(doc, "Tq"); ++i)
        same = label(doc, "query", 0, i) == label(doc, "key", 0, i), words += " " + label(doc, "query", 0, i);
    return yes_no("self-keys",
                  "In an encoder's self-attention (sentence.json), do the queries and the keys come from one and "
                  "the same sequence (yes or no)?",
                  same,
                  "Tq = " + str(dim(doc, "Tq")) + ", Tk = " + str(dim(doc, "Tk")) +
                      (same ? ", the same tokens:" + words : "") +
                      ". Q = x · W_Q and K = x · W_K read the same x; only cross-attention reads memory.");
}

std::vector<Step> cross_lesson(Places& p) {
    const std::string X = p.at("cross.json"), S = p.at("sentence.json");
    std::vector<Step> L;
    L.push_back(step("cross.memory", {run_of(X, {"--heads", "2", "--stages", "scores", "--head", "0"})},
                     cross_questions({X, "--heads", "2", "--stages", "scores"})));
    L.push_back(step("cross.softmax", {run_of(X, {"--heads", "2", "--stages", "weights", "--head", "0"})},
                     {softmax_length({X, "--heads", "2", "--stages", "weights"}),
                      strongest_key("cross.json", {X, "--heads", "2", "--stages", "scores,weights"}, 2)}));
    L.push_back(step("cross.self", {run_of(S, {"--heads", "2", "--stages", "scores", "--head", "0"})},
                     {same_sequence({S, "--heads", "2", "--stages", "scores"})}));
    return L;
}

// ---- keys versus values ----------------------------------------------------------------

Question k_equals_v(const Args& args) {
    const Run doc = compute(args);
    bool same = dim(doc, "Dk") == dim(doc, "Dv");
    for (std::size_t j = 0; same && j < dim(doc, "Tk"); ++j)
        for (std::size_t d = 0; same && d < dim(doc, "Dk"); ++d)
            same = at(doc, "K", 0, 0, j, d) == at(doc, "V", 0, 0, j, d);
    const auto row = [&](const char* s, std::size_t D) {
        std::string r;
        for (std::size_t d = 0; d < D; ++d) r += (d ? ", " : "") + num(at(doc, s, 0, 0, 0, d));
        return "[" + r + "]";
    };
    return yes_no("k-equals-v", "Keys and values are made from the same tokens x. Are K and V the same (yes or no)?",
                  same,
                  "Token 0 '" + label(doc, "key", 0, 0) + "', head 0: k_0 = " + row("K", dim(doc, "Dk")) +
                      ", v_0 = " + row("V", dim(doc, "Dv")) +
                      ". K = x · W_K and V = x · W_V: two matrices learned apart, one to be matched, one to be added.");
}

Question zeroed_value(const Args& args, std::size_t J, std::size_t q) {
    const Run doc = compute(args);
    const double w = at(doc, "weights", 0, 0, q, J);
    return yes_no("zeroed-key-value",
                  "After --zero-key " + str(J) + " (key '" + label(doc, "key", 0, J) + "' set to 0), is value '" +
                      label(doc, "key", 0, J) + "' still added into the output of query '" + label(doc, "query", 0, q) +
                      "' (yes or no)?",
                  w > 0,
                  "Its weight is still " + num(w) + " (head 0), so " + num(w) + " · v_" + str(J) +
                      " is added: zeroing the key changed the weight, not the value that is added.");
}

std::vector<Step> values_lesson(Places& p) {
    const std::string S = p.at("sentence.json");
    std::vector<Step> L;
    L.push_back(step("values.projections", {run_of(S, {"--heads", "2", "--stages", "K,V", "--head", "0"})},
                     {k_equals_v({S, "--heads", "2", "--stages", "K,V"})}));
    L.push_back(step("values.adds", {run_of(S, {"--heads", "2", "--stages", "weights,context", "--head", "0"})},
                     {keys_or_values({S, "--heads", "2", "--stages", "K,V,weights,context"}, 2)}));
    L.push_back(step("values.zeroed",
                     {run_of(S, {"--heads", "2", "--zero-key", "1", "--stages", "weights,context", "--head", "0"})},
                     {zeroed_value({S, "--heads", "2", "--zero-key", "1", "--stages", "weights"}, 1, 2)}));
    return L;
}

// ---- multi-head ------------------------------------------------------------------------

Question head_width(const Args& args) {
    const Run doc = compute(args);
    const std::size_t Dm = dim(doc, "Dm"), H = dim(doc, "H"), Dk = dim(doc, "Dk");
    Question Q;
    Q.id = "head-dk";
    Q.text = "x has Dm = " + str(Dm) + " features and --heads " + str(H) + " splits W_Q and W_K into " + str(H) +
             " heads. How many features (Dk) does each head's query have?";
    Q.answer = str(Dk);
    Q.number = double(Dk);
    Q.tolerance = 0;
    Q.why = "Dk = Dm / H = " + str(Dm) + " / " + str(H) + " = " + str(Dk) + ": head h reads columns h·Dk to " +
            "(h+1)·Dk - 1 of Q and K, and has its own scores and softmax.";
    return Q;
}

Question heads_agree(const Args& args, std::size_t q) {
    const Run doc = compute(args);
    const std::size_t a = argmax_row(doc, 0, 0, q), b = argmax_row(doc, 0, 1, q);
    const auto key = [&](std::size_t j) { return str(j) + " '" + label(doc, "key", 0, j) + "'"; };
    return yes_no(
        "heads-agree",
        "Do heads 0 and 1 make query '" + label(doc, "query", 0, q) + "' weight the same key most (yes or no)?",
        label(doc, "key", 0, a) == label(doc, "key", 0, b),
        "Head 0: key " + key(a) + " (" + num(at(doc, "weights", 0, 0, q, a)) + "); head 1: key " + key(b) + " (" +
            num(at(doc, "weights", 0, 1, q, b)) + "). Each head has its own W_Q and W_K slices, " +
            "so it can match on different features.");
}

Question concat_width(const Args& args) {
    const Run doc = compute(args);
    const std::size_t H = dim(doc, "H"), Dv = dim(doc, "Dv");
    Question Q;
    Q.id = "concat-width";
    Q.text = "Each of the " + str(H) + " heads gives a context of Dv = " + str(Dv) +
             " features per query. How many features go into W_O once the heads are put side by side?";
    Q.answer = str(H * Dv);
    Q.number = double(H * Dv);
    Q.tolerance = 0;
    Q.why = "H · Dv = " + str(H) + " · " + str(Dv) + " = " + str(H * Dv) +
            "; W_O maps them back to Dout = " + str(dim(doc, "Dout")) + ".";
    return Q;
}

std::vector<Step> heads_lesson(Places& p) {
    const std::string S = p.at("sentence.json");
    std::vector<Step> L;
    L.push_back(step("heads.split", {run_of(S, {"--heads", "2", "--stages", "Q", "--head", "0"})},
                     {head_width({S, "--heads", "2", "--stages", "Q"})}));
    L.push_back(step("heads.weights", {run_of(S, {"--heads", "2", "--stages", "weights"})},
                     {heads_agree({S, "--heads", "2", "--stages", "weights"}, 2)}));
    L.push_back(step("heads.concat", {run_of(S, {"--heads", "2", "--stages", "context,output"})},
                     {concat_width({S, "--heads", "2", "--stages", "context"})}));
    return L;
}

}  // namespace

const std::vector<Topic>& topics() {
    static const std::vector<Topic> all = {
        {"keys", "Keys and the score matrix, a tour of the others", keys_lesson, true},
        {"scaling", "Scaling by 1/sqrt(Dk), and what Dk does without it", scaling_lesson},
        {"masks", "Masks: padding and causal", masks_lesson},
        {"cross", "Cross-attention: keys from the encoder's memory", cross_lesson},
        {"values", "Keys versus values: what gets added", values_lesson},
        {"heads", "Multi-head attention", heads_lesson},
    };
    return all;
}

}  // namespace attnscope::cli::lesson
