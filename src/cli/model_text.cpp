// `run --model DIR --text S [--layer N]`: the model's own tokens and its forward pass (lm
// layer) up to layer N's attention input, which the run then shows with the layer's own
// weights and options, the tokens as labels. --predict K prints the top K tokens the model
// predicts (the next one after the last token; BERT's at each [MASK]).
#include "model_text.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <numeric>
#include <string>
#include <vector>

#include "attnscope/base/errors.hpp"
#include "attnscope/base/text.hpp"
#include "attnscope/io/read.hpp"
#include "attnscope/io/write.hpp"
#include "attnscope/lm/forward.hpp"
#include "attnscope/tokenize/tokenizer.hpp"
#include "run.hpp"

namespace attnscope::cli {
namespace {

constexpr const char* kModelText = "Model and text";

// The tokens to run: ids, their labels, and which are [MASK] (for BERT's --predict).
struct Tokens {
    std::vector<std::uint32_t> ids;
    std::vector<std::string> labels;
    std::vector<std::size_t> masks;
    std::optional<Tokenizer> tok;  // the model's, when it has one
    std::string label(std::uint32_t id) const {
        return tok && tok->piece(id) ? tok->readable_piece(id) : std::to_string(id);
    }
};

std::optional<Tokenizer> tokenizer_of(const std::string& dir, std::size_t limit, bool needed) {
    try {
        return load_tokenizer(dir, limit);
    } catch (const InputError& e) {
        if (needed) throw InputError(std::string(e.what()) + "; --tokens ID,... needs none");
        return std::nullopt;
    }
}

Tokens tokens_of(const ModelTextOptions& m, std::size_t limit) {
    const bool given_ids = !m.tokens.empty();
    Tokens t;
    t.tok = tokenizer_of(m.model, limit, !given_ids);
    const std::optional<Tokenizer>& tok = t.tok;
    if (given_ids) {
        t.ids = parse_ids(m.tokens, "--tokens");
    } else {
        const std::string text = m.text_file.empty() ? m.text : read_file(m.text_file, limit);
        t.ids = tok->encode(text, !m.no_special).ids;
    }
    for (std::size_t i = 0; i < t.ids.size(); ++i) {
        const auto piece = tok ? tok->piece(t.ids[i]) : std::nullopt;
        t.labels.push_back(t.label(t.ids[i]));
        if (piece && (*piece == "[MASK]" || *piece == "<mask>")) t.masks.push_back(i);
    }
    return t;
}

Array text_array(const std::vector<std::string>& labels) {
    Array a;
    a.dtype = "text";
    a.shape = {labels.size()};
    a.strings = labels;
    a.origin = "the tokens";
    return a;
}

Array x_array(const Tensor<double, 2>& x, const std::string& origin) {
    Array a;
    a.dtype = "float64";
    a.shape = {x.shape(0), x.shape(1)};
    a.values.assign(x.begin(), x.end());
    a.origin = origin;
    return a;
}

// The top K of each logits row, as probabilities (softmax over the vocabulary).
void print_predictions(const ForwardResult& f, const Tokens& t, std::size_t k, const std::string& where) {
    for (std::size_t r = 0; r < f.logit_rows.size(); ++r) {
        const std::size_t pos = f.logit_rows[r], V = f.logits.shape(1);
        const double* row = &f.logits(r, 0);
        const double top = *std::max_element(row, row + V);
        double sum = 0;
        for (std::size_t v = 0; v < V; ++v) sum += std::exp(row[v] - top);
        std::vector<std::size_t> order(V);
        std::iota(order.begin(), order.end(), std::size_t{0});
        const std::size_t n = std::min(k, V);
        std::partial_sort(order.begin(), order.begin() + std::ptrdiff_t(n), order.end(),
                          [&](std::size_t a, std::size_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
        std::cout << where << " token " << pos << " (" << escape_control(t.labels[pos]) << "): top " << n << " of " << V
                  << "\n";
        for (std::size_t i = 0; i < n; ++i) {
            char line[64];
            std::snprintf(line, sizeof line, "  %2zu  %8.4f  %8zu  ", i + 1, std::exp(row[order[i]] - top) / sum,
                          order[i]);
            std::cout << line << escape_control(t.label(std::uint32_t(order[i]))) << '\n';
        }
    }
    std::cout << '\n';
}

}  // namespace

std::vector<std::uint32_t> parse_ids(const std::string& text, const std::string& flag) {
    std::vector<std::uint32_t> ids;
    std::size_t at = 0;
    while (at <= text.size()) {
        std::size_t e = text.find(',', at);
        if (e == std::string::npos) e = text.size();
        std::string item = text.substr(at, e - at);
        item.erase(0, item.find_first_not_of(' '));
        item.erase(item.find_last_not_of(' ') + 1);
        if (item.empty() || item.size() > 10 || item.find_first_not_of("0123456789") != std::string::npos ||
            std::stoull(item) > 0x7FFFFFFFull)
            throw UsageError(flag + " " + escape_control(clip_fragment(text, 60)) +
                             ": expected ids separated by commas, e.g. 464,3797; found '" +
                             escape_control(clip_fragment(item, 20)) + "'");
        ids.push_back(std::uint32_t(std::stoull(item)));
        at = e + 1;
    }
    return ids;
}

void add_model_text_options(CLI::App* run, RunOptions& o) {
    ModelTextOptions& m = o.model_text;
    auto* g = run->add_option_group(kModelText);
    g->add_option("--model", m.model,
                  "A Hugging Face model folder (config.json, model.safetensors or pytorch_model.bin, tokenizer.json): "
                  "x is its layer --layer's attention input (default layer 0) on --text");
    g->add_option("--text", m.text, "With --model: the text, tokenized by the model's own tokenizer");
    g->add_option("--text-file", m.text_file, "With --model: the text, from this file");
    g->add_option("--tokens", m.tokens, "With --model: token ids (e.g. 464,3797), no tokenizer needed");
    g->add_flag("--no-special-tokens", m.no_special, "With --text: leave out the tokenizer's special tokens");
    g->add_option_function<std::size_t>(
        "--predict", [&m](std::size_t k) { m.predict = k; },
        "With --model: the K most likely next tokens after the last (BERT: at each [MASK]) with their probabilities");
    g->add_option("--save-forward", m.save_forward,
                  "With --model: write the token ids, x and the logits of every position to this .npz");
}

void add_model_input(const RunOptions& o, std::size_t limit, Bundle& bundle, Spec& spec) {
    const ModelTextOptions& m = o.model_text;
    const std::pair<bool, const char*> others[] = {{!o.bundle.empty(), "a bundle"},
                                                   {!o.array_files.empty(), "--x and the weights' options"},
                                                   {!o.checkpoint.empty(), "--checkpoint"},
                                                   {!o.prefix.empty(), "--prefix"},
                                                   {!o.qkv.empty(), "--qkv"}};
    for (const auto& [given, what] : others)
        if (given)
            throw UsageError(std::string("--model: makes x from the text with the model's weights; ") + what +
                             " cannot be given with it");
    const int sources = int(!m.text.empty()) + int(!m.text_file.empty()) + int(!m.tokens.empty());
    if (sources != 1) throw UsageError("--model: give one of --text, --text-file or --tokens");
    if (m.predict && (o.json || !o.jsonl.empty()))
        throw UsageError("--predict: a table of the printed report; run it without --json/--jsonl");
    const LanguageModel model = LanguageModel::open(m.model, limit);
    const Tokens t = tokens_of(m, limit);
    const std::size_t layer = o.layer.value_or(0);
    ForwardRequest r;
    r.stop_after = layer;
    r.threads = o.threads;
    r.float32 = o.dtype == Precision::float32;  // the forward in the run's precision
    r.logits = m.predict.has_value() || !m.save_forward.empty();
    const bool bert = model.config().family == LmFamily::bert;
    if (m.predict && m.save_forward.empty()) {
        if (bert && t.masks.empty()) throw UsageError("--predict: BERT predicts at [MASK] tokens; the text has none");
        r.logit_rows = bert ? t.masks : std::vector<std::size_t>{t.ids.size() - 1};
    }
    if (!m.save_forward.empty()) check_output_target(m.save_forward, o.force, "{save-forward} " + m.save_forward);
    const ForwardResult f = model.forward(t.ids, r);
    bundle.source = m.model;
    bundle.arrays["x"] = x_array(f.attention_inputs[layer], m.model + ": layer " + std::to_string(layer) + "'s input");
    bundle.arrays["query_tokens"] = text_array(t.labels);
    RunOptions c = o;
    c.checkpoint = m.model;
    c.layer = layer;
    add_checkpoint_layer(c, limit, bundle, spec);
    if (o.explain) std::cout << describe_forward(model.config(), layer, t.ids.size(), r.float32) << '\n';
    if (m.predict) print_predictions(f, t, *m.predict, bert ? "at the masked" : "next token after");
    if (!m.save_forward.empty()) {
        const std::vector<std::int64_t> ids(t.ids.begin(), t.ids.end());
        AtomicFile file(m.save_forward, o.force);
        write_npz(file, {{"ids", {ids.size()}, DType::int64, ids.data()},
                         {"x",
                          {f.attention_inputs[layer].shape(0), f.attention_inputs[layer].shape(1)},
                          DType::float64,
                          f.attention_inputs[layer].data()},
                         {"logits", {f.logits.shape(0), f.logits.shape(1)}, DType::float64, f.logits.data()}});
        file.commit();
    }
}

}  // namespace attnscope::cli
