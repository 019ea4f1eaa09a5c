// `run --model DIR (--text S | --text-file F | --tokens IDS)`: a model folder and text in,
// the lm layer's forward pass up to the chosen layer's attention input, then the run as
// with --checkpoint on that layer, the tokens as labels (docs/models.md).
#pragma once

#include <CLI/CLI.hpp>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "attnscope/base/json_writer.hpp"
#include "attnscope/io/array.hpp"
#include "attnscope/lm/forward.hpp"
#include "attnscope/model/model.hpp"
#include "attnscope/tokenize/tokenizer.hpp"

namespace attnscope::cli {

struct RunOptions;

struct ModelTextOptions {
    std::string model;  // a Hugging Face model folder
    std::string text, text_file, tokens;
    bool no_special = false;             // --no-special-tokens
    std::optional<std::size_t> predict;  // --predict K
    std::string save_forward;            // --save-forward FILE.npz: ids, x and logits
};

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

// --predict K: the K most likely tokens at each position predicted (the next one after the
// last token; BERT: at each [MASK]), from the unmodified model's logits.
struct PredictedToken {
    Pick pick;                         // id, probability, log-probability
    std::optional<std::string> piece;  // its piece in the vocabulary (none without a tokenizer)
    std::string text;                  // as the labels show it ("␣cat"), or the id
};
struct PredictionRow {
    std::size_t position = 0;
    std::string token;  // the token there, as the labels show it
    std::vector<PredictedToken> top;
};
struct Predictions {
    bool at_masks = false;  // BERT's [MASK]s; else the next token after the last
    std::size_t vocab = 0;
    // The run's options that change the shown layer's attention: the forward pass that
    // makes the logits runs the model unmodified, so the predictions do not follow them.
    std::vector<std::string> not_applied;
    std::vector<PredictionRow> rows;
};
// The printed table (headings, a line per token, then a note when options are not applied),
// within `width` columns; the JSON member "predictions" (docs/json.md).
void write_predictions_text(std::ostream& out, const Predictions& p, std::size_t width = 80);
void write_predictions_json(JsonWriter& w, const Predictions& p);

// --tokens' ids, or --text/--text-file through the model's tokenizer (InputError naming the
// files looked for, and that --tokens needs none, when it has none).
Tokens tokens_of(const ModelTextOptions& m, std::size_t limit);

// "464,3797, 50256" → ids (--tokens, tokens --decode); UsageError naming `flag` otherwise.
std::vector<std::uint32_t> parse_ids(const std::string& text, const std::string& flag);

// --model, --text, --text-file, --tokens, --no-special-tokens (report's), and run's
// --predict, --save-forward.
void add_model_source_options(CLI::App* cmd, RunOptions& o);
void add_model_text_options(CLI::App* run, RunOptions& o);
// With --model: x (the layer's attention input, (T, Dm)) and the token labels into `bundle`,
// the layer's weights and options as --checkpoint gives them; --predict's predictions into
// `predicted` when given.
void add_model_input(const RunOptions& o, std::size_t limit, Bundle& bundle, Spec& spec,
                     Predictions* predicted = nullptr);

// --model with every layer (`run --layer all`, `report --model`): ONE forward pass that
// keeps every layer's attention input, then each layer's inputs as add_model_input gives them.
class ModelLayers {
   public:
    // The options checked, the model opened, the text tokenized; nothing run yet.
    ModelLayers(const RunOptions& o, std::size_t limit);
    ~ModelLayers();
    std::size_t count() const;  // the model's layers (config.json)
    // UsageError for a layer beyond count(), naming config.json's key.
    void check_layer(std::size_t layer) const;
    // The forward pass, every layer's attention input kept, and --predict's predictions.
    void forward();
    const Predictions* predictions() const;  // with --predict, once forward() has run
    // Layer `layer`'s x and labels into `bundle` (which holds no weights, or only the key
    // masks given with --key_padding_mask), its weights and options as --checkpoint gives
    // them into `bundle` and `spec`.
    void add_layer(std::size_t layer, Bundle& bundle, Spec& spec) const;
    // --explain: how layer `layer`'s x was made.
    std::string describe(std::size_t layer) const;

   private:
    struct State;
    std::unique_ptr<State> s_;
};

}  // namespace attnscope::cli
