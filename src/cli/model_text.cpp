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

std::optional<Tokenizer> tokenizer_of(const std::string& dir, std::size_t limit, bool needed) {
    try {
        return load_tokenizer(dir, limit);
    } catch (const InputError& e) {
        if (needed) throw InputError(std::string(e.what()) + "; --tokens ID,... needs none");
        return std::nullopt;
    }
}

Array text_array(const std::vector<std::string>& labels) {
    Array a;
    a.dtype = "text";
    a.shape = {labels.size()};
    a.strings = labels;
    a.origin = "the tokens";
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

void add_model_source_options(CLI::App* cmd, RunOptions& o) {
    ModelTextOptions& m = o.model_text;
    auto* g = cmd->add_option_group(kModelText);
    g->add_option("--model", m.model,
                  "A Hugging Face model folder (config.json, model.safetensors or pytorch_model.bin, tokenizer.json): "
                  "x is its layer --layer's attention input (default layer 0) on --text");
    g->add_option("--text", m.text, "With --model: the text, tokenized by the model's own tokenizer");
    g->add_option("--text-file", m.text_file, "With --model: the text, from this file");
    g->add_option("--tokens", m.tokens, "With --model: token ids (e.g. 464,3797), no tokenizer needed");
    g->add_flag("--no-special-tokens", m.no_special, "With --text: leave out the tokenizer's special tokens");
}

void add_model_text_options(CLI::App* run, RunOptions& o) {
    ModelTextOptions& m = o.model_text;
    add_model_source_options(run, o);
    auto* g = run->get_option_group(kModelText);
    g->add_option_function<std::size_t>(
        "--predict", [&m](std::size_t k) { m.predict = k; },
        "With --model: the K most likely next tokens after the last (BERT: at each [MASK]) with their probabilities");
    g->add_option("--save-forward", m.save_forward,
                  "With --model: write the token ids, x and the logits of every position to this .npz");
}

namespace {

// The refusals of --model, before any work.
void check_model_options(const RunOptions& o) {
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
}

// {layer} N among the model's layers, which config.json counts.
void check_layer(const LanguageModel& model, const std::string& dir, std::size_t layer) {
    const std::size_t n = model.config().layers;
    if (layer < n) return;
    const char* key = model.config().family == LmFamily::gpt2 ? "n_layer" : "num_hidden_layers";
    throw UsageError("{layer} " + std::to_string(layer) + ": the model has " + std::to_string(n) + " layers, 0–" +
                     std::to_string(n - 1) + " (" + escape_control(dir) + "/config.json " + key + " " +
                     std::to_string(n) + ")");
}

// What to compute: the logits when --predict or --save-forward asks for them (at --predict's
// positions: after the last token, or BERT's [MASK]s).
ForwardRequest request_of(const RunOptions& o, const LanguageModel& model, const Tokens& t) {
    const ModelTextOptions& m = o.model_text;
    ForwardRequest r;
    r.threads = o.threads;
    r.float32 = o.dtype == Precision::float32;  // the forward in the run's precision
    r.logits = m.predict.has_value() || !m.save_forward.empty();
    const bool bert = model.config().family == LmFamily::bert;
    if (m.predict && m.save_forward.empty()) {
        if (bert && t.masks.empty()) throw UsageError("--predict: BERT predicts at [MASK] tokens; the text has none");
        r.logit_rows = bert ? t.masks : std::vector<std::size_t>{t.ids.size() - 1};
    }
    return r;
}

void maybe_predict(const RunOptions& o, const LanguageModel& model, const ForwardResult& f, const Tokens& t) {
    if (!o.model_text.predict) return;
    const bool bert = model.config().family == LmFamily::bert;
    print_predictions(f, t, *o.model_text.predict, bert ? "at the masked" : "next token after");
}

// Layer `layer`'s attention input (T, Dm) as x, the tokens as labels, and its weights and
// options as --checkpoint gives them.
void add_layer_of(const RunOptions& o, std::size_t limit, const Array& x, const Tokens& t, std::size_t layer,
                  Bundle& bundle, Spec& spec) {
    const std::string& dir = o.model_text.model;
    bundle.source = dir;
    bundle.arrays["x"] = x;  // its numbers shared, not copied
    bundle.arrays["x"].origin = dir + ": layer " + std::to_string(layer) + "'s input";
    bundle.arrays["query_tokens"] = text_array(t.labels);
    RunOptions c = o;
    c.checkpoint = dir;
    c.layer = layer;
    c.every_layer = false;
    add_checkpoint_layer(c, limit, bundle, spec);
}

void save_forward(const RunOptions& o, const ForwardResult& f, const Tokens& t, std::size_t layer) {
    const std::vector<std::int64_t> ids(t.ids.begin(), t.ids.end());
    const Array& a = f.attention_inputs[layer];  // (T, Dm)
    const std::vector<double> x = a.doubles();   // exact for float32
    AtomicFile file(o.model_text.save_forward, o.force);
    write_npz(file, {{"ids", {ids.size()}, DType::int64, ids.data()},
                     {"x", {a.shape[0], a.shape[1]}, DType::float64, x.data()},
                     {"logits", {f.logits.shape(0), f.logits.shape(1)}, DType::float64, f.logits.data()}});
    file.commit();
}

}  // namespace

void add_model_input(const RunOptions& o, std::size_t limit, Bundle& bundle, Spec& spec) {
    const ModelTextOptions& m = o.model_text;
    check_model_options(o);
    const LanguageModel model = LanguageModel::open(m.model, limit);
    const Tokens t = tokens_of(m, limit);
    const std::size_t layer = o.layer.value_or(0);
    check_layer(model, m.model, layer);
    ForwardRequest r = request_of(o, model, t);
    r.stop_after = layer;
    if (!m.save_forward.empty()) check_output_target(m.save_forward, o.force, "{save-forward} " + m.save_forward);
    const ForwardResult f = model.forward(t.ids, r);
    add_layer_of(o, limit, f.attention_inputs[layer], t, layer, bundle, spec);
    if (o.explain) std::cout << describe_forward(model.config(), layer, t.ids.size(), r.float32) << '\n';
    maybe_predict(o, model, f, t);
    if (!m.save_forward.empty()) save_forward(o, f, t, layer);
}

struct ModelLayers::State {
    RunOptions o;
    std::size_t limit;
    LanguageModel model;
    Tokens t;
    ForwardResult f;
};

ModelLayers::ModelLayers(const RunOptions& o, std::size_t limit) {
    check_model_options(o);
    s_ = std::make_unique<State>(
        State{o, limit, LanguageModel::open(o.model_text.model, limit), tokens_of(o.model_text, limit), {}});
    s_->model.check_ids(s_->t.ids);
}

ModelLayers::~ModelLayers() = default;

std::size_t ModelLayers::count() const { return s_->model.config().layers; }

void ModelLayers::check_layer(std::size_t layer) const { cli::check_layer(s_->model, s_->o.model_text.model, layer); }

void ModelLayers::forward() {
    ForwardRequest r = request_of(s_->o, s_->model, s_->t);
    r.every_input = true;
    r.stop_after = count() - 1;
    s_->f = s_->model.forward(s_->t.ids, r);
    maybe_predict(s_->o, s_->model, s_->f, s_->t);
}

void ModelLayers::add_layer(std::size_t layer, Bundle& bundle, Spec& spec) const {
    add_layer_of(s_->o, s_->limit, s_->f.attention_inputs.at(layer), s_->t, layer, bundle, spec);
}

std::string ModelLayers::describe(std::size_t layer) const {
    return describe_forward(s_->model.config(), layer, s_->t.ids.size(), s_->o.dtype == Precision::float32);
}

}  // namespace attnscope::cli
