// `run --model DIR (--text S | --text-file F | --tokens IDS)`: a model folder and text in,
// the lm layer's forward pass up to the chosen layer's attention input, then the run as
// with --checkpoint on that layer, the tokens as labels (docs/models.md).
#pragma once

#include <CLI/CLI.hpp>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "attnscope/io/array.hpp"
#include "attnscope/model/model.hpp"

namespace attnscope::cli {

struct RunOptions;

struct ModelTextOptions {
    std::string model;  // a Hugging Face model folder
    std::string text, text_file, tokens;
    bool no_special = false;             // --no-special-tokens
    std::optional<std::size_t> predict;  // --predict K
    std::string save_forward;            // --save-forward FILE.npz: ids, x and logits
};

// "464,3797, 50256" → ids (--tokens, tokens --decode); UsageError naming `flag` otherwise.
std::vector<std::uint32_t> parse_ids(const std::string& text, const std::string& flag);

// --model, --text, --text-file, --tokens, --no-special-tokens, --predict, --save-forward.
void add_model_text_options(CLI::App* run, RunOptions& o);
// With --model: x (the layer's attention input, (T, Dm)) and the token labels into `bundle`,
// the layer's weights and options as --checkpoint gives them; prints --predict's table.
void add_model_input(const RunOptions& o, std::size_t limit, Bundle& bundle, Spec& spec);

}  // namespace attnscope::cli
