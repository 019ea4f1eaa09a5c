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
#include "counts.hpp"
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

// `text` wrapped at spaces into lines of at most `width` columns, each after `indent`.
void put_wrapped(std::ostream& out, const std::string& indent, const std::string& text, std::size_t width) {
    std::string line;
    std::size_t at = 0;
    while (at < text.size()) {
        std::size_t end = text.find(' ', at);
        if (end == std::string::npos) end = text.size();
        const std::string word = text.substr(at, end - at);
        if (!line.empty() && display_width(indent + line + " " + word) > width) {
            out << indent << line << '\n';
            line.clear();
        }
        line += (line.empty() ? "" : " ") + word;
        at = end + 1;
    }
    if (!line.empty()) out << indent << line << '\n';
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
        const std::string origin = m.text_file.empty() ? "--text" : escape_control(m.text_file);
        if (const std::size_t bad = invalid_utf8_at(text); bad != std::string::npos)
            throw InputError(origin + ": invalid UTF-8 at byte " + std::to_string(bad) + " (the text must be UTF-8)");
        t.ids = tok->encode(text, !m.no_special).ids;
    }
    for (std::size_t i = 0; i < t.ids.size(); ++i) {
        const auto piece = tok ? tok->piece(t.ids[i]) : std::nullopt;
        t.labels.push_back(t.label(t.ids[i]));
        if (piece && (*piece == "[MASK]" || *piece == "<mask>")) t.masks.push_back(i);
    }
    return t;
}

void write_predictions_text(std::ostream& out, const Predictions& p, std::size_t width) {
    for (const PredictionRow& r : p.rows) {
        out << (p.at_masks ? "predicted at the masked token " : "predicted next token after token ") << r.position
            << " (" << escape_control(clip_fragment(r.token, 30)) << "): top " << r.top.size() << " of " << p.vocab
            << '\n';
        out << "  rank  probability  log-prob        id  token\n";
        for (std::size_t i = 0; i < r.top.size(); ++i) {
            char line[80];
            std::snprintf(line, sizeof line, "  %4zu  %11.4f  %8.4f  %8u  ", i + 1, r.top[i].pick.probability,
                          r.top[i].pick.log_probability, unsigned(r.top[i].pick.id));
            out << line << escape_control(clip_fragment(r.top[i].text, 30)) << '\n';
        }
    }
    if (!p.not_applied.empty()) {
        std::string list;
        for (const std::string& o : p.not_applied) list += (list.empty() ? "" : ", ") + o;
        put_wrapped(out, "  ",
                    "note: these are the unmodified model's predictions: " + list +
                        " changes the attention shown, not the forward pass that makes the logits",
                    width);
    }
    out << '\n';
}

void write_predictions_json(JsonWriter& w, const Predictions& p) {
    w.key("predictions").begin_object();
    w.key("at").value(p.at_masks ? "mask" : "next").key("vocab").value(p.vocab);
    w.key("unmodified").value(true).key("not_applied").begin_array();
    for (const std::string& o : p.not_applied) w.value(o);
    w.end_array().key("rows").begin_array();
    for (const PredictionRow& r : p.rows) {
        w.begin_object().key("position").value(r.position).key("token").value(r.token).key("top").begin_array();
        for (const PredictedToken& t : r.top) {
            w.begin_object().key("id").value(std::size_t(t.pick.id)).key("piece");
            if (t.piece)
                w.value(*t.piece);
            else
                w.value(nullptr);
            w.key("text").value(t.text).key("probability").value(t.pick.probability);
            w.key("log_probability").value(t.pick.log_probability).end_object();
        }
        w.end_array().end_object();
    }
    w.end_array().end_object();
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
         "With --model: the K most likely next tokens after the last (BERT: at each [MASK]) with their probabilities, "
         "from the unmodified model")
        ->check(count_in(1, kMaxPositions));
    g->add_option("--save-forward", m.save_forward,
                  "With --model: write the token ids, x and the logits of every position to this .npz");
}

