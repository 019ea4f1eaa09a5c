// The check of someone's own attention tensors against the reference (attnscope check):
// names, axis orders, the comparison, and the diagnosis by a catalogue of mistakes.
//
// The diagnosis recomputes the classic pipeline in float64 here, on its own, with one
// mistake switched on at a time (a Mutation), from the stages before the mistake's entry
// (the reference's, or theirs where they gave them and they match). It first checks, stage
// by stage, that its unmutated computation reproduces the reference: a stage it does not
// model (RoPE, softcap, sinks, a window the mask rule adds) makes it skip the mistakes
// that would have to pass through that stage, rather than guess.
#include "attnscope/analysis/check.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <memory>
#include <set>

#include "attnscope/base/errors.hpp"
#include "attnscope/model/aliases.hpp"

namespace attnscope {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
// A masked cell (-inf in the reference) may hold a large negative number instead: the
// Annotated Transformer's masked_fill(mask == 0, -1e9). Softmax gives it weight 0 alike.
constexpr double kLargeNegative = -1e4;

std::string lower(std::string_view s) {
    std::string out(s);
    for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
    return out;
}

std::string join(const std::vector<std::string>& items, const std::string& sep = ", ") {
    std::string out;
    for (const auto& s : items) out += (out.empty() ? "" : sep) + s;
    return out;
}

std::string num(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3g", v);
    return buf;
}

std::size_t product(const std::vector<std::size_t>& shape) {
    std::size_t n = 1;
    for (std::size_t s : shape) n *= s;
    return n;
}

std::vector<std::size_t> unravel(std::size_t k, const std::vector<std::size_t>& shape) {
    std::vector<std::size_t> at(shape.size());
    for (std::size_t i = shape.size(); i-- > 0;) at[i] = k % shape[i], k /= shape[i];
    return at;
}

// ---------------------------------------------------------------------------------------
// 1. Names: ours and the aliases of the stage table, case-insensitive
// ---------------------------------------------------------------------------------------

// A TransformerLens cache name without its prefix: "blocks.0.attn.hook_q" -> "q",
// "blocks.0.hook_attn_out" -> "attn_out"; other names as they are (lower case).
std::string without_hook_prefix(std::string_view name, bool* had_prefix = nullptr) {
    std::string l = lower(name);
    const std::string in = l;
    if (l.rfind("blocks.", 0) == 0) {
        std::size_t i = 7;
        while (i < l.size() && std::isdigit(static_cast<unsigned char>(l[i]))) ++i;
        if (i > 7 && i < l.size() && l[i] == '.') l.erase(0, i + 1);
    }
    if (l.rfind("attn.", 0) == 0) l.erase(0, 5);
    if (l.rfind("hook_", 0) == 0) l.erase(0, 5);
    if (had_prefix) *had_prefix = l != in;
    return l;
}

// "Q, K, ... or an alias: q, k, ..." for the message of a name that is none of them.
std::string names_expected() {
    std::string ours, aliases = "q, k, v";
    for (const StageInfo& s : stage_table()) ours += (ours.empty() ? "" : ", ") + std::string(s.name);
    for (const StageAlias& a : stage_aliases()) aliases += ", " + std::string(a.alias);
    return ours + ", or an alias: " + aliases + "; TransformerLens's blocks.L.attn.hook_NAME and hook_NAME alike";
}

// ---------------------------------------------------------------------------------------
// 2. Axis orders
// ---------------------------------------------------------------------------------------

// The stage's axes outermost first, the batch axis included (size 1 for a 2-D input), in
// the letters of {axes}.
Axes canonical_axes(const TraceView& ref, const StageView& s) {
    const bool over_keys = stage_info(s.id).over_keys();
    Axes axes;
    if (!ref.batched) axes.push_back({'b', 1});
    for (std::size_t i = 0; i < s.axes.size(); ++i) {
        const std::string& a = s.axes[i];
        char c = a.empty() ? '?' : char(std::tolower(static_cast<unsigned char>(a[0])));
        if (a == "B") c = 'b';
        if (a == "H" || a == "G") c = 'h';
        if (a == "Tq") c = over_keys ? 'q' : 't';
        if (a == "Tk") c = over_keys ? 'k' : 't';
        if (!a.empty() && a[0] == 'D') c = 'd';
        axes.push_back({c, s.shape[i]});
    }
    return axes;
}

// An axis order of a stage, in {axes} letters (q and k mean t in a stage with one
// position axis), with its shape; none with `why` when it is not one.
std::optional<AxisReading> stage_layout(std::string_view order, const Axes& canon, std::string* why) {
    const bool one_position = std::any_of(canon.begin(), canon.end(), [](const Axis& a) { return a.letter == 't'; });
    const auto o = parse_axis_order(order, canon, one_position, why);
    return o ? layout_of(*o, canon, why) : std::nullopt;
}

std::string sizes_text(const StageView& s, bool batched) {
    std::string out = batched ? "" : "B=1, ";
    for (std::size_t i = 0; i < s.axes.size(); ++i)
        out += (i ? ", " : "") + s.axes[i] + "=" + std::to_string(s.shape[i]);
    return out;
}

// For each cell of their array (C order), its offset in the reference stage.
std::vector<std::size_t> cell_map(const AxisReading& l, const Axes& canon) {
    std::vector<std::size_t> stride(canon.size());
    for (std::size_t i = canon.size(), s = 1; i-- > 0;) stride[i] = s, s *= canon[i].size;
    std::vector<std::size_t> size, step;  // their axes, expanded to ours
    for (const auto& grp : l.order.groups)
        for (char c : grp)
            for (std::size_t i = 0; i < canon.size(); ++i)
                if (canon[i].letter == c) size.push_back(canon[i].size), step.push_back(stride[i]);
    const std::size_t n = product(size);
    std::vector<std::size_t> map(n), idx(size.size(), 0);
    std::size_t off = 0;
    for (std::size_t k = 0; k < n; ++k) {
        map[k] = off;
        for (std::size_t a = size.size(); a-- > 0;) {  // odometer, last axis fastest
            if (++idx[a] < size[a]) {
                off += step[a];
                break;
            }
            off -= step[a] * (size[a] - 1);
            idx[a] = 0;
        }
    }
    return map;
}

// ---------------------------------------------------------------------------------------
// 3. Comparing
// ---------------------------------------------------------------------------------------

struct Cmp {
    bool match = true;
    double max_abs = 0;
    std::size_t at = 0;  // offset in the reference's order
    double relative = 0;
    double needed = 0;  // max |Δ| / max(1, |ref|): the smallest atol = rtol that accepts every cell
    std::size_t bad = 0, large_negative = 0, nonfinite = 0;
};

// |theirs - ref| cell by cell (both in the reference's order). NaN equals NaN; a -inf of
// the reference is matched by -inf or by a large negative number. A cell with ±inf or NaN
// on one side only differs by inf, and makes the relative error and `needed` inf too.
Cmp compare(const std::vector<double>& theirs, const std::vector<double>& ref, Tolerance tol) {
    Cmp c;
    double num2 = 0, den2 = 0;
    for (std::size_t k = 0; k < ref.size(); ++k) {
        const double u = theirs[k], r = ref[k];
        double d;
        if (u == r || (std::isnan(u) && std::isnan(r))) {
            d = 0;
        } else if (r == -kInf && u <= kLargeNegative) {
            d = 0, ++c.large_negative;
        } else if (!std::isfinite(u) || !std::isfinite(r)) {
            d = kInf, ++c.nonfinite;
        } else {
            d = std::fabs(u - r);
            num2 += d * d;
            c.needed = std::max(c.needed, d / std::max(1.0, std::fabs(r)));
        }
        if (std::isfinite(r)) den2 += r * r;
        if (d > std::max(tol.atol, tol.rtol * std::fabs(r)) || (d > 0 && !std::isfinite(d))) ++c.bad;
        if (d > c.max_abs) c.max_abs = d, c.at = k;
    }
    c.match = c.bad == 0;
    c.relative = c.nonfinite ? kInf : den2 > 0 ? std::sqrt(num2 / den2) : std::sqrt(num2);
    if (c.nonfinite) c.needed = kInf;
    return c;
}

// ---------------------------------------------------------------------------------------
// 4. The classic pipeline, with mistakes
// ---------------------------------------------------------------------------------------

// The stages the diagnosis computes (the classic pipeline and RoPE, bias, which pass
// through): every stage but sink_weight and head_output.
const StageSet kModelled = all_stages().reset(kSinkWeight).reset(kHeadOutput);

struct Dense {
    std::vector<std::size_t> shape;
    std::vector<double> v;
};
Dense dense(std::vector<std::size_t> shape, double fill = 0) {
    Dense d;
    d.v.assign(product(shape), fill);
    d.shape = std::move(shape);
    return d;
}

enum class MaskEdit {
    none,
    inverted,
    padding_inverted,
    causal_inverted,
    includes_next,
    excludes_self,
    upper,
    on_queries
};
enum class Fill { neg_inf, zero, after_softmax, ignored };
enum class RowPolicy { zero, nan, uniform };  // a softmax line with every cell masked
// How (B, T, n·D) becomes (B, n, T, D) and back: feature h·D + j of head h (right); the
// same memory read as (B, n, T, D) without a transpose (flat); a reshape to (B, T, D, n),
// so that head h gets the features j·n + h (interleaved).
enum class HeadSplit { right, flat, interleaved };

struct Mutation {
    std::string id, variant;
    Stage entry = kQ;
    std::optional<double> scale;
    bool scores_transposed = false;
    MaskEdit mask = MaskEdit::none;
    Fill fill = Fill::neg_inf;
    bool over_queries = false;
    bool values_are_keys = false;
    bool no_output_projection = false;
    std::array<bool, 4> transposed{};                              // W_Q, W_K, W_V, W_O
    std::array<bool, 4> no_bias{};                                 // b_Q, b_K, b_V, b_O
    HeadSplit split = HeadSplit::right, merge = HeadSplit::right;  // of Q, K, V; of the context
    RowPolicy policy = RowPolicy::zero;
};

// The sizes and inputs of the reference run, as the pipeline uses them.
struct Run {
    const Problem<double>& pr;
    std::size_t B = 1, H = 1, G = 1, Tq = 1, Tk = 1, Dk = 1, Dv = 1, Dout = 1;
    double scale = 1;
    StageSet present{};  // the stage exists in this run (and is modelled)
};

using Pipe = std::array<const Dense*, kStageCount>;

const Tensor<double, 2>& weight(const Problem<double>& pr, int w) {
    return w == 0 ? pr.W_Q : w == 1 ? pr.W_K : w == 2 ? pr.W_V : *pr.W_O;
}
const std::optional<Tensor<double, 1>>& bias_of(const Problem<double>& pr, int w) {
    return w == 0 ? pr.b_Q : w == 1 ? pr.b_K : w == 2 ? pr.b_V : pr.b_O;
}
bool square(const Problem<double>& pr, int w) {
    if (w == 3 && !pr.W_O) return false;
    const auto& W = weight(pr, w);
    return W.shape()[0] == W.shape()[1];
}

// y = src · W (or · Wᵀ) (+ b): (rows, in) x (in, out) -> (rows, out).
std::vector<double> linear(const double* src, std::size_t rows, const Problem<double>& pr, int w, const Mutation& m) {
    const auto& W = weight(pr, w);
    const std::size_t in = W.shape()[0], out = W.shape()[1];
    const double* Wd = W.data();
    const auto& b = bias_of(pr, w);
    std::vector<double> y(rows * out, 0.0);
    for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t o = 0; o < out; ++o) {
            double s = (b && !m.no_bias[std::size_t(w)]) ? (*b)(o) : 0.0;
            for (std::size_t i = 0; i < in; ++i)
                s += src[r * in + i] * (m.transposed[std::size_t(w)] ? Wd[o * in + i] : Wd[i * out + o]);
            y[r * out + o] = s;
        }
    return y;
}

