// The catalogue of mistakes the check diagnoses, and the forms each takes in a run.
#include <algorithm>
#include <cmath>
#include <functional>

#include "check_internal.hpp"

namespace attnscope::check_detail {
namespace {

const std::vector<Mistake> kCatalogue = {
    {"no-scale", "scores not scaled",
     "The scores are Q·Kᵀ without the factor 1/√Dk. Dot products grow with the width Dk, so unscaled scores "
     "are large and softmax turns nearly one-hot.",
     "scores = Q @ K.T / sqrt(d_k)"},
    {"scale-by-dk", "scores divided by Dk, not √Dk",
     "The scores were divided by Dk instead of √Dk: too small, so softmax comes out too flat.",
     "divide by sqrt(d_k), not d_k"},
    {"scale-multiplied", "scores multiplied by √Dk",
     "The scores were multiplied by √Dk where they must be divided by it: far too large, so softmax is "
     "nearly one-hot.",
     "scores = Q @ K.T / sqrt(d_k) (a division)"},
    {"scale-by-dmodel", "scores divided by √Dm, not √Dk",
     "The scores were divided by the square root of the model width d_model (or of all heads together, "
     "H·d_k) instead of √d_k, the width of one head: with H heads they are √H times too small, so softmax "
     "comes out too flat.",
     "scores = Q @ K.T / sqrt(d_k), with d_k = d_model // n_heads (the last axis of one head's Q)"},
    {"softmax-over-queries", "softmax over the query axis",
     "Softmax ran down each column (over the queries) instead of along each row (over the keys): every "
     "column sums to 1, the rows do not. Each query's weights must be a distribution over the keys.",
     "softmax over the last axis: softmax(scores, axis=-1) (dim=-1 in PyTorch)"},
    {"mask-inverted", "mask polarity inverted",
     "The mask hides the keys that should be seen and shows those that should be hidden. key_padding_mask "
     "is 1/True for PAD (ignored); an 'allowed' matrix such as tril is True where a key may be seen.",
     "fill -inf where the key must be hidden: where(allowed, scores, -inf), masked_fill(pad_mask, -inf)"},
    {"mask-fill-zero", "masked scores set to 0, not -inf",
     "Hidden keys got the score 0 instead of -inf. exp(0) = 1, not 0: the hidden keys still receive weight.",
     "fill masked scores with -inf (or a large negative number such as -1e9), never 0"},
    {"mask-after-softmax", "mask applied after softmax",
     "The weights of hidden keys were zeroed after the softmax, without renormalising: the rows no longer "
     "sum to 1.",
     "mask the scores with -inf before the softmax"},
    {"causal-includes-next", "causal mask lets query i see key i+1",
     "The causal mask allows j <= i+1: an off-by-one that shows each position the next token, the one it "
     "is meant to predict.",
     "allow j <= i: np.tril(np.ones((T, T))) (torch.tril), or hide np.triu(..., k=1)"},
    {"causal-excludes-self", "causal mask hides the diagonal",
     "The causal mask allows only j < i: a query cannot see its own position, and the first query sees "
     "nothing at all.",
     "allow j <= i, the diagonal included: np.tril(np.ones((T, T)))"},
    {"causal-upper", "causal mask keeps the future",
     "The causal mask keeps j >= i, the upper triangle (np.triu), where the lower one (np.tril, the past) was "
     "meant.",
     "allow the lower triangle: np.tril / torch.tril"},
    {"padding-on-queries", "padding mask along the query axis",
     "The padding mask hides rows (PAD queries) instead of columns (PAD keys): PAD keys are still attended "
     "to, and PAD queries see nothing.",
     "broadcast key_padding_mask over the key axis: mask[:, None, None, :] for (B, H, Tq, Tk) scores"},
    {"weights-transposed", "projection with Wᵀ",
     "A projection computed x · Wᵀ instead of x · W. The math layout is (in, out); PyTorch's nn.Linear "
     "stores (out, in) and computes x · Wᵀ.",
     "x @ W for (in, out) weights (x @ W.T only for nn.Linear's (out, in) storage)"},
    {"heads-reshaped-not-transposed", "heads split without a transpose",
     "(B, T, H·D) was viewed as (B, H, T, D) without a transpose (or merged back that way): positions and "
     "features get mixed across heads.",
     "q.reshape(B, T, H, D).transpose(0, 2, 1, 3); merge with the inverse transpose before reshaping"},
    {"heads-interleaved", "heads split as (B, T, Dk, H)",
     "(B, T, H·D) was reshaped to (B, T, D, H) and transposed to (B, H, T, D) (or merged back that way): "
     "head h gets the features h, H+h, 2H+h, ... instead of its block h·D .. h·D+D-1, so the features "
     "are permuted across heads.",
     "q.reshape(B, T, H, D).transpose(0, 2, 1, 3): the head axis before the feature axis; merge with "
     "z.transpose(0, 2, 1, 3).reshape(B, T, H * D)"},
    {"scores-transposed", "scores computed as K · Qᵀ",
     "The scores are K·Qᵀ: rows are keys and columns queries, so the softmax along a row normalises over "
     "queries.",
     "scores = Q @ K.T (one row per query, one column per key)"},
    {"values-are-keys", "context from the keys",
     "The context was computed as weights · K. Keys are addresses: they only decide the weights. The "
     "payload mixed into the output is the values.",
     "context = weights @ V"},
    {"no-output-projection", "output projection missing",
     "The heads were concatenated and returned without the output projection W_O.",
     "output = concat(heads) @ W_O (+ b_O)"},
    {"bias-missing", "projection bias missing", "A projection left out its bias: x · W without + b.",
     "add b_Q, b_K, b_V (and b_O) after each product"},
    {"mask-ignored", "no mask applied", "The mask was not applied at all: padding or future keys were attended to.",
     "fill -inf where the mask is false, before the softmax"},
    {"masked-rows-nan", "fully masked rows are NaN",
     "A query row whose every key is masked came out NaN (softmax of all -inf is 0/0). attnscope, like "
     "PyTorch's newer safe softmax, gives such a row all-zero weights.",
     "zero the rows with no visible key: np.where(mask.any(-1, keepdims=True), weights, 0)"},
    {"masked-rows-uniform", "fully masked rows are uniform",
     "A query row whose every key is masked got uniform weights 1/Tk: the masked scores were a large finite "
     "number (such as -1e9) instead of -inf, so a row with nothing visible spreads evenly.",
     "fill with -inf and zero the rows with no visible key"},
};

std::string weight_list(const std::array<bool, 4>& which, const char* const names[4]) {
    std::vector<std::string> w;
    for (int i = 0; i < 4; ++i)
        if (which[std::size_t(i)]) w.emplace_back(names[i]);
    if (w.size() <= 1) return join(w);
    return join(std::vector<std::string>(w.begin(), w.end() - 1)) + " and " + w.back();
}

Mutation mutation(std::string id, std::string variant, Stage entry, const std::function<void(Mutation&)>& set = {}) {
    Mutation m;
    m.id = std::move(id), m.variant = std::move(variant), m.entry = entry;
    if (set) set(m);
    return m;
}

// The mistakes of the masks: inverted, filled with 0, applied after the softmax or not at
// all, the causal rule off by one or upside down, padding on the wrong axis.
void mask_mutations(const Run& r, std::vector<Mutation>& out) {
    const MaskRule& rule = r.pr.mask;
    const bool padding = rule.has_padding(), causal = rule.causal();
    auto edit = [](MaskEdit e) { return [e](Mutation& m) { m.mask = e; }; };
    auto fill = [](Fill f) { return [f](Mutation& m) { m.fill = f; }; };
    if (rule.masking() || padding || causal) {
        out.push_back(mutation("mask-inverted", "", kMask, edit(MaskEdit::inverted)));
        if (padding && causal) {
            out.push_back(
                mutation("mask-inverted", "the padding mask's polarity only", kMask, edit(MaskEdit::padding_inverted)));
            out.push_back(mutation("mask-inverted", "the causal part only", kMask, edit(MaskEdit::causal_inverted)));
        }
        out.push_back(mutation("mask-fill-zero", "", kMaskedScores, fill(Fill::zero)));
        out.push_back(mutation("mask-after-softmax", "", kMaskedScores, fill(Fill::after_softmax)));
        out.push_back(mutation("mask-ignored", "", kMaskedScores, fill(Fill::ignored)));
    }
    if (causal) {
        out.push_back(mutation("causal-includes-next", "", kMask, edit(MaskEdit::includes_next)));
        out.push_back(mutation("causal-excludes-self", "", kMask, edit(MaskEdit::excludes_self)));
        out.push_back(mutation("causal-upper", "", kMask, edit(MaskEdit::upper)));
    }
    if (padding && r.Tq == r.Tk) out.push_back(mutation("padding-on-queries", "", kMask, edit(MaskEdit::on_queries)));
}

// The sets of the four projections (Q, K, V, O) a mistake may touch: all that `can`, the
// three input projections, and each one alone.
std::vector<std::array<bool, 4>> projection_sets(const std::array<bool, 4>& can) {
    std::array<bool, 4> qkv = can;
    qkv[3] = false;
    std::vector<std::array<bool, 4>> sets = {can, qkv};
    for (std::size_t w = 0; w < 4; ++w)
        if (can[w]) {
            std::array<bool, 4> one{};
            one[w] = true;
            sets.push_back(one);
        }
    std::vector<std::array<bool, 4>> unique;
    for (const auto& s : sets)
        if (s != std::array<bool, 4>{} && std::find(unique.begin(), unique.end(), s) == unique.end())
            unique.push_back(s);
    return unique;
}

// The mistakes of the projections: Wᵀ, a bias left out, heads split or merged by a
// reshape without a transpose.
void projection_mutations(const Run& r, std::vector<Mutation>& out) {
    static const char* const kW[4] = {"W_Q", "W_K", "W_V", "W_O"};
    static const char* const kB[4] = {"b_Q", "b_K", "b_V", "b_O"};
    std::array<bool, 4> square_w{}, biases{};
    for (int w = 0; w < 4; ++w)
        square_w[std::size_t(w)] = square(r.pr, w), biases[std::size_t(w)] = bias_of(r.pr, w).has_value();
    for (const auto& f : projection_sets(square_w))
        out.push_back(mutation("weights-transposed", weight_list(f, kW) + " transposed",
                               f[0] || f[1] || f[2] ? kQ : kOutput, [f](Mutation& m) { m.transposed = f; }));
    if (r.H > 1)
        for (const auto& [id, how] : {std::pair{"heads-reshaped-not-transposed", HeadSplit::flat},
                                      std::pair{"heads-interleaved", HeadSplit::interleaved}}) {
            const HeadSplit h = how;
            out.push_back(
                mutation(id, "when splitting and merging the heads", kQ, [h](Mutation& m) { m.split = m.merge = h; }));
            out.push_back(mutation(id, "when splitting the heads", kQ, [h](Mutation& m) { m.split = h; }));
            out.push_back(mutation(id, "when merging the heads", kOutput, [h](Mutation& m) { m.merge = h; }));
        }
    for (const auto& f : projection_sets(biases))
        out.push_back(mutation("bias-missing", weight_list(f, kB) + " left out", f[0] || f[1] || f[2] ? kQ : kOutput,
                               [f](Mutation& m) { m.no_bias = f; }));
}

// Scores divided by the square root of a width other than Dk's: the model's (x's last
// axis) or all heads' together (H·Dk, Q's width before the split), where it is not Dk.
void scale_by_width_mutations(const Run& r, std::vector<Mutation>& out) {
    const std::size_t dm = r.pr.x.shape()[2], hd = r.H * r.Dk;
    const auto add = [&](std::size_t w, const std::string& words) {
        const double s = 1.0 / std::sqrt(double(w));
        out.push_back(
            mutation("scale-by-dmodel", words + " = " + std::to_string(w), kScores, [s](Mutation& m) { m.scale = s; }));
    };
    if (dm > 0 && dm != r.Dk) add(dm, "1/√Dm, the model width Dm");
    if (hd != r.Dk && hd != dm) add(hd, "1/√(H·Dk), the width of all heads H·Dk");
}

}  // namespace

std::size_t catalogue_index(const std::string& id) {
    for (std::size_t i = 0; i < kCatalogue.size(); ++i)
        if (kCatalogue[i].id == id) return i;
    return kCatalogue.size();
}

std::vector<Mutation> mutations(const Run& r) {
    std::vector<Mutation> out;
    const double dk = double(r.Dk);
    out.push_back(mutation("no-scale", "", kScores, [](Mutation& m) { m.scale = 1.0; }));
    out.push_back(mutation("scale-by-dk", "", kScores, [dk](Mutation& m) { m.scale = 1.0 / dk; }));
    out.push_back(mutation("scale-multiplied", "", kScores, [dk](Mutation& m) { m.scale = std::sqrt(dk); }));
    scale_by_width_mutations(r, out);
    out.push_back(mutation("softmax-over-queries", "", kWeights, [](Mutation& m) { m.over_queries = true; }));
    mask_mutations(r, out);
    projection_mutations(r, out);
    if (r.Tq == r.Tk)
        out.push_back(mutation("scores-transposed", "", kScores, [](Mutation& m) { m.scores_transposed = true; }));
    if (r.Dk == r.Dv)
        out.push_back(mutation("values-are-keys", "", kContext, [](Mutation& m) { m.values_are_keys = true; }));
    if (r.pr.W_O && r.Dout == r.H * r.Dv)
        out.push_back(
            mutation("no-output-projection", "", kOutput, [](Mutation& m) { m.no_output_projection = true; }));
    out.push_back(mutation("masked-rows-nan", "", kWeights, [](Mutation& m) { m.policy = RowPolicy::nan; }));
    out.push_back(mutation("masked-rows-uniform", "", kWeights, [](Mutation& m) { m.policy = RowPolicy::uniform; }));
    return out;
}

}  // namespace attnscope::check_detail

namespace attnscope {

using namespace check_detail;

const std::vector<Mistake>& mistake_catalogue() { return kCatalogue; }

}  // namespace attnscope