namespace {

// {layer} N among the model's layers, which config.json counts.
void check_layer(const LanguageModel& model, const std::string& dir, std::size_t layer) {
    const std::size_t n = model.config().layers;
    if (layer < n) return;
    const char* key = model.config().family == LmFamily::gpt2 ? "n_layer" : "num_hidden_layers";
    throw UsageError("{layer} " + std::to_string(layer) + ": the model has " + std::to_string(n) + " layers, 0–" +
                     std::to_string(n - 1) + " (" + escape_control(dir) + "/config.json " + key + " " +
                     std::to_string(n) + ")");
}

// --predict's positions: after the last token, or BERT's [MASK]s (refused when there are none).
std::vector<std::size_t> predicted_positions(const LanguageModel& model, const Tokens& t) {
    if (model.config().family != LmFamily::bert) return {t.ids.size() - 1};
    if (t.masks.empty()) throw UsageError("--predict: BERT predicts at [MASK] tokens; the text has none");
    return t.masks;
}

// What to compute: the logits when --predict or --save-forward asks for them (every
// position for --save-forward, else --predict's alone).
ForwardRequest request_of(const RunOptions& o, const LanguageModel& model, const Tokens& t) {
    const ModelTextOptions& m = o.model_text;
    ForwardRequest r;
    r.threads = o.threads;
    r.float32 = o.dtype == Precision::float32;  // the forward in the run's precision
    r.logits = m.predict.has_value() || !m.save_forward.empty();
    if (m.predict) r.logit_rows = predicted_positions(model, t);
    if (!m.save_forward.empty()) r.logit_rows.clear();  // every position
    return r;
}

// The options of this run that change the layer's attention (the experiments, the masks and
// the attention's own settings), which the forward pass making the logits does not follow.
std::vector<std::string> options_not_applied(const RunOptions& o) {
    static const char* const kChanging[] = {
        "--zero-key",   "--temperature",   "--scale",    "--causal", "--no-causal",      "--causal-align",
        "--window",     "--alibi",         "--softcap",  "--rope",   "--rope-base",      "--rope-dim",
        "--rope-style", "--add-zero-attn", "--kv-heads", "--heads",  "--attn-mask-means"};
    std::vector<std::string> out;
    for (const char* flag : kChanging)
        if (o.given.count(flag)) out.push_back(flag);
    for (const auto& [name, file] : o.array_files) out.push_back("--" + name);
    return out;
}

// --predict K's table from the logits f of the positions predicted_positions gives.
Predictions predictions_of(const RunOptions& o, const LanguageModel& model, const ForwardResult& f, const Tokens& t) {
    Predictions p;
    p.at_masks = model.config().family == LmFamily::bert;
    p.vocab = f.logits.shape(1);
    p.not_applied = options_not_applied(o);
    for (std::size_t pos : predicted_positions(model, t)) {
        const auto at = std::find(f.logit_rows.begin(), f.logit_rows.end(), pos);
        if (at == f.logit_rows.end()) throw std::logic_error("--predict: no logits at position " + std::to_string(pos));
        PredictionRow row{pos, t.labels.at(pos), {}};
        for (const Pick& k :
             top_tokens(&f.logits(std::size_t(at - f.logit_rows.begin()), 0), p.vocab, *o.model_text.predict))
            row.top.push_back({k, t.tok ? t.tok->piece(k.id) : std::nullopt, t.label(k.id)});
        p.rows.push_back(std::move(row));
    }
    return p;
}

// Layer `layer`'s attention input (T, Dm) as x, the tokens as labels, the key masks given
// (--key_padding_mask FILE, read unless `bundle` holds them), and its weights and options as
// --checkpoint gives them.
void add_layer_of(const RunOptions& o, std::size_t limit, const Array& x, const Tokens& t, std::size_t layer,
                  Bundle& bundle, Spec& spec) {
    const std::string& dir = o.model_text.model;
    bundle.source = dir;
    for (const auto& [name, file] : o.array_files)
        if (!bundle.arrays.count(name)) bundle.arrays[name] = load_array(file, name, limit);
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

void add_model_input(const RunOptions& o, std::size_t limit, Bundle& bundle, Spec& spec, Predictions* predicted) {
    const ModelTextOptions& m = o.model_text;
    const LanguageModel model = LanguageModel::open(m.model, limit);
    const Tokens t = tokens_of(m, limit);
    const std::size_t layer = o.layer.value_or(0);
    check_layer(model, m.model, layer);
    model.check_layer_heads(layer);  // the forward pass checks the layers before it
    ForwardRequest r = request_of(o, model, t);
    r.stop_after = layer;
    if (!m.save_forward.empty()) check_output_target(m.save_forward, o.force, "{save-forward} " + m.save_forward);
    const ForwardResult f = model.forward(t.ids, r);
    add_layer_of(o, limit, f.attention_inputs[layer], t, layer, bundle, spec);
    if (o.explain && !o.json) std::cout << describe_forward(model.config(), layer, t.ids.size(), r.float32) << '\n';
    if (m.predict && predicted) *predicted = predictions_of(o, model, f, t);
    if (!m.save_forward.empty()) save_forward(o, f, t, layer);
}

struct ModelLayers::State {
    RunOptions o;
    std::size_t limit;
    LanguageModel model;
    Tokens t;
    ForwardResult f;
    std::optional<Predictions> predictions;
};

ModelLayers::ModelLayers(const RunOptions& o, std::size_t limit) {
    s_ = std::make_unique<State>(
        State{o, limit, LanguageModel::open(o.model_text.model, limit), tokens_of(o.model_text, limit), {}, {}});
    s_->model.check_ids(s_->t.ids);
    if (o.model_text.predict) predicted_positions(s_->model, s_->t);  // BERT without a [MASK]: before any work
}

ModelLayers::~ModelLayers() = default;

std::size_t ModelLayers::count() const { return s_->model.config().layers; }

void ModelLayers::check_layer(std::size_t layer) const { cli::check_layer(s_->model, s_->o.model_text.model, layer); }

void ModelLayers::forward() {
    ForwardRequest r = request_of(s_->o, s_->model, s_->t);
    r.every_input = true;
    r.stop_after = count() - 1;
    s_->model.check_layer_heads(count() - 1);  // the forward pass checks the layers before it
    s_->f = s_->model.forward(s_->t.ids, r);
    if (s_->o.model_text.predict) s_->predictions = predictions_of(s_->o, s_->model, s_->f, s_->t);
}

const Predictions* ModelLayers::predictions() const { return s_->predictions ? &*s_->predictions : nullptr; }

void ModelLayers::add_layer(std::size_t layer, Bundle& bundle, Spec& spec) const {
    add_layer_of(s_->o, s_->limit, s_->f.attention_inputs.at(layer), s_->t, layer, bundle, spec);
}

std::string ModelLayers::describe(std::size_t layer) const {
    return describe_forward(s_->model.config(), layer, s_->t.ids.size(), s_->o.dtype == Precision::float32);
}

}  // namespace attnscope::cli