// Q, K or V: src · W (+ b) (B, T, n·D), split into n heads -> (B, n, T, D).
Dense project(const Run& r, int w, const Mutation& m) {
    const Tensor<double, 3>& src = w == 0 ? r.pr.x : r.pr.src();
    const std::size_t B = src.shape()[0], T = src.shape()[1], D = w == 2 ? r.Dv : r.Dk;
    const std::size_t out = weight(r.pr, w).shape()[1], n = out / D;
    const std::vector<double> y = linear(src.data(), B * T, r.pr, w, m);  // (B, T, n·D)
    Dense t = dense({B, n, T, D});
    if (m.split == HeadSplit::flat) {  // the same memory read as (B, n, T, D)
        t.v = y;
        return t;
    }
    const bool inter = m.split == HeadSplit::interleaved;  // (B, T, D, n) transposed to (B, n, T, D)
    for (std::size_t b = 0; b < B; ++b)
        for (std::size_t h = 0; h < n; ++h)
            for (std::size_t i = 0; i < T; ++i)
                for (std::size_t d = 0; d < D; ++d)
                    t.v[((b * n + h) * T + i) * D + d] = y[(b * T + i) * out + (inter ? d * n + h : h * D + d)];
    return t;
}

// scores = Q · Kᵀ · scale: (B,H,Tq,Dk) x (B,G,Dk,Tk) -> (B,H,Tq,Tk); query head h reads
// K/V head h / (H/G). Transposed: K · Qᵀ (Tq = Tk).
Dense scores(const Run& r, const Dense& Q, const Dense& K, double scale, bool transposed) {
    Dense s = dense({r.B, r.H, r.Tq, r.Tk});
    const std::size_t group = r.H / r.G;
    for (std::size_t b = 0; b < r.B; ++b)
        for (std::size_t h = 0; h < r.H; ++h) {
            const double* q = &Q.v[(b * r.H + h) * r.Tq * r.Dk];
            const double* k = &K.v[(b * r.G + h / group) * r.Tk * r.Dk];
            for (std::size_t i = 0; i < r.Tq; ++i)
                for (std::size_t j = 0; j < r.Tk; ++j) {
                    const double* a = transposed ? k + i * r.Dk : q + i * r.Dk;
                    const double* c = transposed ? q + j * r.Dk : k + j * r.Dk;
                    double dot = 0;
                    for (std::size_t d = 0; d < r.Dk; ++d) dot += a[d] * c[d];
                    s.v[((b * r.H + h) * r.Tq + i) * r.Tk + j] = dot * scale;
                }
        }
    return s;
}

