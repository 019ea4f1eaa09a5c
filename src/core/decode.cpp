// Core: KV-cache decoding (see decode.hpp for the shape legend and the steps).
#include "attnscope/core/decode.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <xtensor/xview.hpp>

#include "attnscope/base/errors.hpp"
#include "attnscope/core/linear.hpp"
#include "blas.hpp"
#include "kernels.hpp"
#include "steps.hpp"

namespace attnscope {

// ---- bugs ---------------------------------------------------------------------------

namespace {
constexpr std::pair<DecodeBug, std::string_view> kBugs[] = {
    {DecodeBug::rope_position_zero, "rope-position-zero"},
    {DecodeBug::attend_before_append, "attend-before-append"},
    {DecodeBug::off_by_one, "off-by-one"},
};
}  // namespace

std::string_view bug_name(DecodeBug bug) {
    for (const auto& [b, name] : kBugs)
        if (b == bug) return name;
    return "none";
}

std::optional<DecodeBug> find_bug(std::string_view name) {
    if (name == "none") return DecodeBug::none;
    for (const auto& [b, n] : kBugs)
        if (n == name) return b;
    return std::nullopt;
}

const std::vector<std::string_view>& bug_names() {
    static const std::vector<std::string_view> names = [] {
        std::vector<std::string_view> v;
        for (const auto& [b, n] : kBugs) v.push_back(n);
        return v;
    }();
    return names;
}

// ---- the cache ----------------------------------------------------------------------

template <typename T>
KVCache<T>::KVCache(std::size_t B, std::size_t G, std::size_t Dk, std::size_t Dv) : B_(B), G_(G), Dk_(Dk), Dv_(Dv) {}

template <typename T>
void KVCache<T>::reserve(std::size_t positions) {
    if (positions > capacity_) grow(positions);
}

// New storage (B, G, capacity, D): each (b, g) block's L rows move once.
template <typename T>
void KVCache<T>::grow(std::size_t capacity) {
    Buffer<T> k(B_ * G_ * capacity * Dk_), v(B_ * G_ * capacity * Dv_);
    for (std::size_t bg = 0; bg < B_ * G_; ++bg) {
        std::copy_n(k_.data() + bg * capacity_ * Dk_, length_ * Dk_, k.data() + bg * capacity * Dk_);
        std::copy_n(v_.data() + bg * capacity_ * Dv_, length_ * Dv_, v.data() + bg * capacity * Dv_);
    }
    copied_ += length_;
    k_.swap(k);
    v_.swap(v);
    capacity_ = capacity;
}

template <typename T>
void KVCache<T>::append(const T* k, std::size_t stride_k, const T* v, std::size_t stride_v) {
    if (length_ == capacity_) grow(std::max<std::size_t>(8, 2 * capacity_));  // doubling: O(1) copies per position
    for (std::size_t b = 0; b < B_; ++b)
        for (std::size_t g = 0; g < G_; ++g) {
            const std::size_t bg = b * G_ + g;
            std::copy_n(k + b * stride_k + g * Dk_, Dk_, k_.data() + (bg * capacity_ + length_) * Dk_);
            std::copy_n(v + b * stride_v + g * Dv_, Dv_, v_.data() + (bg * capacity_ + length_) * Dv_);
        }
    ++length_;
}

template <typename T>
void KVCache<T>::append(const Tensor<T, 4>& K, const Tensor<T, 4>& V) {
    // K (B, G, n, Dk), V (B, G, n, Dv)
    const std::size_t n = K.shape(2);
    if (K.shape(0) != B_ || K.shape(1) != G_ || K.shape(3) != Dk_ || V.shape(0) != B_ || V.shape(1) != G_ ||
        V.shape(2) != n || V.shape(3) != Dv_)
        throw std::logic_error("KVCache::append: K or V does not match the cache's (B, G, n, D)");
    std::size_t capacity = std::max<std::size_t>(capacity_, 8);
    while (capacity < length_ + n) capacity *= 2;
    reserve(capacity);
    for (std::size_t bg = 0; bg < B_ * G_; ++bg) {
        std::copy_n(K.data() + bg * n * Dk_, n * Dk_, k_.data() + (bg * capacity_ + length_) * Dk_);
        std::copy_n(V.data() + bg * n * Dv_, n * Dv_, v_.data() + (bg * capacity_ + length_) * Dv_);
    }
    length_ += n;
}

// ---- FLOPs and differences ------------------------------------------------------------

std::uint64_t attention_flops(const Dims& d, bool has_W_O, std::size_t n_q, std::size_t n_k, std::size_t n_new) {
    using U = std::uint64_t;
    const U proj = 2 * U(n_new) * (U(d.Dm) * d.H * d.Dk + U(d.Dkv) * d.G * (d.Dk + d.Dv));
    const U attn = 2 * U(d.H) * n_q * n_k * (d.Dk + d.Dv);
    const U out = has_W_O ? 2 * U(n_q) * d.H * d.Dv * d.Dout : 0;
    return U(d.B) * (proj + attn + out);
}

double DecodeDiff::max() const { return std::max({weights, sink_weight, context, output}); }

namespace {

// |a - b|, 0 when both are the same infinity or both NaN, infinity when only one is NaN.
template <typename T>
double absdiff(T a_, T b_) {
    const double a = static_cast<double>(a_), b = static_cast<double>(b_);
    if (a == b || (std::isnan(a) && std::isnan(b))) return 0;
    const double e = std::fabs(a - b);
    return std::isnan(e) ? std::numeric_limits<double>::infinity() : e;
}

// Largest |rows - full rows| of the (B, H, n, Lrows) weights against full (B, H, T, T)
// rows r0.., columns past Lrows counting as 0; and of context, sink_weight and output.
template <typename T>
DecodeDiff diff_rows(const Tensor<T, 4>& w, const Tensor<T, 3>& sink, const Tensor<T, 4>& ctx, const Tensor<T, 3>& out,
                     const Trace<T>& full, std::size_t r0) {
    DecodeDiff d;
    const std::size_t B = w.shape(0), H = w.shape(1), n = w.shape(2), L = w.shape(3), Tk = full.weights.shape(3);
    for (std::size_t b = 0; b < B; ++b)
        for (std::size_t h = 0; h < H; ++h)
            for (std::size_t i = 0; i < n; ++i) {
                for (std::size_t j = 0; j < Tk; ++j)
                    d.weights = std::max(d.weights, absdiff(j < L ? w(b, h, i, j) : 0, full.weights(b, h, r0 + i, j)));
                if (sink.size())
                    d.sink_weight = std::max(d.sink_weight, absdiff(sink(b, h, i), full.sink_weight(b, h, r0 + i)));
                for (std::size_t k = 0; k < ctx.shape(3); ++k)
                    d.context = std::max(d.context, absdiff(ctx(b, h, i, k), full.context(b, h, r0 + i, k)));
            }
    for (std::size_t b = 0; b < B; ++b)
        for (std::size_t i = 0; i < n; ++i)
            for (std::size_t k = 0; k < out.shape(2); ++k)
                d.output = std::max(d.output, absdiff(out(b, i, k), full.output(b, r0 + i, k)));
    return d;
}

}  // namespace

template <typename T>
DecodeDiff diff_step(const DecodeStep<T>& step, const Trace<T>& full) {
    return diff_rows(step.weights, step.sink_weight, step.context, step.output, full, step.t);
}

template <typename T>
DecodeDiff diff_prefill(const Trace<T>& prefill, const Trace<T>& full) {
    if (prefill.weights.size() == 0) return {};
    return diff_rows(prefill.weights, prefill.sink_weight, prefill.context, prefill.output, full, 0);
}

// ---- what decode can run ---------------------------------------------------------------

template <typename T>
void check_decodable(const Problem<T>& p, std::size_t prefill, DecodeBug bug) {
    if (p.cross || p.memory)
        throw UsageError(
            "decode: self-attention only, memory (cross-attention) is not supported: each step appends the new "
            "token's own key and value to the cache");
    if (p.mask.explicit_positions())
        throw UsageError("decode: q_positions and k_positions are not supported: token t sits at position t");
    if (p.mask.has_attn_mask() || p.attn_bias)
        throw UsageError(
            "decode: an attn_mask is not supported (a step has one query row); use key_padding_mask, {window} or "
            "{alibi}");
    if (p.dims.Tk != p.dims.Tq)
        throw UsageError(
            "decode: appended key/value positions (bias_k and bias_v, add_zero_attn) are not supported: they have "
            "no position in the cache");
    if (!p.mask.causal() || !p.spec.causal)
        throw UsageError("{causal}: decode needs the causal mask (a step sees the cache: positions up to its own)");
    if (prefill > p.dims.Tq)
        throw UsageError("{prefill} " + std::to_string(prefill) + ": expected 0.." + std::to_string(p.dims.Tq) +
                         " (x has T = " + std::to_string(p.dims.Tq) + " positions)");
    if (bug == DecodeBug::rope_position_zero && !p.rope_dim)
        throw UsageError("{bug} rope-position-zero: needs {rope} (without RoPE a position changes nothing)");
}

// ---- the decoder ------------------------------------------------------------------------

namespace {

// Y (rows, n) = X (rows, in; rows lda apart) · W (in, n) (+ b)
template <typename T>
void project_rows(const T* X, std::size_t rows, std::size_t lda, const Tensor<T, 2>& W,
                  const std::optional<Tensor<T, 1>>& b, T* Y) {
    linear(X, rows, lda, W.data(), W.shape(0), W.shape(1), Layout::math, b ? b->data() : nullptr, Y, W.shape(1));
}

// The problem of positions 0..P-1 alone: x sliced, the mask rule over P keys.
template <typename T>
Problem<T> prefix_problem(const Problem<T>& p, std::size_t P) {
    Problem<T> q;
    q.spec = p.spec;
    q.spec.causal_align = CausalAlign::top_left;  // Tq == Tk: the same positions either way
    if (q.spec.zero_key && *q.spec.zero_key >= P) q.spec.zero_key.reset();
    q.dims = p.dims;
    q.dims.Tq = q.dims.Tk = P;
    q.batched = p.batched;
    q.scale = p.scale;
    q.scale_source = p.scale_source;
    q.x = xt::view(p.x, xt::all(), xt::range(0, P), xt::all());  // (B, P, Dm)
    q.W_Q = p.W_Q, q.W_K = p.W_K, q.W_V = p.W_V, q.W_O = p.W_O;
    q.b_Q = p.b_Q, q.b_K = p.b_K, q.b_V = p.b_V, q.b_O = p.b_O;
    MaskParts parts;
    parts.causal = true;
    parts.window = p.mask.window();
    if (p.mask.key_padding())
        parts.key_padding = xt::xtensor<bool, 2>(xt::view(*p.mask.key_padding(), xt::all(), xt::range(0, P)));
    q.mask = MaskRule(p.dims.B, P, P, std::move(parts));
    q.rope_dim = p.rope_dim;
    q.alibi_slopes = p.alibi_slopes;
    q.sinks = p.sinks;
    q.q_norm = p.q_norm, q.k_norm = p.k_norm;
    return q;
}

}  // namespace

template <typename T>
Decoder<T>::Decoder(const Problem<T>& p, DecodeBug bug)
    : p_(p), bug_(bug), cache_(p.dims.B, p.dims.G, p.dims.Dk, p.dims.Dv) {
    cache_.reserve(p.dims.Tq);  // the final length is known: no growth at all
}

template <typename T>
Trace<T> Decoder<T>::prefill(std::size_t P, const Compute& how) {
    if (next_ != 0) throw std::logic_error("Decoder::prefill: the cache is not empty");
    if (P > p_.dims.Tq) throw std::logic_error("Decoder::prefill: longer than the sequence");
    if (P == 0) return Trace<T>();
    // 1) positions 0..P-1 as one causal attend(): Q, K, V of all P tokens, once.
    const Problem<T> q = prefix_problem(p_, P);
    Compute c = how;
    c.keep.set(p_.rope_dim ? kKRot : kK).set(kV);
    Trace<T> tr = attend(q, c);
    // 2) the cache takes the rotated keys (B, G, P, Dk) and the values (B, G, P, Dv).
    cache_.append(p_.rope_dim ? tr.K_rot : tr.K, tr.V);
    projected_ += P;
    next_ = P;
    return tr;
}

// q (B, H*Dk), k (B, G*Dk), v (B, G*Dv) of token t only: x[:, t] (B, Dm) · W (+ b).
template <typename T>
void Decoder<T>::project_token(std::size_t t) {
    const Dims& d = p_.dims;
    const T* xt = p_.x.data() + t * d.Dm;  // rows T*Dm apart, one per batch item
    q_.resize(d.B * d.H * d.Dk);
    k_.resize(d.B * d.G * d.Dk);
    v_.resize(d.B * d.G * d.Dv);
    blas_threads(1);
    project_rows(xt, d.B, d.Tq * d.Dm, p_.W_Q, p_.b_Q, q_.data());
    project_rows(xt, d.B, d.Tq * d.Dm, p_.W_K, p_.b_K, k_.data());
    project_rows(xt, d.B, d.Tq * d.Dm, p_.W_V, p_.b_V, v_.data());
    if (p_.q_norm) steps::head_rms_norm(q_.data(), d.B, d.H, d.Dk, p_.q_norm->data(), T(*p_.spec.qk_norm_eps));
    if (p_.k_norm) steps::head_rms_norm(k_.data(), d.B, d.G, d.Dk, p_.k_norm->data(), T(*p_.spec.qk_norm_eps));
    if (p_.spec.zero_key && *p_.spec.zero_key == t) std::fill(k_.begin(), k_.end(), T(0));  // experiment
    ++projected_;
}

// RoPE on flat rows (B, heads*Dk), every batch item at `position` (steps.hpp, as attend()).
template <typename T>
void Decoder<T>::rotate(T* rows, std::size_t heads, long long position) const {
    if (!p_.rope_dim) return;
    const steps::RopeRotation<T> rotation(*p_.spec.rope, p_.rope_dim);
    for (std::size_t b = 0; b < p_.dims.B; ++b) rotation(rows + b * heads * p_.dims.Dk, heads, p_.dims.Dk, position);
}

// The mask rule of one query against `keys` cached keys: key padding over those keys,
// causal and the window, bottom-right aligned (the query is the newest position, keys - 1),
// or at `query_position` when a bug moves it.
template <typename T>
MaskRule Decoder<T>::step_rule(std::size_t keys, long long query_position) const {
    MaskParts parts;
    parts.causal = true;
    parts.align = CausalAlign::bottom_right;
    parts.window = p_.mask.window();
    if (p_.mask.key_padding())
        parts.key_padding = xt::xtensor<bool, 2>(xt::view(*p_.mask.key_padding(), xt::all(), xt::range(0, keys)));
    if (query_position != (long long)keys - 1) parts.q_positions = xt::xtensor<long long, 2>({{query_position}});
    return MaskRule(p_.dims.B, 1, keys, std::move(parts));
}

//    scores  (1, Dk) x (Dk, keys) -> (1, keys), times scale
//    masked  softcap(scores) + ALiBi m_h (k_pos - q_pos), -inf where the rule hides a key
//    weights softmax over the keys (with the sink), into weights (b, h, 0, :keys)
//    context (1, keys) x (keys, Dv) -> (1, Dv), into the merged row (B, H*Dv)
template <typename T>
void Decoder<T>::attend_row(DecodeStep<T>& s, std::size_t b, std::size_t h, const MaskRule& rule, std::size_t keys) {
    const Dims& d = p_.dims;
    const std::size_t g = d.kv_head(h), H = d.H, Dk = d.Dk, Dv = d.Dv;
    T* C = ctx_.data() + b * H * Dv + h * Dv;
    T* W = &s.weights(b, h, 0, 0);
    T* share = p_.sinks ? &s.sink_weight(b, h, 0) : nullptr;
    if (keys == 0) {  // attend-before-append at t = 0: nothing to see
        std::fill_n(C, Dv, T(0));
        std::fill_n(&s.context(b, h, 0, 0), Dv, T(0));
        if (share) *share = T(1);
        if (h == 0) s.fully_masked.push_back(b);
        return;
    }
    logits_.resize(keys);
    T* S = logits_.data();
    const bool* visible = &s.mask(b, 0, 0);  // the step's mask rule, asked once per batch item
    gemm<T>(false, true, 1, keys, Dk, p_.scale, q_.data() + b * H * Dk + h * Dk, H * Dk, cache_.keys(b, g), Dk, T(0), S,
            keys);
    const auto rewrite = steps::LogitRewrite<T>::of(p_);
    if (rewrite.cap || p_.alibi_slopes) {
        const T* bias = nullptr;
        if (p_.alibi_slopes) {  // ALiBi at the step rule's positions (a bug may move the query)
            bias_.resize(keys);
            const long long qp = rule.query_position(b, 0);
            for (std::size_t j = 0; j < keys; ++j)
                bias_[j] = alibi_term((*p_.alibi_slopes)(h), rule.key_position(b, j), qp);
            bias = bias_.data();
        }
        // (the step's mask is its own output: a -inf term is left to the softmax)
        rewrite(S, bias, nullptr, false, S, keys);
    }
    const bool any =
        p_.sinks ? kernels::sink_softmax_row(S, visible, static_cast<T*>(nullptr), W, keys, (*p_.sinks)(h), share)
                 : kernels::masked_softmax_row(S, visible, nullptr, W, keys);
    if (!any && h == 0) s.fully_masked.push_back(b);
    gemm<T>(false, false, 1, Dv, keys, T(1), W, keys, cache_.values(b, g), Dv, T(0), C, Dv);
    std::copy_n(C, Dv, &s.context(b, h, 0, 0));
}

template <typename T>
DecodeStep<T> Decoder<T>::step() {
    const Dims& d = p_.dims;
    const std::size_t t = next_;
    if (t >= d.Tq) throw std::logic_error("Decoder::step: past the end of the sequence");
    DecodeStep<T> s;
    s.t = t;
    s.query_position = bug_ == DecodeBug::off_by_one ? (long long)t - 1 : (long long)t;
    // 1) q, k, v of token t only; 2) RoPE at its position (t, or 0 / t - 1 with a bug).
    project_token(t);
    rotate(q_.data(), d.H, bug_ == DecodeBug::rope_position_zero ? 0 : s.query_position);
    rotate(k_.data(), d.G, bug_ == DecodeBug::rope_position_zero ? 0 : (long long)t);
    // 3) append k, v: K cache (B, G, t+1, Dk), V cache (B, G, t+1, Dv) (after attending, with the bug)
    const bool late = bug_ == DecodeBug::attend_before_append;
    if (!late) cache_.append(k_.data(), d.G * d.Dk, v_.data(), d.G * d.Dv);
    const std::size_t keys = cache_.length();
    // 4)-7) scores, masked, weights (B, H, 1, t+1), context (B, H, 1, Dv), per (b, h)
    s.weights = Tensor<T, 4>::from_shape({d.B, d.H, 1, t + 1});
    s.weights.fill(T(0));
    if (p_.sinks) s.sink_weight = Tensor<T, 3>::from_shape({d.B, d.H, 1});
    s.context = Tensor<T, 4>::from_shape({d.B, d.H, 1, d.Dv});
    ctx_.resize(d.B * d.H * d.Dv);
    const MaskRule rule = step_rule(keys, s.query_position);
    s.mask = Tensor<bool, 3>::from_shape({d.B, 1, t + 1});
    s.mask.fill(false);
    for (std::size_t b = 0; b < d.B && keys; ++b) rule.row(b, 0, &s.mask(b, 0, 0));
    for (std::size_t b = 0; b < d.B; ++b)
        for (std::size_t h = 0; h < d.H; ++h) attend_row(s, b, h, rule, keys);
    if (late) cache_.append(k_.data(), d.G * d.Dk, v_.data(), d.G * d.Dv);
    // The cache grew by token t alone: K (B, G, t+1, Dk), V (B, G, t+1, Dv).
    if (cache_.k_shape() != std::array{d.B, d.G, t + 1, d.Dk} || cache_.v_shape() != std::array{d.B, d.G, t + 1, d.Dv})
        throw std::logic_error("internal shape check failed for the KV cache");
    s.cache_length = cache_.length();
    s.k_cache_shape = cache_.k_shape();
    s.v_cache_shape = cache_.v_shape();
    // 8) output: merged (B, H*Dv) x (H*Dv, Dout) (+ b_O) -> (B, 1, Dout), or the merged heads
    s.output = Tensor<T, 3>::from_shape({d.B, 1, d.Dout});
    if (p_.W_O)
        project_rows(ctx_.data(), d.B, d.H * d.Dv, *p_.W_O, p_.b_O, s.output.data());
    else
        std::copy(ctx_.begin(), ctx_.end(), s.output.begin());
    const std::size_t L = t + 1;
    s.flops_cached = attention_flops(d, p_.W_O.has_value(), 1, L, 1);
    s.flops_recompute = attention_flops(d, p_.W_O.has_value(), L, L, L);
    next_ = t + 1;
    return s;
}

// ---- a whole decoding ---------------------------------------------------------------------

template <typename T>
DecodeRun<T> decode(const Problem<T>& p, std::size_t prefill, DecodeBug bug, const Compute& how) {
    check_decodable(p, prefill, bug);
    DecodeRun<T> run;
    run.bug = bug;
    run.prefill = prefill;
    // 1) the full causal run: the rows every step must give
    Compute c = how;
    c.keep = StageSet().set(kWeights).set(kSinkWeight).set(kContext).set(kOutput);
    c.place = nullptr;
    run.full = attend(p, c);
    // 2) the prefill fills the cache; 3) one step per later position
    Decoder<T> decoder(p, bug);
    run.prefill_trace = decoder.prefill(prefill, c);
    run.prefill_k_shape = decoder.cache().k_shape();
    run.prefill_v_shape = decoder.cache().v_shape();
    run.prefill_flops = prefill ? attention_flops(p.dims, p.W_O.has_value(), prefill, prefill, prefill) : 0;
    run.prefill_diff = diff_prefill(run.prefill_trace, run.full);
    run.max_diff = run.prefill_diff.max();
    for (std::size_t t = prefill; t < p.dims.Tq; ++t) {
        run.steps.push_back(decoder.step());
        run.steps.back().diff = diff_step(run.steps.back(), run.full);
        run.max_diff = std::max(run.max_diff, run.steps.back().diff.max());
    }
    return run;
}

template class KVCache<float>;
template class KVCache<double>;
template class Decoder<float>;
template class Decoder<double>;
template void check_decodable<float>(const Problem<float>&, std::size_t, DecodeBug);
template void check_decodable<double>(const Problem<double>&, std::size_t, DecodeBug);
template DecodeRun<float> decode<float>(const Problem<float>&, std::size_t, DecodeBug, const Compute&);
template DecodeRun<double> decode<double>(const Problem<double>&, std::size_t, DecodeBug, const Compute&);
template DecodeDiff diff_step<float>(const DecodeStep<float>&, const Trace<float>&);
template DecodeDiff diff_step<double>(const DecodeStep<double>&, const Trace<double>&);
template DecodeDiff diff_prefill<float>(const Trace<float>&, const Trace<float>&);
template DecodeDiff diff_prefill<double>(const Trace<double>&, const Trace<double>&);

}  // namespace attnscope
