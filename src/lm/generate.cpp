// Greedy generation with a KV cache in every layer (generate.hpp): each layer's attention
// is core's Decoder on that layer's problem; the rest of a block is the forward pass's own
// steps (lm.hpp), shared with the full run.
#include "attnscope/lm/generate.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <stdexcept>
#include <string>
#include <xtensor/xview.hpp>

#include "attnscope/base/errors.hpp"
#include "attnscope/base/text.hpp"
#include "attnscope/model/family.hpp"
#include "lm.hpp"

namespace attnscope {

Pick greedy_pick(const std::vector<double>& logits) {
    if (logits.empty()) throw std::logic_error("greedy_pick: no logits");
    return top_tokens(logits.data(), logits.size(), 1).front();
}

// Layer l: its block's other weights, its attention's problem (x sized for the whole length)
// and that problem's decoder, which holds the layer's KV cache. Never moved: the decoder
// keeps a reference to the problem.
struct Generator::Layer {
    lm::Block<double> block;
    Problem<double> problem;  // x (1, length, Dm)
    std::unique_ptr<Decoder<double>> decoder;
};

struct Generator::Head {
    lm::Head<double> head;
};

Generator::Generator(const LanguageModel& m, std::size_t length, std::size_t threads)
    : m_(m), length_(length), threads_(threads) {
    const LmConfig& c = m.config();
    if (c.family == LmFamily::bert) {
        std::string decoders;  // the causal families of the family table
        for (const Family& f : families())
            if (f.causal) decoders += (decoders.empty() ? "" : ", ") + f.model_type;
        throw InputError(escape_control(m.checkpoint().config_path) + ": model_type " + c.model_type +
                         ": an encoder (every token sees every other, a masked-LM head) does not generate text left " +
                         "to right; generation needs a decoder: " + decoders);
    }
    if (length == 0 || length > c.positions) throw std::logic_error("Generator: length outside the model's positions");
    const lm::Weights w(m.checkpoint(), m.max_bytes());
    const Tensor<double, 2> zeros = xt::zeros<double>({length, c.hidden});  // (length, Dm)
    for (std::size_t l = 0; l < c.layers; ++l) {
        auto layer = std::make_unique<Layer>();
        layer->block = lm::read_block<double>(w, c, l);
        layer->problem = lm::layer_problem(m.checkpoint(), c, l, zeros, m.max_bytes());
        check_decodable(layer->problem, 0, DecodeBug::none);
        layer->decoder = std::make_unique<Decoder<double>>(layer->problem);
        layers_.push_back(std::move(layer));
    }
    head_ = std::make_unique<Head>(Head{lm::read_head<double>(w, c)});
    lm::convert_unembedding(head_->head);
}

Generator::~Generator() = default;

const Dims& Generator::dims(std::size_t layer) const { return layers_.at(layer)->problem.dims; }

std::array<std::size_t, 4> Generator::k_cache_shape(std::size_t layer) const {
    return layers_.at(layer)->decoder->cache().k_shape();
}

namespace {

// a (n, Dm) into rows start.. of x (1, length, Dm)
void write_rows(Problem<double>& p, std::size_t start, const Tensor<double, 2>& a) {
    if (start + a.shape(0) > p.x.shape(1) || a.shape(1) != p.x.shape(2))
        throw std::logic_error("Generator: rows outside the layer's x");
    std::copy(a.begin(), a.end(), &p.x(0, start, 0));
}

// The logits (V) of the last row of h (T, Dm).
std::vector<double> last_logits(const lm::Head<double>& head, const Tensor<double, 2>& h) {
    Tensor<double, 2> last = xt::view(h, xt::range(h.shape(0) - 1, h.shape(0)), xt::all());  // (1, Dm)
    const Tensor<double, 2> logits = lm::apply_head(head, last);
    return std::vector<double>(logits.begin(), logits.end());
}

}  // namespace

std::vector<double> Generator::prefill(const std::vector<std::uint32_t>& prompt, std::vector<Trace<double>>* traces) {
    if (position_ != 0 || prompt.empty() || prompt.size() > length_)
        throw std::logic_error("Generator::prefill: not at the start, or no room");
    const LmConfig& c = m_.config();
    Tensor<double, 2> h = lm::embed<double>(lm::Weights(m_.checkpoint(), m_.max_bytes()), c, prompt);  // (P, Dm)
    Compute how;
    how.keep = StageSet().set(kWeights).set(kSinkWeight).set(kMask).set(kContext).set(kOutput);
    how.threads = threads_;
    for (auto& layer : layers_) {
        write_rows(layer->problem, 0, lm::attention_input(layer->block, c, h));
        Trace<double> tr = layer->decoder->prefill(prompt.size(), how);
        lm::add_attention(layer->block, c, tr.output, h);
        if (traces) traces->push_back(std::move(tr));
    }
    position_ = prompt.size();
    return last_logits(head_->head, h);
}

std::vector<double> Generator::step(std::uint32_t id, std::vector<DecodeStep<double>>* steps) {
    if (position_ == 0 || position_ >= length_) throw std::logic_error("Generator::step: no prefill, or no room");
    const LmConfig& c = m_.config();
    Tensor<double, 2> h =
        lm::embed<double>(lm::Weights(m_.checkpoint(), m_.max_bytes()), c, {id}, position_);  // (1, Dm)
    for (auto& layer : layers_) {
        write_rows(layer->problem, position_, lm::attention_input(layer->block, c, h));
        DecodeStep<double> s = layer->decoder->step();
        lm::add_attention(layer->block, c, s.output, h);
        if (steps) steps->push_back(std::move(s));
    }
    ++position_;
    return last_logits(head_->head, h);
}

namespace {

// Row P-1 of a layer's prefill as a step: weights (1, H, 1, P), mask (1, 1, P), context, output.
DecodeStep<double> last_row(const Trace<double>& tr, const std::array<std::size_t, 4>& k_shape,
                            const std::array<std::size_t, 4>& v_shape) {
    const std::size_t P = tr.weights.shape(2);
    DecodeStep<double> s;
    s.t = P - 1;
    s.query_position = (long long)(P - 1);
    s.cache_length = P;
    s.k_cache_shape = k_shape, s.v_cache_shape = v_shape;
    s.mask = xt::view(tr.mask, xt::all(), xt::range(P - 1, P), xt::all());
    s.weights = xt::view(tr.weights, xt::all(), xt::all(), xt::range(P - 1, P), xt::all());
    if (tr.sink_weight.size()) s.sink_weight = xt::view(tr.sink_weight, xt::all(), xt::all(), xt::range(P - 1, P));
    s.context = xt::view(tr.context, xt::all(), xt::all(), xt::range(P - 1, P), xt::all());
    s.output = xt::view(tr.output, xt::all(), xt::range(P - 1, P), xt::all());
    return s;
}

std::size_t clamp(double bytes) { return bytes >= 1.8e19 ? ~std::size_t{0} : std::size_t(bytes); }

// What a generation of P prompt and N new tokens holds besides the weights, in float64
// bytes: each layer's K/V cache (L = P + N rows of G·(Dk + Dv)), its prefill's trace
// (weights H·P², mask, sink, context H·P·Dv, output P·Dm) and each step's row (weights,
// mask and sink over the cache, context, output), and every step's logits (V).
double records_bytes(const std::vector<Dims>& dims, std::size_t P, std::size_t N, std::size_t V) {
    const double p = double(P), n = double(N), L = p + n;
    const double cached = (n - 1) * (2 * p + n) / 2 + p;  // Σ of the steps' cache lengths
    double total = n * double(V);
    for (const Dims& d : dims) {
        const double H = double(d.H), G = double(d.G ? d.G : d.H);
        total += G * L * double(d.Dk + d.Dv);
        total += (H + 1) * p * p + H * p * (double(d.Dv) + 1) + p * double(d.Dm);
        total += (H + 1) * cached + n * (H * double(d.Dv) + H + double(d.Dm));
    }
    return total * sizeof(double);
}

// What the generator holds for every layer, about: its weights (attention 4 Dm², MLP up to
// 3 Dm·Dff) and its x (length, Dm), in float64; and the unembedding (V, Dm), converted once.
double weights_bytes(const LanguageModel& m, std::size_t length) {
    const LmConfig& c = m.config();
    const double D = double(c.hidden), per_layer = 4 * D * D + 3 * D * double(c.mlp) + double(length) * D;
    return (double(c.layers) * per_layer + double(c.vocab) * D) * sizeof(double);
}

// What check_generation's full forward on T tokens keeps: every layer's weights (H, T, T)
// and context (H, T, Dv), in float64.
double full_check_bytes(const std::vector<Dims>& dims, std::size_t T) {
    double bytes = 0;
    for (const Dims& d : dims) bytes += double(d.H) * double(T) * double(T + d.Dv) * sizeof(double);
    return bytes;
}

void check_request(const LanguageModel& m, const std::vector<std::uint32_t>& prompt, std::size_t n) {
    const LmConfig& c = m.config();
    if (n == 0) throw UsageError("{generate} 0: expected 1 or more tokens to generate");
    if (prompt.empty()) throw InputError("no prompt tokens to generate from");
    const std::size_t room = c.positions - c.position_offset;
    if (prompt.size() >= room || n > room - prompt.size())
        throw UsageError("{generate} " + std::to_string(n) + ": the " + std::to_string(prompt.size()) +
                         "-token prompt and " + std::to_string(n) + " new tokens need more than the model's " +
                         std::to_string(room) + " positions (" + escape_control(m.checkpoint().config_path) + " " +
                         (c.family == LmFamily::gpt2 ? "n_positions" : "max_position_embeddings") + ")");
    m.check_ids(prompt);
    const double bytes = weights_bytes(m, prompt.size() + n);
    if (bytes > double(m.max_bytes()))
        throw MemoryLimitError("generating holds every layer's weights and inputs, about " +
                               format_bytes(clamp(bytes)) + ", more than {max_memory} " + format_bytes(m.max_bytes()));
}

}  // namespace

Generation generate(const LanguageModel& m, const std::vector<std::uint32_t>& prompt, std::size_t n,
                    std::size_t threads) {
    check_request(m, prompt, n);
    const std::size_t P = prompt.size(), L = m.config().layers;
    Generator gen(m, P + n, threads);
    Generation g;
    for (std::size_t l = 0; l < L; ++l) g.dims.push_back(gen.dims(l));
    // The weights are read (check_request counted them): with them, the caches and records.
    const double records = records_bytes(g.dims, P, n, m.config().vocab);
    const double held = std::max(weights_bytes(m, P + n), full_check_bytes(g.dims, P + n)) + records;
    if (held > double(m.max_bytes()))
        throw MemoryLimitError("generating " + std::to_string(n) + " tokens after " + std::to_string(P) +
                               " holds every layer's weights (or, to check them, a full forward's attention "
                               "weights), its KV cache and each step's rows, about " +
                               format_bytes(clamp(held)) + ", more than {max_memory} " + format_bytes(m.max_bytes()));
    g.ids = prompt;
    g.prompt = P;
    GenerationStep first;
    first.t = P - 1;
    first.logits = gen.prefill(prompt, &g.prefill);
    for (std::size_t l = 0; l < L; ++l) {
        const auto k = gen.k_cache_shape(l);
        first.layers.push_back(last_row(g.prefill[l], k, {k[0], k[1], k[2], g.dims[l].Dv}));
    }
    first.next = greedy_pick(first.logits);
    g.ids.push_back(first.next.id);
    g.steps.push_back(std::move(first));
    while (g.steps.size() < n) {
        GenerationStep s;
        s.t = gen.position();
        s.logits = gen.step(g.ids.back(), &s.layers);
        s.next = greedy_pick(s.logits);
        g.ids.push_back(s.next.id);
        g.steps.push_back(std::move(s));
    }
    return g;
}

void check_generation(const LanguageModel& m, Generation& g, std::size_t threads) {
    const std::size_t T = g.ids.size(), L = g.dims.size();
    // the full run's kept weights and context, every layer, beside the generation's own records
    const double bytes =
        records_bytes(g.dims, g.prompt, g.steps.size(), m.config().vocab) + full_check_bytes(g.dims, T);
    if (bytes > double(m.max_bytes()))
        throw MemoryLimitError(
            "checking " + std::to_string(T) + " tokens against one full forward keeps " + format_bytes(clamp(bytes)) +
            " of attention weights beside the generation's, more than {max_memory} " + format_bytes(m.max_bytes()));
    ForwardRequest r;
    r.traces = true;
    r.threads = threads;
    for (const GenerationStep& s : g.steps) r.logit_rows.push_back(s.t);
    const ForwardResult full = m.forward(g.ids, r);
    g.prefill_diffs.clear();
    g.max_diff = 0;
    for (std::size_t l = 0; l < L; ++l) g.prefill_diffs.push_back(diff_prefill(g.prefill[l], full.traces[l]));
    for (std::size_t k = 0; k < g.steps.size(); ++k) {
        GenerationStep& s = g.steps[k];
        for (std::size_t l = 0; l < L; ++l) {
            s.layers[l].diff = k == 0 ? g.prefill_diffs[l] : diff_step(s.layers[l], full.traces[l]);
            g.max_diff = std::max(g.max_diff, s.layers[l].diff.max());
        }
        s.logits_diff = 0;
        for (std::size_t v = 0; v < s.logits.size(); ++v) {
            const double e = std::fabs(s.logits[v] - full.logits(k, v));
            s.logits_diff = std::isnan(e) ? HUGE_VAL : std::max(s.logits_diff, e);
        }
        g.max_diff = std::max(g.max_diff, s.logits_diff);
    }
}

}  // namespace attnscope