// The mask rebuilt from its parts (padding, causal), with one of them edited.
Dense edited_mask(const Run& r, MaskEdit e, const Dense& ref_mask) {
    const MaskRule& rule = r.pr.mask;
    Dense m = dense({r.B, r.Tq, r.Tk});
    for (std::size_t b = 0; b < r.B; ++b)
        for (std::size_t i = 0; i < r.Tq; ++i)
            for (std::size_t j = 0; j < r.Tk; ++j) {
                const std::size_t k = (b * r.Tq + i) * r.Tk + j;
                const long long p = rule.query_position(i), jj = static_cast<long long>(j);
                const bool pad = rule.padded(b, j), past = !rule.causal() || jj <= p;
                bool v = !pad && past;
                switch (e) {
                    case MaskEdit::none:
                        break;
                    case MaskEdit::inverted:
                        v = ref_mask.v[k] == 0;
                        break;
                    case MaskEdit::padding_inverted:
                        v = pad && past;
                        break;
                    case MaskEdit::causal_inverted:
                        v = !pad && !past;
                        break;
                    case MaskEdit::includes_next:
                        v = !pad && jj <= p + 1;
                        break;
                    case MaskEdit::excludes_self:
                        v = !pad && jj < p;
                        break;
                    case MaskEdit::upper:
                        v = !pad && jj >= p;
                        break;
                    case MaskEdit::on_queries:
                        v = past && !rule.padded(b, i);
                        break;
                }
                m.v[k] = v ? 1.0 : 0.0;
            }
    return m;
}

// masked_scores: scores (+ bias), -inf (or 0) where the mask is false.
Dense masked(const Run& r, const Dense& s, const Dense* bias, const Dense& mask, Fill f) {
    Dense out = s;
    const std::size_t cells = r.Tq * r.Tk;
    for (std::size_t b = 0; b < r.B; ++b)
        for (std::size_t h = 0; h < r.H; ++h)
            for (std::size_t c = 0; c < cells; ++c) {
                const std::size_t k = (b * r.H + h) * cells + c;
                if (bias) out.v[k] += bias->v[k];
                if (mask.v[b * cells + c] == 0 && (f == Fill::neg_inf || f == Fill::zero))
                    out.v[k] = f == Fill::zero ? 0.0 : -kInf;
            }
    return out;
}

// Softmax of each line of n cells (stride apart), the row maximum subtracted; a line with
// every cell -inf follows `policy`. Returns whether there was such a line.
bool softmax_line(double* x, std::size_t n, std::size_t stride, RowPolicy policy) {
    double mx = -kInf;
    for (std::size_t i = 0; i < n; ++i) mx = std::max(mx, x[i * stride]);
    if (mx == -kInf) {
        const double fill = policy == RowPolicy::nan ? kNaN : policy == RowPolicy::uniform ? 1.0 / double(n) : 0.0;
        for (std::size_t i = 0; i < n; ++i) x[i * stride] = fill;
        return true;
    }
    double sum = 0;
    for (std::size_t i = 0; i < n; ++i) sum += (x[i * stride] = std::exp(x[i * stride] - mx));
    for (std::size_t i = 0; i < n; ++i) x[i * stride] /= sum;
    return false;
}

Dense weights(const Run& r, const Dense& ms, const Dense& mask, const Mutation& m, bool& empty_lines) {
    Dense w = ms;
    const std::size_t cells = r.Tq * r.Tk;
    for (std::size_t bh = 0; bh < r.B * r.H; ++bh) {
        double* x = &w.v[bh * cells];
        if (m.over_queries) {
            for (std::size_t j = 0; j < r.Tk; ++j) empty_lines |= softmax_line(x + j, r.Tq, r.Tk, m.policy);
        } else {
            for (std::size_t i = 0; i < r.Tq; ++i) empty_lines |= softmax_line(x + i * r.Tk, r.Tk, 1, m.policy);
        }
        if (m.fill == Fill::after_softmax)  // zeroed after the softmax, not renormalised
            for (std::size_t c = 0; c < cells; ++c)
                if (mask.v[(bh / r.H) * cells + c] == 0) x[c] = 0;
    }
    return w;
}

// context = weights · V: (B,H,Tq,Tk) x (B,G,Tk,D) -> (B,H,Tq,D).
Dense context(const Run& r, const Dense& w, const Dense& V) {
    const std::size_t D = V.shape[3], group = r.H / r.G;
    Dense c = dense({r.B, r.H, r.Tq, D});
    for (std::size_t b = 0; b < r.B; ++b)
        for (std::size_t h = 0; h < r.H; ++h) {
            const double* v = &V.v[(b * r.G + h / group) * r.Tk * D];
            for (std::size_t i = 0; i < r.Tq; ++i) {
                const double* wr = &w.v[((b * r.H + h) * r.Tq + i) * r.Tk];
                double* out = &c.v[((b * r.H + h) * r.Tq + i) * D];
                for (std::size_t j = 0; j < r.Tk; ++j)
                    for (std::size_t d = 0; d < D; ++d) out[d] += wr[j] * v[j * D + d];
            }
        }
    return c;
}

