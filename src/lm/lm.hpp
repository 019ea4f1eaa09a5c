// Internal to the lm layer: config.json's fields, and the operations of a block.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "attnscope/io/checkpoint.hpp"
#include "attnscope/lm/forward.hpp"

namespace attnscope::lm {

// config.json's top-level members, read by key; a JSON null counts as absent. Every
// error is one line "PATH: KEY: what".
class ConfigFile {
   public:
    explicit ConfigFile(const Checkpoint& c) : c_(c) {}
    std::optional<nlohmann::json> get(const std::string& key) const;
    // Missing: `otherwise`, or refused when there is none.
    std::size_t count(const std::string& key, std::optional<std::size_t> otherwise = std::nullopt) const;
    double number(const std::string& key, double otherwise) const;
    bool flag(const std::string& key, bool otherwise) const;
    std::string text(const std::string& key, const std::string& otherwise) const;
    [[noreturn]] void fail(const std::string& key, const std::string& what) const;

   private:
    const Checkpoint& c_;
};

LmConfig read_config(const Checkpoint& c);

// A matrix of weights as double, row-major, with the layout it is stored in: `torch`
// (out, in) as nn.Linear, else (in, out) as GPT-2's Conv1D.
struct Linear {
    Buffer<double> w;
    std::size_t in = 0, out = 0;
    bool torch = true;
    std::vector<double> b;  // (out) or empty
};

// A LayerNorm (w and b) or an RMSNorm (w only) over the last axis.
struct Norm {
    std::vector<double> w, b;
    double eps = 0;
    bool rms = false;
};

// y (T, out) = x (T, in) · W (+ b); W as stored (transposed for torch's (out, in)).
Tensor<double, 2> apply(const Linear& l, const Tensor<double, 2>& x);
// In place, row by row: LayerNorm (x - mean) / sqrt(var + eps) · w + b, var the biased
// variance; RMSNorm x / sqrt(mean(x²) + eps) · w.
void apply(const Norm& n, Tensor<double, 2>& x);
// In place: the activation, elementwise.
void activate(Activation a, Tensor<double, 2>& x);

}  // namespace attnscope::lm