// output: heads concatenated (B, Tq, H·Dv), then · W_O (+ b_O).
Dense output(const Run& r, const Dense& c, const Mutation& m) {
    const std::size_t HD = r.H * r.Dv;
    std::vector<double> merged(r.B * r.Tq * HD);
    if (m.merge == HeadSplit::flat) {  // (B, H, Tq, Dv) memory read as (B, Tq, H·Dv)
        merged = c.v;
    } else {
        const bool inter = m.merge == HeadSplit::interleaved;  // transposed to (B, Tq, Dv, H), then reshaped
        for (std::size_t b = 0; b < r.B; ++b)
            for (std::size_t h = 0; h < r.H; ++h)
                for (std::size_t i = 0; i < r.Tq; ++i)
                    for (std::size_t d = 0; d < r.Dv; ++d)
                        merged[(b * r.Tq + i) * HD + (inter ? d * r.H + h : h * r.Dv + d)] =
                            c.v[((b * r.H + h) * r.Tq + i) * r.Dv + d];
    }
    Dense o;
    o.shape = {r.B, r.Tq, r.pr.W_O && !m.no_output_projection ? weight(r.pr, 3).shape()[1] : HD};
    o.v = r.pr.W_O && !m.no_output_projection ? linear(merged.data(), r.B * r.Tq, r.pr, 3, m) : merged;
    return o;
}

// Stage p computed from the stages before it (`cur`) under mutation m. Stages the
// diagnosis does not model (Q_rot, K_rot, bias) pass through as they are.
Dense step(Stage p, const Run& r, const Pipe& cur, const Mutation& m, bool& empty_lines) {
    const Dense& Qs = r.present[kQRot] ? *cur[kQRot] : *cur[kQ];
    const Dense& Ks = r.present[kKRot] ? *cur[kKRot] : *cur[kK];
    switch (p) {
        case kQ:
            return project(r, 0, m);
        case kK:
            return project(r, 1, m);
        case kV:
            return project(r, 2, m);
        case kQRot:
            return *cur[kQ];  // (RoPE is not modelled: the faithfulness check says so)
        case kKRot:
            return *cur[kK];
        case kScores:
            return scores(r, Qs, Ks, m.scale.value_or(r.scale), m.scores_transposed);
        case kBias:
            return *cur[kBias];
        case kMask:
            return m.mask == MaskEdit::none ? *cur[kMask] : edited_mask(r, m.mask, *cur[kMask]);
        case kMaskedScores:
            return masked(r, *cur[kScores], r.present[kBias] ? cur[kBias] : nullptr, *cur[kMask], m.fill);
        case kWeights:
            return weights(r, *cur[kMaskedScores], *cur[kMask], m, empty_lines);
        case kContext:
            return context(r, *cur[kWeights], m.values_are_keys ? *cur[kK] : *cur[kV]);
        case kOutput:
            return output(r, *cur[kContext], m);
        case kSinkWeight:
        case kHeadOutput:
        case kStageCount:
            break;
    }
    return {};
}

// ---------------------------------------------------------------------------------------
// 5. The catalogue
// ---------------------------------------------------------------------------------------

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

std::size_t catalogue_index(const std::string& id) {
    for (std::size_t i = 0; i < kCatalogue.size(); ++i)
        if (kCatalogue[i].id == id) return i;
    return kCatalogue.size();
}

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

// Every mistake that can happen in this run, with each of its forms.
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

// ---------------------------------------------------------------------------------------
// 6. Their arrays
// ---------------------------------------------------------------------------------------

// The precisions a computation may have been done in: the unit roundoff's double (eps) and
// the default tolerance. Measured against float64 (|Δ| / max(1, |ref|), two heads, causal):
// float32 attention came within 1.3e-6 at T = 64 (tolerance 2e-5), float16 within 3.6e-3
// at T = 256 (1e-2), bfloat16 within 7.1e-2 at T = 64 (1e-1). Every other dtype (float64,
// JSON, integers) counts as float64.
struct Precision {
    std::string_view name;
    double eps, tol;
};
constexpr Precision kPrecisions[] = {
    {"float64", 0x1p-52, 1e-9}, {"float32", 0x1p-23, 2e-5}, {"float16", 0x1p-10, 1e-2}, {"bfloat16", 0x1p-7, 1e-1}};

const Precision& precision_info(const std::string& dtype) {
    for (const Precision& p : kPrecisions)
        if (p.name == dtype) return p;
    return kPrecisions[0];
}

struct Theirs {
    const Array* array = nullptr;
    std::string name;
    AxisReading layout;
    std::vector<std::size_t> map;  // their cell k -> reference offset
    std::vector<double> values;    // in the reference's order
    std::string precision;         // precision_of(its dtype, {dtype})
    Tolerance tol;
};

// {rtol} alone sets atol too (|Δ| <= rtol · max(1, |ref|)); {atol} alone leaves rtol.
Tolerance tolerance_of(const Array& a, const CheckOptions& o) {
    Tolerance t = default_tolerance(precision_of(a.dtype, o.computed));
    if (o.rtol) t.rtol = t.atol = *o.rtol;
    if (o.atol) t.atol = *o.atol;
    return t;
}

std::string origin_of(const Bundle& b, const std::string& name, const Array& a) {
    return a.origin.empty() ? b.source + ": " + name : a.origin;
}

// The axis order of one array of theirs: as --axes says, or the only one its shape fits.
AxisReading resolve_layout(const TraceView& ref, const StageView& s, const std::string& where, const std::string& name,
                           const Array& a, const std::optional<std::string>& order) {
    const auto canon = canonical_axes(ref, s);
    if (order) {
        std::string why;
        const auto l = stage_layout(*order, canon, &why);
        if (!l)
            throw InputError("{axes} " + name + "=" + *order + ": not an axis order of " + s.name + " (" + why + "; " +
                             s.name + " has " + sizes_text(s, ref.batched) + ")");
        if (l->shape != a.shape)
            throw InputError("{axes} " + name + "=" + *order + ": means the shape " + shape_str(l->shape) + ", but " +
                             where + " has the shape " + shape_str(a.shape));
        return *l;
    }
    std::vector<AxisReading> fits, all = stage_layouts(canon);
    for (const auto& l : all)
        if (l.shape == a.shape) fits.push_back(l);
    if (fits.size() == 1) return fits[0];
    std::vector<std::string> listed;
    for (const auto& l : (fits.empty() ? all : fits)) listed.push_back(l.name() + " " + shape_str(l.shape));
    if (fits.empty())
        throw InputError(where + ": the shape " + shape_str(a.shape) + " fits no axis order of " + s.name + " (" +
                         sizes_text(s, ref.batched) + "): expected " + join(listed, ", or ") +
                         " (tensors of another bundle, or other model options such as {heads}?)");
    throw InputError(where + ": the shape " + shape_str(a.shape) + " fits more than one axis order of " + s.name +
                     " (" + sizes_text(s, ref.batched) + "): " + join(listed, ", or ") + "; say which with {axes} " +
                     name + "=ORDER");
}

// Input arrays in THEIRS (x, W_Q, ...) must be the bundle's: otherwise their stages come
// from other inputs and no comparison means anything.
void check_input_array(const Bundle& inputs, const std::string& where, const std::string& name, const Array& a,
                       const CheckOptions& o) {
    const auto it = inputs.arrays.find(name);
    if (it == inputs.arrays.end())
        throw InputError(where + ": an input array that " + inputs.source +
                         " does not have (these tensors come from other inputs?)");
    const Array& b = it->second;
    if (a.is_text() || b.is_text()) {
        if (a.strings != b.strings || a.shape != b.shape)
            throw InputError(where + ": differs from " + name + " of " + inputs.source);
        return;
    }
    if (a.shape != b.shape)
        throw InputError(where + ": the shape " + shape_str(a.shape) + " differs from " + name + " of " +
                         inputs.source + " " + shape_str(b.shape) + " (tensors of another bundle?)");
    const Cmp c = compare(a.doubles(), b.doubles(), tolerance_of(a, o));
    if (!c.match)
        throw InputError(where + ": differs from " + name + " of " + inputs.source + " (max |Δ| " + num(c.max_abs) +
                         " at " + shape_str(unravel(c.at, a.shape)) + "): tensors of another bundle?");
}

// ---------------------------------------------------------------------------------------
// 7. Where a difference sits, when no mistake reproduces it
// ---------------------------------------------------------------------------------------

std::string index_list(const std::set<std::size_t>& s, std::size_t max = 8) {
    std::string out;
    std::size_t n = 0;
    for (std::size_t v : s) {
        if (n++ == max) return out + ", … (" + std::to_string(s.size()) + " in all)";
        out += (out.empty() ? "" : ", ") + std::to_string(v);
    }
    return out;
}

// What the differing cells of one stage have in common.
struct Tally {
    Axes canon;
    std::size_t ax_b = 99, ax_h = 99, ax_t = 99, ax_k = 99;  // axes (99: none)
    std::set<std::size_t> batches, heads, rows;
    std::size_t bad = 0, bad_masked = 0, bad_nan = 0;
    bool factor_ok = true, offset_ok = true;  // theirs = c · ref, theirs = ref + c everywhere
    double factor = kNaN, offset = kNaN;
};

void tally_cell(Tally& y, const Tolerance& tol, double u, double x) {
    if (std::isfinite(x) && std::isfinite(u)) {
        if (std::fabs(x) > 1e-12) {
            if (std::isnan(y.factor)) y.factor = u / x;
            y.factor_ok &= std::fabs(u / x - y.factor) <= 1e-6 * std::max(1.0, std::fabs(y.factor));
        } else {
            y.factor_ok &= std::fabs(u) <= tol.atol;
        }
        if (std::isnan(y.offset)) y.offset = u - x;
        y.offset_ok &= std::fabs(u - x - y.offset) <= std::max(tol.atol, tol.rtol * std::fabs(x));
    } else if (!(u == x || (x == -kInf && u <= kLargeNegative))) {
        y.factor_ok = y.offset_ok = false;
    }
}

Tally tally(const TraceView& ref, const StageView& s, const Theirs& t, const Dense& r, const Dense& ref_mask) {
    Tally y;
    y.canon = canonical_axes(ref, s);
    for (std::size_t i = 0; i < y.canon.size(); ++i) {
        const char c = y.canon[i].letter;
        if (c == 'b') y.ax_b = i;
        if (c == 'h') y.ax_h = i;
        if (c == 't' || c == 'q') y.ax_t = i;
        if (c == 'k') y.ax_k = i;
    }
    std::vector<std::size_t> full;
    for (const auto& a : y.canon) full.push_back(a.size);
    const bool with_mask = y.ax_k < full.size() && y.ax_b < full.size() && y.ax_t < full.size() &&
                           ref_mask.v.size() == full[y.ax_b] * full[y.ax_t] * full[y.ax_k];
    for (std::size_t k = 0; k < r.v.size(); ++k) {
        const double u = t.values[k], x = r.v[k], d = std::fabs(u - x);
        tally_cell(y, t.tol, u, x);
        const bool differs = !(u == x || (x == -kInf && u <= kLargeNegative)) &&
                             (!std::isfinite(d) || d > std::max(t.tol.atol, t.tol.rtol * std::fabs(x)));
        if (!differs) continue;
        ++y.bad;
        if (std::isnan(u)) ++y.bad_nan;
        const auto at = unravel(k, full);
        if (y.ax_b < at.size()) y.batches.insert(at[y.ax_b]);
        if (y.ax_h < at.size()) y.heads.insert(at[y.ax_h]);
        if (y.ax_t < at.size()) y.rows.insert(at[y.ax_t]);
        if (with_mask && ref_mask.v[(at[y.ax_b] * full[y.ax_t] + at[y.ax_t]) * full[y.ax_k] + at[y.ax_k]] == 0)
            ++y.bad_masked;
    }
    return y;
}

std::string factor_words(double factor, double dk) {
    const double sq = std::sqrt(dk);
    std::string hint;
    if (std::fabs(factor - sq) < 1e-6 * sq) hint = " = √Dk";
    if (std::fabs(factor - 1 / sq) < 1e-6) hint = " = 1/√Dk";
    if (std::fabs(factor - dk) < 1e-6 * dk && dk != sq) hint = " = Dk";
    if (std::fabs(factor - 1 / dk) < 1e-6 && dk != sq) hint = " = 1/Dk";
    const double delta = factor - 1;  // near 1, "1 ×" would hide it: (1 + 4e-05)
    const std::string f = std::fabs(delta) < 1e-2
                              ? "(1 " + std::string(delta < 0 ? "- " : "+ ") + num(std::fabs(delta)) + ")"
                              : num(factor);
    return "theirs = " + f + hint + " × the reference everywhere (a scale factor)";
}

// Where their stage differs from the reference: how many cells, NaN, a factor or an
// offset, masked cells only, which batch items, heads and rows.
std::vector<Finding> describe(const TraceView& ref, const StageView& s, const Theirs& t, const Dense& r,
                              const Dense& ref_mask) {
    const Tally y = tally(ref, s, t, r, ref_mask);
    auto size = [&](std::size_t ax) { return ax < y.canon.size() ? y.canon[ax].size : 0; };
    std::vector<Finding> out;
    out.push_back({"cells", std::to_string(y.bad) + " of " + std::to_string(r.v.size()) + " cells differ"});
    if (y.bad_nan) out.push_back({"nan", std::to_string(y.bad_nan) + " of them are NaN in theirs"});
    if (y.factor_ok && !std::isnan(y.factor) && std::fabs(y.factor - 1) > 1e-9)
        out.push_back({"factor", factor_words(y.factor, double(ref.dims.Dk))});
    else if (y.offset_ok && !std::isnan(y.offset) && y.offset != 0)
        out.push_back({"offset", "theirs = the reference + " + num(y.offset) + " everywhere (a constant added)"});
    if (size(y.ax_k) && y.bad && y.bad_masked == y.bad)
        out.push_back({"masked-cells", "only in masked cells (keys the mask hides): check how the mask is applied"});
    else if (size(y.ax_k) && y.bad && y.bad_masked == 0 && ref.mask_rule.masking())
        out.push_back({"visible-cells", "only in cells the mask leaves visible"});
    if (size(y.ax_b) > 1 && y.batches.size() < size(y.ax_b))
        out.push_back({"batch", "only in batch items " + index_list(y.batches)});
    if (size(y.ax_h) > 1 && y.heads.size() < size(y.ax_h))
        out.push_back({"heads", "only in heads " + index_list(y.heads)});
    if (size(y.ax_t) > 1 && y.rows.size() < size(y.ax_t))
        out.push_back(
            {"rows", std::string("only in ") + (size(y.ax_k) ? "query" : "position") + " rows " + index_list(y.rows)});
    return out;
}

// Another reading of their array that matches: a transpose, or another axis order.
void describe_orders(const TraceView& ref, const StageView& s, const Theirs& t, const Dense& r,
                     std::vector<Finding>& out) {
    const auto canon = canonical_axes(ref, s);
    std::string letters;
    for (const auto& a : canon)
        if (a.size > 1) letters += a.letter;
    if (letters.size() != t.array->shape.size() || letters.size() > 4) return;
    std::sort(letters.begin(), letters.end());
    const std::vector<double> raw = t.array->doubles();
    do {
        const auto l = stage_layout(letters, canon, nullptr);
        if (!l || l->shape != t.array->shape || l->signature == t.layout.signature) continue;
        const auto map = cell_map(*l, canon);
        std::vector<double> v(raw.size());
        for (std::size_t k = 0; k < raw.size(); ++k) v[map[k]] = raw[k];
        if (compare(v, r.v, t.tol).match) {
            std::string swapped = t.layout.signature;
            for (char& ch : swapped) ch = ch == 'q' ? 'k' : ch == 'k' ? 'q' : ch;
            if (swapped != t.layout.signature && l->signature == swapped)
                out.push_back({"transpose", "theirs is the reference transposed (query and key axes swapped)"});
            out.push_back({"axes", "their numbers match when read in the order " + l->name() + ": pass {axes} " +
                                       t.name + "=" + l->name()});
            return;
        }
    } while (std::next_permutation(letters.begin(), letters.end()));
}

// ---------------------------------------------------------------------------------------
// 8. The diagnosis
// ---------------------------------------------------------------------------------------

struct Context {
    const TraceView& ref;
    Run run;
    std::array<std::optional<Dense>, kStageCount> refd;  // the reference, present stages
    std::array<const Theirs*, kStageCount> theirs{};     // given arrays
    StageSet matched;                                    // given and matching
    StageSet faithful;                                   // our unmutated step reproduces the reference
    bool mask_parts_ok = false;                          // the mask rebuilt from padding and causal is the reference's
};

Dense dense_of(const StageView& s, bool batched) {
    Dense d;
    d.shape = s.shape;
    if (!batched) d.shape.insert(d.shape.begin(), 1);
    d.v.resize(s.size());
    for (std::size_t k = 0; k < d.v.size(); ++k) d.v[k] = s.at(k);
    return d;
}

bool same(const Dense& a, const Dense& b) {
    return a.shape == b.shape && compare(a.v, b.v, Tolerance{1e-9, 1e-9}).match;
}

// Sizes from the reference's own stages; false when they are not the classic shapes.
bool init_run(Context& c) {
    Run& r = c.run;
    const auto &Q = c.refd[kQ], &K = c.refd[kK], &V = c.refd[kV], &O = c.refd[kOutput];
    if (!Q || !K || !V || !O || !c.refd[kScores] || !c.refd[kMask] || !c.refd[kMaskedScores] || !c.refd[kWeights] ||
        !c.refd[kContext])
        return false;
    r.B = Q->shape[0], r.H = Q->shape[1], r.Tq = Q->shape[2], r.Dk = Q->shape[3];
    r.G = K->shape[1], r.Tk = K->shape[2], r.Dv = V->shape[3], r.Dout = O->shape[2];
    r.scale = c.ref.scale;
    return r.G > 0 && r.H % r.G == 0 && K->shape[3] == r.Dk &&
           c.refd[kScores]->shape == std::vector<std::size_t>{r.B, r.H, r.Tq, r.Tk};
}

void check_faithful(Context& c) {
    Pipe refp{};
    for (std::size_t p = 0; p < kStageCount; ++p) refp[p] = c.refd[p] ? &*c.refd[p] : nullptr;
    const Mutation none;
    for (std::size_t p = 0; p < kStageCount; ++p) {
        if (!c.run.present[p]) continue;
        bool empty = false;
        try {
            c.faithful[p] = same(step(Stage(p), c.run, refp, none, empty), *c.refd[p]);
        } catch (const std::exception&) {
            c.faithful[p] = false;
        }
    }
    c.faithful[kQRot] = c.faithful[kKRot] = c.faithful[kBias] = false;  // not modelled: never passed through
    c.mask_parts_ok = same(edited_mask(c.run, MaskEdit::none, *c.refd[kMask]), *c.refd[kMask]);
}

struct Trial {
    bool fits = false;
    double max_abs = 0;
    std::vector<std::string> also, not_later;
    bool empty_lines = false;
};

// Runs mutation m from its entry to the first divergent stage S (and on past it when it
// fits there, to see which later stages it reproduces too).
Trial try_mutation(const Context& c, const Mutation& m, Stage S) {
    Trial t;
    Pipe cur{};
    std::array<Dense, kStageCount> own, known;  // known: theirs, in the reference's order, where given and matching
    for (std::size_t p = 0; p < kStageCount; ++p) {
        cur[p] = c.refd[p] ? &*c.refd[p] : nullptr;
        if (c.theirs[p] && c.matched[p]) {
            known[p].shape = c.refd[p]->shape;
            known[p].v = c.theirs[p]->values;
            cur[p] = &known[p];
        }
    }
    std::size_t last = S;
    for (std::size_t p = S + 1; p < kStageCount; ++p)
        if (c.theirs[p]) last = p;
    for (std::size_t p = m.entry; p <= last; ++p) {
        if (!c.run.present[p]) continue;
        const bool parts = p == kMask && m.mask != MaskEdit::none && m.mask != MaskEdit::inverted;
        if (p == kBias || (p == kMask && m.mask == MaskEdit::none)) continue;  // passes through
        if (p <= S && (parts ? !c.mask_parts_ok : !c.faithful[p])) return t;
        if (p > S && !c.faithful[p]) break;
        own[p] = step(Stage(p), c.run, cur, m, t.empty_lines);
        cur[p] = &own[p];
        const Theirs* th = c.theirs[p];
        if (p < S && th && !compare(th->values, own[p].v, th->tol).match) return t;  // theirs is right there
        if (p == S) {
            if (compare(own[p].v, c.refd[p]->v, th->tol).match) return t;  // changes nothing
            const Cmp fit = compare(th->values, own[p].v, th->tol);
            if (!fit.match) return t;
            t.fits = true, t.max_abs = fit.max_abs;
        } else if (p > S && th) {
            (compare(th->values, own[p].v, th->tol).match ? t.also : t.not_later).emplace_back(stage_name(Stage(p)));
        }
    }
    return t;
}

const char* policy_words(RowPolicy p) {
    return p == RowPolicy::nan ? "rows with no visible key NaN" : "rows with no visible key uniform";
}

std::vector<Diagnosis> diagnose_stage(const Context& c, Stage S) {
    std::vector<Diagnosis> found;
    auto consider = [&](const Mutation& m, const Trial& t) {
        if (!t.fits) return;
        Diagnosis d;
        d.id = m.id, d.stage = S, d.max_abs_diff = t.max_abs;
        d.variant = m.variant;
        if (m.policy != RowPolicy::zero && m.id.rfind("masked-rows", 0) != 0)
            d.variant += (d.variant.empty() ? "" : "; ") + std::string(policy_words(m.policy));
        d.also = t.also, d.not_later = t.not_later;
        const Mistake& info = kCatalogue[catalogue_index(m.id)];
        d.title = info.title, d.explanation = info.explanation, d.fix = info.fix;
        for (auto& e : found)
            if (e.id == d.id) {
                if (d.also.size() > e.also.size() ||
                    (d.also.size() == e.also.size() && d.max_abs_diff < e.max_abs_diff))
                    e = d;
                return;
            }
        found.push_back(d);
    };
    for (const Mutation& m : mutations(c.run)) {
        const Trial t = try_mutation(c, m, S);
        consider(m, t);
        if (t.empty_lines && m.policy == RowPolicy::zero && m.id.rfind("masked-rows", 0) != 0)
            for (RowPolicy p : {RowPolicy::nan, RowPolicy::uniform}) {
                Mutation v = m;
                v.policy = p;
                consider(v, try_mutation(c, v, S));
            }
    }
    std::stable_sort(found.begin(), found.end(), [](const Diagnosis& a, const Diagnosis& b) {
        if (a.also.size() != b.also.size()) return a.also.size() > b.also.size();
        if (a.not_later.size() != b.not_later.size()) return a.not_later.size() < b.not_later.size();
        return catalogue_index(a.id) < catalogue_index(b.id);
    });
    return found;
}

}  // namespace

// ---------------------------------------------------------------------------------------

Tolerance default_tolerance(const std::string& precision) {
    const Precision& p = precision_info(precision);
    return {p.tol, p.tol};
}

std::string precision_of(const std::string& dtype, const std::string& computed) {
    return precision_info(computed).eps > precision_info(dtype).eps ? computed : dtype;
}

const std::vector<Mistake>& mistake_catalogue() { return kCatalogue; }

bool CheckResult::matches() const {
    return !first_divergent && std::any_of(stages.begin(), stages.end(), [](const StageCheck& s) { return s.given; });
}

std::optional<Stage> stage_of_name(std::string_view name) { return stage_of_alias(without_hook_prefix(name)); }

std::vector<std::string> accepted_orders(const TraceView& ref, Stage stage) {
    std::vector<std::string> out;
    const StageView* s = ref.find(stage);
    if (!s) return out;
    for (const auto& l : stage_layouts(canonical_axes(ref, *s))) out.push_back(l.name() + " " + shape_str(l.shape));
    return out;
}

namespace {

// Their arrays: names -> stages, shapes -> axis orders, values -> our order. Input arrays
// (x, W_Q, ...) are checked against the bundle and listed in `inputs_found`.
std::map<Stage, Theirs> read_theirs(const TraceView& ref, const Bundle& inputs, const Bundle& theirs,
                                    const CheckOptions& options, std::vector<std::string>& inputs_found) {
    for (const auto& [name, order] : options.axes)
        if (!theirs.arrays.count(name)) {
            std::vector<std::string> names;
            for (const auto& a : theirs.arrays) names.push_back(a.first);
            throw InputError("{axes} " + name + "=" + order + ": " + theirs.source + " has no array " + name +
                             " (it has: " + join(names) + ")");
        }
    std::map<Stage, Theirs> given;
    const auto& input_names = known_array_names();
    for (const auto& [name, array] : theirs.arrays) {
        const std::string where = origin_of(theirs, name, array);
        if (std::find(input_names.begin(), input_names.end(), name) != input_names.end()) {
            check_input_array(inputs, where, name, array, options);
            inputs_found.push_back(name);
            continue;
        }
        const auto id = stage_of_name(name);
        bool hook = false;
        without_hook_prefix(name, &hook);
        if (!id && hook)
            throw InputError(where +
                             ": a TransformerLens hook that is no attention stage (keep one layer's "
                             "blocks.L.attn.hook_q, hook_k, hook_v, hook_attn_scores, hook_pattern, hook_z, "
                             "hook_result and blocks.L.hook_attn_out)");
        if (!id) throw InputError(where + ": not a stage name (expected " + names_expected() + ")");
        const StageView* s = ref.find(*id);
        if (!s) throw InputError(where + ": this run has no stage " + stage_name(*id) + " (see the model options)");
        if (given.count(*id))
            throw InputError(where + ": names the stage " + s->name + " like " + given[*id].name +
                             " does; keep one of them");
        if (array.is_text()) throw InputError(where + ": holds text, expected the numbers of " + s->name);
        Theirs t;
        t.array = &array, t.name = name, t.tol = tolerance_of(array, options);
        t.precision = precision_of(array.dtype, options.computed);
        const auto ax = options.axes.find(name);
        t.layout = resolve_layout(ref, *s, where, name, array,
                                  ax == options.axes.end() ? std::nullopt : std::optional<std::string>(ax->second));
        t.map = cell_map(t.layout, canonical_axes(ref, *s));
        const std::vector<double> raw = array.doubles();
        t.values.resize(raw.size());
        for (std::size_t k = 0; k < raw.size(); ++k) t.values[t.map[k]] = raw[k];
        given[*id] = std::move(t);
    }
    return given;
}

// One stage of the reference, and theirs compared with it when given.
StageCheck check_stage(const StageView& s, const Theirs* t) {
    StageCheck sc;
    sc.id = s.id, sc.name = s.name, sc.ref_axes = s.axes, sc.ref_shape = s.shape;
    if (!t) return sc;
    std::vector<double> r(s.size());
    for (std::size_t k = 0; k < r.size(); ++k) r[k] = s.at(k);
    const Cmp c = compare(t->values, r, t->tol);
    sc.given = true, sc.their_name = t->name, sc.dtype = t->array->dtype, sc.axes = t->layout.name();
    sc.precision = t->precision;
    sc.their_shape = t->array->shape, sc.tol = t->tol, sc.match = c.match, sc.max_abs_diff = c.max_abs;
    sc.relative_error = c.relative, sc.mismatched = c.bad, sc.cells = r.size();
    sc.rtol_needed = c.needed, sc.nonfinite = c.nonfinite, sc.large_negative_fill = c.large_negative;
    // Rounding: every cell within √eps of the precision (half its digits), in float32 or less.
    const Precision& p = precision_info(t->precision);
    sc.rounding_level = !c.match && p.eps > kPrecisions[0].eps && c.needed <= std::sqrt(p.eps);
    if (c.max_abs > 0) {
        const std::size_t k = std::size_t(std::find(t->map.begin(), t->map.end(), c.at) - t->map.begin());
        sc.at = unravel(k, t->array->shape);
        sc.at_ref = unravel(c.at, s.shape);
        sc.theirs_at = t->values[c.at], sc.ref_at = r[c.at];
    }
    return sc;
}

// The diagnosis of the first divergent stage: the mistakes that reproduce it, or where
// the difference sits.
void diagnose_first(const TraceView& ref, const Problem<double>& problem, const std::map<Stage, Theirs>& given,
                    CheckResult& result) {
    Context c{ref, Run{problem}, {}, {}, {}, {}, false};
    for (const Stage p : stages_in(kModelled)) {
        const StageView* s = ref.find(p);
        if (!s) continue;
        c.refd[p] = dense_of(*s, ref.batched);
        c.run.present[p] = true;
        if (given.count(p)) {
            c.theirs[p] = &given.at(p);
            for (const auto& sc : result.stages)
                if (sc.id == p) c.matched[p] = sc.match;
        }
    }
    const Stage S = *result.first_divergent;
    if (!init_run(c)) {
        result.no_diagnosis =
            "the catalogue's mistakes are those of the classic pipeline; this run's stages do not have its shapes";
    } else if (!kModelled[S] || S == kQRot || S == kKRot || S == kBias) {
        result.no_diagnosis =
            "the catalogue's mistakes are in the classic stages; " + stage_name(S) + " is not one of them";
    } else {
        check_faithful(c);
        result.diagnosis = diagnose_stage(c, S);
    }
    if (!result.diagnosis.empty()) return;
    const StageView& fs = ref.stage(S);
    const Theirs& t = given.at(S);
    const Dense r = dense_of(fs, ref.batched);
    result.where = describe(ref, fs, t, r, c.refd[kMask] ? *c.refd[kMask] : dense({1, 1, 1}));
    describe_orders(ref, fs, t, r, result.where);
}

}  // namespace

CheckResult check_tensors(const TraceView& ref, const Problem<double>& problem, const Bundle& inputs,
                          const Bundle& theirs, const CheckOptions& options) {
    CheckResult result;
    // 1. Their arrays, in our stages and axis order.
    const std::map<Stage, Theirs> given = read_theirs(ref, inputs, theirs, options, result.inputs);
    if (given.empty())  // nothing compared is never a match
        throw InputError(theirs.source + ": no stage to compare" +
                         (result.inputs.empty()
                              ? std::string(", no array at all")
                              : ": only the input arrays " + join(result.inputs) + " (the bundle itself?)") +
                         "; expected " + names_expected());
    // 2. Stage by stage, in pipeline order; the first that differs.
    for (const StageView& s : ref.stages) {
        const auto it = given.find(s.id);
        result.stages.push_back(check_stage(s, it == given.end() ? nullptr : &it->second));
        if (result.stages.back().given && !result.stages.back().match && !result.first_divergent)
            result.first_divergent = s.id;
    }
    // 3. Which mistake makes it.
    if (result.first_divergent) diagnose_first(ref, problem, given, result);
    return result;
}

}  // namespace attnscope
