// Model layer: named arrays + Spec -> a validated Problem<T>. Every shape is checked
// against every other here, before the core does any arithmetic.
#include "attnscope/model/model.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <set>

#include "attnscope/base/errors.hpp"
#include "attnscope/base/suggest.hpp"
#include "attnscope/base/text.hpp"
#include "attnscope/model/qkv.hpp"

namespace attnscope {

TokenLabels TokenLabels::shared(std::vector<std::string> list, std::size_t items) {
    TokenLabels t;
    t.lists_ = std::make_shared<const std::vector<std::vector<std::string>>>(1, std::move(list));
    t.items_ = items;
    return t;
}

TokenLabels TokenLabels::per_item(std::vector<std::vector<std::string>> lists) {
    TokenLabels t;
    t.items_ = lists.size();
    t.lists_ = std::make_shared<const std::vector<std::vector<std::string>>>(std::move(lists));
    return t;
}

std::size_t TokenLabels::bytes() const {
    std::size_t n = 0;
    if (lists_)
        for (const auto& list : *lists_)
            for (const auto& s : list) n += sizeof(std::string) + s.capacity();
    return n;
}

const std::vector<std::string>& known_array_names() {
    static const std::vector<std::string> names = {"x", "memory", "W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V",
                                                   "b_O", "key_padding_mask", "query_tokens", "key_tokens",
                                                   // modern attention: positions, biases, sinks
                                                   "q_positions", "k_positions", "alibi_slopes", "attn_mask", "sinks",
                                                   "q_norm", "k_norm",
                                                   // nn.MultiheadAttention's add_bias_kv
                                                   "bias_k", "bias_v",
                                                   // PyTorch nn.MultiheadAttention state dict (with {layout} torch)
                                                   "in_proj_weight", "in_proj_bias", "q_proj_weight", "k_proj_weight",
                                                   "v_proj_weight", "out_proj.weight", "out_proj.bias"};
    return names;
}

const std::vector<std::string>& weight_array_names() {
    static const std::vector<std::string> names = {"W_Q",
                                                   "W_K",
                                                   "W_V",
                                                   "W_O",
                                                   "b_Q",
                                                   "b_K",
                                                   "b_V",
                                                   "b_O",
                                                   "in_proj_weight",
                                                   "in_proj_bias",
                                                   "q_proj_weight",
                                                   "k_proj_weight",
                                                   "v_proj_weight",
                                                   "out_proj.weight",
                                                   "out_proj.bias",
                                                   "bias_k",
                                                   "bias_v"};
    return names;
}

namespace {
std::string join(const std::vector<std::string>& v);
}  // namespace

void check_array_name(const std::string& source, const std::string& name) {
    const auto& known = known_array_names();
    if (std::find(known.begin(), known.end(), name) == known.end())
        throw InputError(source + ": unknown array '" + escape_control(clip_fragment(name)) + "'" +
                         escape_control(did_you_mean(name, known)) + " (a bundle may hold: " + join(known) + ")");
}

namespace {

const std::set<std::string> kTorchNames = {"in_proj_weight", "in_proj_bias",    "q_proj_weight", "k_proj_weight",
                                           "v_proj_weight",  "out_proj.weight", "out_proj.bias"};

std::string join(const std::vector<std::string>& v) {
    std::string s;
    for (const auto& e : v) s += (s.empty() ? "" : ", ") + e;
    return s;
}

// A 2-D numeric array as the model reads it: rows [row0, row0 + rows) of an input
// array, or (transposed) the transpose of those rows. Only a description: the numbers
// stay in the array until to_tensor() copies them out, once, into the typed tensor.
struct Mat {
    std::size_t rows = 0, cols = 0;
    const Array* a = nullptr;
    std::size_t row0 = 0;  // first row taken from `a` (before transposing)
    bool transposed = false;
    Mat transpose() const { return {cols, rows, a, row0, !transposed}; }
    Mat row_block(std::size_t r0, std::size_t n) const {
        return {n, cols, a, row0 + r0, transposed};
    }  // untransposed only
};

// A 1-D run of numbers: elements [begin, begin + n) of an input array.
struct Vec {
    const Array* a = nullptr;
    std::size_t begin = 0, n = 0;
};

class Builder {
   public:
    Builder(const Bundle& b, const Spec& s) : b_(b), spec_(s) {}

    const Array* find(const std::string& name) const {
        auto it = b_.arrays.find(name);
        return it == b_.arrays.end() ? nullptr : &it->second;
    }

    [[noreturn]] void fail(const Array& a, const std::string& what) const { throw InputError(a.origin + ": " + what); }

    const Array& numeric(const Array& a) const {
        if (a.is_text()) fail(a, "expected numbers, found text");
        return a;
    }

    Mat matrix(const Array& a) const {
        numeric(a);
        if (a.ndim() != 2) fail(a, "expected a 2-D matrix, found shape " + shape_str(a.shape));
        if (a.shape[0] == 0 || a.shape[1] == 0)  // a zero-width projection has nothing to compute
            fail(a, "expected a matrix with at least one row and one column, found shape " + shape_str(a.shape));
        return {a.shape[0], a.shape[1], &a};
    }

    Vec vector(const Array& a, std::size_t n, const std::string& expect) const {
        numeric(a);
        if (a.ndim() != 1 || a.shape[0] != n)
            fail(a, "expected shape (" + std::to_string(n) + ",) = (" + expect + ",), found " + shape_str(a.shape));
        return {&a, 0, n};
    }

    // A weight in math layout (in, out) whose first axis must be `in`.
    // `out` is the width the columns must have, when already known (0: any).
    Mat weight(const Array& a, std::size_t in, const std::string& in_name, const std::string& source_desc,
               std::size_t out = 0) const {
        Mat m = matrix(a);
        if (spec_.layout == Layout::torch) m = m.transpose();
        check_in(m, a, in, in_name, source_desc, out);
        return m;
    }

    void check_in(const Mat& m, const Array& a, std::size_t in, const std::string& in_name,
                  const std::string& source_desc, std::size_t out) const {
        if (m.rows == in) return;
        std::string layout =
            spec_.layout == Layout::torch ? "(out, in) layout, {layout} torch" : "math layout (in, out)";
        std::string what = "expected " + std::to_string(in) + " rows (" + in_name + ", the width of " + source_desc +
                           ") in the " + layout + ", found shape " + shape_str(a.shape);
        if (m.cols == in && (out == 0 || m.rows == out))
            what += spec_.layout == Layout::math
                        ? "; its transpose would fit: if it is stored (out, in) as PyTorch's nn.Linear does, pass "
                          "{layout} torch"
                        : "; its transpose would fit: it looks stored (in, out), so drop {layout} torch";
        fail(a, what);
    }

    void check_names() const {
        for (const auto& [name, arr] : b_.arrays) {
            check_array_name(b_.source, name);
            if (kTorchNames.count(name) && spec_.layout != Layout::torch)
                throw InputError(b_.source + ": " + name +
                                 " is a PyTorch nn.MultiheadAttention parameter (weights stored (out, in)); pass "
                                 "{layout} torch to read it");
        }
    }

    const Bundle& b_;
    const Spec& spec_;
};

// The non-finite numbers of each input array, found while it is copied out (every
// numeric input is copied whole exactly once) or, for one never copied, by a scan.
class NonFiniteLog {
   public:
    void note(const Array& a, const NonFinite& nf) { found_.emplace(&a, nf); }
    // Adds what a part of `a` starting at element `offset` held (parts copied out one by one).
    void add(const Array& a, const NonFinite& nf, std::size_t offset) {
        NonFinite& f = found_[&a];
        if (nf.count && (f.count == 0 || offset + nf.first < f.first)) {
            f.first = offset + nf.first;
            f.first_value = nf.first_value;
        }
        f.count += nf.count;
    }
    bool has(const Array& a) const { return found_.count(&a) != 0; }

    // A warning naming the array and the first non-finite value, so a NaN is traced to
    // its source. A float64 input beyond float32's range becomes infinite in a float32
    // run, and is reported the same way ("in this precision").
    template <typename T>
    void warn(const Array& a, std::vector<std::string>& warnings) {
        if (!has(a)) {
            Buffer<T> scratch(a.count());
            note(a, copy_numbers<T>(a, scratch.data()));
        }
        const NonFinite& nf = found_.at(&a);
        if (nf.count == 0) return;
        std::vector<std::size_t> idx(a.shape.size());
        for (std::size_t i = a.shape.size(), rest = nf.first; i-- > 0;) {
            idx[i] = rest % a.shape[i];
            rest /= a.shape[i];
        }
        std::string where;
        for (std::size_t i : idx) where += "[" + std::to_string(i) + "]";
        char buf[32];
        std::snprintf(buf, sizeof buf, "%g", nf.first_value);
        warnings.push_back(a.origin + ": " + std::to_string(nf.count) + " non-finite value" +
                           (nf.count > 1 ? "s" : "") + (std::isfinite(nf.first_value) ? " in this precision" : "") +
                           ", the first " + buf + " at " + where + "; every stage it reaches will carry it");
    }

   private:
    std::map<const Array*, NonFinite> found_;
};

// Copies an input array whole into `out` (count() numbers as T), noting its non-finite ones.
template <typename T>
void copy_whole(const Array& a, T* out, NonFiniteLog& log) {
    const NonFinite nf = copy_numbers<T>(a, out);
    if (!log.has(a)) log.note(a, nf);
}

template <typename T, std::size_t N>
Tensor<T, N> to_tensor(const Array& a, const std::array<std::size_t, N>& shape, NonFiniteLog& log) {
    Tensor<T, N> t = Tensor<T, N>::from_shape(shape);
    copy_whole(a, t.data(), log);
    return t;
}

// Rows [r0, r0 + n) of a 2-D numeric array, as an array of their own: numbers kept as
// stored stay where they are (no copy), doubles are copied.
Array rows_of(const Array& a, std::size_t r0, std::size_t n) {
    Array s;
    s.shape = {n, a.shape[1]};
    s.dtype = a.dtype;
    s.origin = a.origin;
    s.held = a.held;
    s.keep = a.keep;
    const std::size_t per = a.shape[1];
    if (a.held == Array::Held::doubles) {
        s.values.assign(a.values.begin() + std::ptrdiff_t(r0 * per), a.values.begin() + std::ptrdiff_t((r0 + n) * per));
    } else {
        const std::size_t size = Array::item_size(a.held);
        s.stored = a.stored.substr(r0 * per * size, n * per * size);
    }
    return s;
}

template <typename T>
Tensor<T, 2> to_tensor(const Mat& m, NonFiniteLog& log) {
    Tensor<T, 2> t = Tensor<T, 2>::from_shape({m.rows, m.cols});
    const std::size_t cols = m.a->shape[1];  // of the input array
    if (!m.transposed && m.row0 == 0 && m.rows == m.a->shape[0]) {
        copy_whole(*m.a, t.data(), log);  // the common case: the array as it is
        return t;
    }
    // A block of rows (in_proj_weight's q, k or v) and/or the transpose ((out, in) layout):
    // the source rows used, in slabs of about 64K numbers, each copied out once (its
    // non-finite numbers noted) and placed; never a copy of the whole array.
    const std::size_t used = m.transposed ? m.cols : m.rows;
    const std::size_t slab = std::max<std::size_t>(1, (std::size_t{1} << 16) / cols);
    Buffer<T> buf(std::min(slab, used) * cols);
    T* out = t.data();
    for (std::size_t r = 0; r < used; r += slab) {
        const std::size_t n = std::min(slab, used - r);
        log.add(*m.a, copy_numbers<T>(rows_of(*m.a, m.row0 + r, n), buf.data()), (m.row0 + r) * cols);
        if (!m.transposed) {
            std::copy(buf.data(), buf.data() + n * cols, out + r * cols);
            continue;
        }
        for (std::size_t c = 0; c < cols; ++c) {  // source column c is row c of t
            T* row = out + c * m.cols + r;
            for (std::size_t i = 0; i < n; ++i) row[i] = buf[i * cols + c];
        }
    }
    return t;
}

template <typename T>
Tensor<T, 1> to_tensor(const Vec& v, NonFiniteLog& log) {
    Tensor<T, 1> t = Tensor<T, 1>::from_shape({v.n});
    if (v.begin == 0 && v.n == v.a->count()) {
        copy_whole(*v.a, t.data(), log);
        return t;
    }
    Buffer<T> all(v.a->count());
    copy_whole(*v.a, all.data(), log);
    std::copy(all.begin() + long(v.begin), all.begin() + long(v.begin + v.n), t.begin());
    return t;
}

TokenLabels tokens(const Builder& bld, const std::string& name, std::size_t B, std::size_t T, bool batched,
                   const std::string& axis) {
    const Array* a = bld.find(name);
    if (!a) return {};
    if (!a->is_text()) bld.fail(*a, "expected a list of strings (token labels), found numbers");
    if (a->ndim() == 1 && a->shape[0] == T) return TokenLabels::shared(a->strings, B);
    if (a->ndim() == 2 && a->shape[0] == B && a->shape[1] == T) {
        std::vector<std::vector<std::string>> lists(B);
        for (std::size_t b = 0; b < B; ++b)
            lists[b].assign(a->strings.begin() + long(b * T), a->strings.begin() + long((b + 1) * T));
        return TokenLabels::per_item(std::move(lists));
    }
    bld.fail(*a, "expected " + std::to_string(T) + " labels (" + axis + " = " + std::to_string(T) + ")" +
                     (batched ? " or shape (" + std::to_string(B) + ", " + std::to_string(T) + ")" : "") +
                     ", found shape " + shape_str(a->shape));
}

// Key labels with <bias_kv> and <zero> appended (k0, k1, ... for the others when none are given).
TokenLabels with_extra_labels(const TokenLabels& given, bool bias_kv, bool zero, const Dims& d) {
    std::vector<std::vector<std::string>> lists;
    const std::size_t items = given.empty() ? 1 : given.size();
    for (std::size_t b = 0; b < items; ++b) {
        std::vector<std::string> l;
        if (given.empty())
            for (std::size_t j = 0; j < d.source_keys(); ++j) l.push_back("k" + std::to_string(j));
        else
            l = given[b];
        if (bias_kv) l.emplace_back("<bias_kv>");
        if (zero) l.emplace_back("<zero>");
        lists.push_back(std::move(l));
    }
    if (lists.size() == 1) return TokenLabels::shared(std::move(lists[0]), d.B);
    return TokenLabels::per_item(std::move(lists));
}

// The spec's own numbers, before any array is looked at.
void check_spec(const Spec& spec) {
    if (spec.heads == 0) throw UsageError("{heads}: expected a positive number of heads, found 0");
    if (spec.scale && !std::isfinite(*spec.scale)) throw UsageError("{scale}: expected a finite number");
    if (!(spec.temperature > 0) || !std::isfinite(spec.temperature))
        throw UsageError("{temperature}: expected a positive number");
    if (spec.kv_heads && *spec.kv_heads == 0) throw UsageError("{kv_heads}: expected a positive number, found 0");
    if (spec.kv_heads && spec.heads % *spec.kv_heads != 0)
        throw UsageError("{kv_heads} " + std::to_string(*spec.kv_heads) + ": does not divide {heads} " +
                         std::to_string(spec.heads) + " (each K/V head serves H/G query heads)");
    if (spec.rope) {
        if (!(spec.rope->base > 1) || !std::isfinite(spec.rope->base))
            throw UsageError("{rope_base}: expected a finite number above 1");
        if (spec.rope->dim && (*spec.rope->dim == 0 || *spec.rope->dim % 2 != 0))
            throw UsageError("{rope_dim} " + std::to_string(*spec.rope->dim) +
                             ": expected a positive even number (features rotate in pairs)");
    }
    if (spec.window && *spec.window == 0)
        throw UsageError("{window}: expected at least 1 (the number of positions a query sees)");
    if (spec.softcap && (!(*spec.softcap > 0) || !std::isfinite(*spec.softcap)))
        throw UsageError("{softcap}: expected a positive finite number");
}

// ALiBi's slopes for H heads (Press et al., 2022): m_h = 2^(-8(h+1)/H) when H is a power
// of two; otherwise the n = 2^floor(log2 H) slopes of n heads, then every other slope of
// 2n heads until there are H.
std::vector<double> alibi_slopes(std::size_t H) {
    auto power_of_two = [](std::size_t n) {
        std::vector<double> m(n);
        for (std::size_t h = 0; h < n; ++h) m[h] = std::exp2(-8.0 * double(h + 1) / double(n));
        return m;
    };
    std::size_t n = 1;
    while (n * 2 <= H) n *= 2;
    std::vector<double> m = power_of_two(n);
    if (n == H) return m;
    const std::vector<double> twice = power_of_two(2 * n);
    for (std::size_t k = 0; m.size() < H; k += 2) m.push_back(twice[k]);
    return m;
}

// The weights as the bundle describes them (not yet copied out): in math layout (in, out).
struct Weights {
    Mat wq, wk, wv;
    std::optional<Mat> wo;
    std::optional<Vec> bq, bk, bv, bo;
    const Array* in_proj = nullptr;
};

// 1. Inputs: x and memory, which fix B, Tq, Tk, Dm and Dkv.
template <typename T>
void read_inputs(const Builder& bld, const Bundle& bundle, Problem<T>& p, NonFiniteLog& nonfinite) {
    Dims& d = p.dims;
    // 1. Inputs: x (Tq, Dm) or (B, Tq, Dm); memory (Tk, Dkv) or (B, Tk, Dkv).
    const Array* x = bld.find("x");
    if (!x) throw InputError(bundle.source + ": no array 'x' (the query input, shape (Tq, Dm) or (B, Tq, Dm))");
    bld.numeric(*x);
    if (x->ndim() != 2 && x->ndim() != 3)
        bld.fail(*x, "expected (Tq, Dm) or (B, Tq, Dm), found shape " + shape_str(x->shape));
    p.batched = x->ndim() == 3;
    d.B = p.batched ? x->shape[0] : 1;
    d.Tq = x->shape[x->ndim() - 2];
    d.Dm = x->shape[x->ndim() - 1];
    if (d.B == 0 || d.Tq == 0 || d.Dm == 0)
        bld.fail(*x, "expected a non-empty array, found shape " + shape_str(x->shape));
    p.x = to_tensor<T, 3>(*x, {d.B, d.Tq, d.Dm}, nonfinite);
    nonfinite.warn<T>(*x, p.warnings);

    const Array* mem = bld.find("memory");
    p.cross = mem != nullptr;
    if (mem) {
        bld.numeric(*mem);
        if (mem->ndim() != x->ndim())
            bld.fail(*mem, std::string("expected ") +
                               (p.batched ? "(B, Tk, Dkv) like x's (B, Tq, Dm)" : "(Tk, Dkv) like x's (Tq, Dm)") +
                               ", found shape " + shape_str(mem->shape));
        if (p.batched && mem->shape[0] != d.B)
            bld.fail(*mem, "expected batch size B = " + std::to_string(d.B) + " (as in x), found shape " +
                               shape_str(mem->shape));
        d.Tk = mem->shape[mem->ndim() - 2];
        d.Dkv = mem->shape[mem->ndim() - 1];
        if (d.Tk == 0 || d.Dkv == 0) bld.fail(*mem, "expected a non-empty array, found shape " + shape_str(mem->shape));
        p.memory = to_tensor<T, 3>(*mem, {d.B, d.Tk, d.Dkv}, nonfinite);
        nonfinite.warn<T>(*mem, p.warnings);
    } else {
        d.Tk = d.Tq;
        d.Dkv = d.Dm;
    }
}

// 2a. nn.MultiheadAttention's state dict: in_proj_weight, or q/k/v_proj_weight.
void read_torch_weights(const Builder& bld, const Bundle& bundle, const Dims& d, bool cross, Weights& out,
                        const std::vector<std::string>& separate) {
    Mat &wq = out.wq, &wk = out.wk, &wv = out.wv;
    std::optional<Mat>& wo = out.wo;
    std::optional<Vec>&bq = out.bq, &bk = out.bk, &bv = out.bv;
    const Array* in_proj = out.in_proj;
    const Array* q_proj = bld.find("q_proj_weight");
    const std::string src_desc = cross ? "memory" : "x";
    // nn.MultiheadAttention: y = x Wᵀ + b, the q, k, v blocks stacked along axis 0.
    for (const char* n : {"W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V", "b_O"})
        if (const Array* a = bld.find(n))
            bld.fail(*a, std::string("given together with PyTorch's nn.MultiheadAttention weights; keep one set"));
    if (in_proj) {
        Mat w = bld.matrix(*in_proj);
        if (w.rows % 3 != 0 || w.rows / 3 != w.cols)
            bld.fail(*in_proj, "expected shape (3E, E) with E = embed_dim, found " + shape_str(in_proj->shape));
        std::size_t E = w.cols;
        if (E != d.Dm || E != d.Dkv)
            bld.fail(*in_proj, "expected E = " + std::to_string(d.Dm) + " (x's width" +
                                   (cross ? " and memory's width " + std::to_string(d.Dkv) : std::string()) +
                                   "), found shape " + shape_str(in_proj->shape) +
                                   (cross ? "; for other widths nn.MultiheadAttention uses q/k/v_proj_weight" : ""));
        wq = w.row_block(0, E).transpose();
        wk = w.row_block(E, E).transpose();
        wv = w.row_block(2 * E, E).transpose();
    } else {
        const Array* k_proj = bld.find("k_proj_weight");
        const Array* v_proj = bld.find("v_proj_weight");
        if (!q_proj || !k_proj || !v_proj) {
            std::vector<std::string> missing;
            for (const char* n : {"q_proj_weight", "k_proj_weight", "v_proj_weight"})
                if (!bld.find(n)) missing.emplace_back(n);
            throw InputError(bundle.source + ": " + separate[0] + " needs " +
                             (missing.size() == 1 ? missing[0] : missing[0] + " and " + missing[1]) + " beside it");
        }
        wq = bld.weight(*q_proj, d.Dm, "Dm", "x");
        wk = bld.weight(*k_proj, d.Dkv, "Dkv", src_desc, wq.cols);
        wv = bld.weight(*v_proj, d.Dkv, "Dkv", src_desc);
        if (wv.cols != wq.cols)  // nn.MultiheadAttention projects q, k and v to embed_dim alike
            bld.fail(*v_proj, "expected E = " + std::to_string(wq.cols) +
                                  " outputs like q_proj_weight (E = embed_dim), found shape " +
                                  shape_str(v_proj->shape));
    }
    if (const Array* b = bld.find("in_proj_bias")) {
        std::size_t E = wq.cols;
        const Vec v = bld.vector(*b, 3 * E, "3E");
        bq = Vec{v.a, 0, E};
        bk = Vec{v.a, E, E};
        bv = Vec{v.a, 2 * E, E};
    }
    if (const Array* a = bld.find("out_proj.weight"))
        wo = bld.matrix(*a).transpose();
    else if (const Array* b = bld.find("out_proj.bias"))
        bld.fail(*b, "an output bias needs out_proj.weight beside it");
}

// 2b. W_Q, W_K, W_V (and W_O), in the spec's layout.
void read_named_weights(const Builder& bld, const Bundle& bundle, const Spec& spec, const Dims& d, bool cross,
                        Weights& w) {
    Mat &wq = w.wq, &wk = w.wk, &wv = w.wv;
    std::optional<Mat>& wo = w.wo;
    const std::string src_desc = cross ? "memory" : "x";
    // What is left of the state dict's names would be ignored (or taken for b_O) here.
    for (const char* n : {"in_proj_bias", "out_proj.weight", "out_proj.bias"})
        if (const Array* a = bld.find(n))
            bld.fail(*a, "an nn.MultiheadAttention parameter without in_proj_weight or q/k/v_proj_weight" +
                             std::string(bld.find("W_Q") ? ", given together with W_Q, W_K, W_V; keep one set" : ""));
    for (const char* n : {"W_Q", "W_K", "W_V"})
        if (!bld.find(n))
            throw InputError(bundle.source + ": no array '" + n + "' (the " + std::string(n).substr(2) +
                             " projection, shape (in, out))");
    wq = bld.weight(*bld.find("W_Q"), d.Dm, "Dm", "x");
    wk = bld.weight(*bld.find("W_K"), d.Dkv, "Dkv", src_desc, wq.cols);
    wv = bld.weight(*bld.find("W_V"), d.Dkv, "Dkv", src_desc);
    if (const Array* a = bld.find("W_O")) {
        wo = bld.matrix(*a);
        if (spec.layout == Layout::torch) *wo = wo->transpose();
    }
}

// 2. Projection weights: one of the two forms, never both.
Weights read_weights(const Builder& bld, const Bundle& bundle, const Spec& spec, const Dims& d, bool cross) {
    Weights w;
    // Two forms, never mixed: W_Q, W_K, W_V (W_O, b_*), or nn.MultiheadAttention's state
    // dict, whose q, k, v weights are in_proj_weight or else q/k/v_proj_weight, never both.
    w.in_proj = bld.find("in_proj_weight");
    const Array* in_proj = w.in_proj;
    std::vector<std::string> separate;  // q/k/v_proj_weight given
    for (const char* n : {"q_proj_weight", "k_proj_weight", "v_proj_weight"})
        if (bld.find(n)) separate.emplace_back(n);
    if (in_proj && !separate.empty())  // nn.MultiheadAttention has in_proj_weight exactly when kdim = vdim = embed_dim
        throw InputError(bundle.source +
                         ": both forms of nn.MultiheadAttention's q, k, v weights given: in_proj_weight and " +
                         join(separate) + "; remove " +
                         (d.Dkv == d.Dm ? join(separate) + " (inputs of one width, as here, take in_proj_weight)"
                                        : "in_proj_weight (memory's width " + std::to_string(d.Dkv) + " is not x's " +
                                              std::to_string(d.Dm) + ": that takes q/k/v_proj_weight)"));
    if (in_proj || !separate.empty())
        read_torch_weights(bld, bundle, d, cross, w, separate);
    else
        read_named_weights(bld, bundle, spec, d, cross, w);
    return w;
}

// 3. Widths: queries and keys share one width; heads split both it and the value width.
void split_widths(const Builder& bld, const Bundle& bundle, const Spec& spec, const Weights& w, Dims& d) {
    const Mat &wq = w.wq, &wk = w.wk, &wv = w.wv;
    const std::optional<Mat>& wo = w.wo;
    const Array* in_proj = w.in_proj;
    const Array& wk_arr = bld.find("W_K")             ? *bld.find("W_K")
                          : bld.find("k_proj_weight") ? *bld.find("k_proj_weight")
                                                      : *in_proj;
    if (wq.cols == 0 || wv.cols == 0)
        throw InputError(bundle.source + ": W_Q and W_V must have at least one output column");
    d.H = spec.heads;
    d.G = spec.kv_heads.value_or(d.H);
    if (wq.cols % d.H != 0)
        throw UsageError("{heads} " + std::to_string(d.H) + ": does not divide the query/key width H*Dk = " +
                         std::to_string(wq.cols) + " of W_Q (" + bundle.source + ")");
    d.Dk = wq.cols / d.H;
    if (wk.cols != d.G * d.Dk) {
        std::string what =
            d.G == d.H
                ? "queries and keys must share one width: W_Q gives H*Dk = " + std::to_string(wq.cols) +
                      " columns but W_K gives " + std::to_string(wk.cols) + " (shape " + shape_str(wk_arr.shape) + ")"
                : "expected G*Dk = " + std::to_string(d.G) + "*" + std::to_string(d.Dk) + " = " +
                      std::to_string(d.G * d.Dk) + " columns (G = {kv_heads} K/V heads of " +
                      "Dk = " + std::to_string(d.Dk) + " features), found shape " + shape_str(wk_arr.shape);
        if (!spec.kv_heads && wk.cols < wq.cols && wk.cols % d.Dk == 0 && d.H % (wk.cols / d.Dk) == 0)
            what +=
                "; if the model shares each K/V head among several query heads (grouped-query attention), "
                "pass {kv_heads} " +
                std::to_string(wk.cols / d.Dk);
        bld.fail(wk_arr, what);
    }
    if (w.in_proj && d.G != d.H)
        bld.fail(*w.in_proj, "nn.MultiheadAttention's in_proj_weight has one K/V head per query head; {kv_heads} " +
                                 std::to_string(d.G) + " needs separate q/k/v_proj_weight or W_Q, W_K, W_V");
    if (wv.cols % d.G != 0)
        throw UsageError((d.G == d.H ? "{heads} " : "{kv_heads} ") + std::to_string(d.G) +
                         ": does not divide the value width " + (d.G == d.H ? "H" : "G") +
                         "*Dv = " + std::to_string(wv.cols) + " of W_V (" + bundle.source + ")");
    d.Dv = wv.cols / d.G;

    if (wo) {
        const Array& a = bld.find("W_O") ? *bld.find("W_O") : *bld.find("out_proj.weight");
        if (wo->rows != d.H * d.Dv)
            bld.fail(a, "expected " + std::to_string(d.H * d.Dv) +
                            " rows (H*Dv, the concatenated heads' width, in the " +
                            (spec.layout == Layout::torch ? "(out, in) layout" : "math layout (in, out)") +
                            "), found shape " + shape_str(a.shape) +
                            (wo->cols == d.H * d.Dv && spec.layout == Layout::math
                                 ? "; its transpose would fit: if it is stored (out, in) as PyTorch's nn.Linear does, "
                                   "pass {layout} torch"
                                 : ""));
        d.Dout = wo->cols;
    } else {
        d.Dout = d.H * d.Dv;
    }
}

// 4. Biases, checked against the widths.
void read_biases(const Builder& bld, const Dims& d, Weights& w) {
    const std::optional<Mat>& wo = w.wo;
    std::optional<Vec>&bq = w.bq, &bk = w.bk, &bv = w.bv, &bo = w.bo;
    auto bias = [&](const char* name, std::size_t n, const char* expect, std::optional<Vec>& out) {
        if (const Array* a = bld.find(name)) out = bld.vector(*a, n, expect);
    };
    bias("b_Q", d.H * d.Dk, "H*Dk", bq);
    bias("b_K", d.G * d.Dk, d.G == d.H ? "H*Dk" : "G*Dk", bk);
    bias("b_V", d.G * d.Dv, d.G == d.H ? "H*Dv" : "G*Dv", bv);
    if (bld.find("b_O") && !wo) bld.fail(*bld.find("b_O"), "an output bias needs W_O beside it");
    bias("b_O", d.Dout, "Dout", bo);
    bias("out_proj.bias", d.Dout, "Dout", bo);
}

// The weights and biases copied out once, into typed tensors.
template <typename T>
void copy_weights(const Bundle& bundle, const Weights& w, Problem<T>& p, NonFiniteLog& nonfinite) {
    const Mat &wq = w.wq, &wk = w.wk, &wv = w.wv;
    const std::optional<Mat>& wo = w.wo;
    const std::optional<Vec>&bq = w.bq, &bk = w.bk, &bv = w.bv, &bo = w.bo;
    p.W_Q = to_tensor<T>(wq, nonfinite);
    p.W_K = to_tensor<T>(wk, nonfinite);
    p.W_V = to_tensor<T>(wv, nonfinite);
    if (wo) p.W_O = to_tensor<T>(*wo, nonfinite);
    auto vec = [&](const std::optional<Vec>& v) -> std::optional<Tensor<T, 1>> {
        if (!v) return std::nullopt;
        return to_tensor<T>(*v, nonfinite);
    };
    p.b_Q = vec(bq);
    p.b_K = vec(bk);
    p.b_V = vec(bv);
    p.b_O = vec(bo);
    for (const auto& [name, arr] : bundle.arrays)
        if (!arr.is_text() && name != "x" && name != "memory" && name != "key_padding_mask" && name != "attn_mask" &&
            name != "q_positions" && name != "k_positions")
            nonfinite.warn<T>(arr, p.warnings);
}

// 5a. Key padding mask: (B, Tk) for a 3-D x, (Tk,) for a 2-D one, 1/true = PAD. As in
// PyTorch, a (Tk,) mask is not spread over a batch: nn.MultiheadAttention refuses it.
// (The appended <bias_kv>/<zero> keys are never PAD, as PyTorch pads the mask with 0.)
std::optional<xt::xtensor<bool, 2>> read_key_padding(const Builder& bld, const Dims& d, bool batched) {
    const Array* m = bld.find("key_padding_mask");
    if (!m) return std::nullopt;
    bld.numeric(*m);
    const std::size_t Tk = d.source_keys();
    const bool fits = (!batched && m->ndim() == 1 && m->shape[0] == Tk) ||
                      (m->ndim() == 2 && m->shape[0] == d.B && m->shape[1] == Tk);
    if (!fits)
        bld.fail(*m, "expected " +
                         (batched ? "(B, Tk) = (" + std::to_string(d.B) + ", " + std::to_string(Tk) +
                                        ") for a 3-D x (one row per batch item, as PyTorch requires)"
                                  : "(Tk,) = (" + std::to_string(Tk) + ",) for a 2-D x") +
                         " with 1/true = PAD, found shape " + shape_str(m->shape));
    xt::xtensor<bool, 2> pad = xt::xtensor<bool, 2>::from_shape({d.B, d.Tk});
    pad.fill(false);
    for (std::size_t b = 0; b < d.B; ++b)
        for (std::size_t j = 0; j < Tk; ++j) {
            std::size_t k = m->ndim() == 1 ? j : b * Tk + j;
            double v = m->value(k);
            if (v != 0.0 && v != 1.0)
                bld.fail(*m, "expected 0/1 or true/false (1 = PAD), found " + std::to_string(v) + " at element " +
                                 std::to_string(k) + " (an additive float mask is an attn_mask)");
            pad(b, j) = v == 1.0;
        }
    return pad;
}

// 5b. q_positions / k_positions: (T,) or (B, T) whole numbers.
std::optional<xt::xtensor<long long, 2>> read_positions(const Builder& bld, const char* name, const Dims& d,
                                                        std::size_t T_, const char* axis, bool batched) {
    const Array* a = bld.find(name);
    if (!a) return std::nullopt;
    bld.numeric(*a);
    const bool fits =
        (a->ndim() == 1 && a->shape[0] == T_) || (a->ndim() == 2 && a->shape[0] == d.B && a->shape[1] == T_);
    if (!fits)
        bld.fail(*a, "expected (" + std::string(axis) + ",) = (" + std::to_string(T_) + ",)" +
                         (batched ? " or (B, " + std::string(axis) + ") = (" + std::to_string(d.B) + ", " +
                                        std::to_string(T_) + ")"
                                  : "") +
                         ", found shape " + shape_str(a->shape));
    const std::size_t rows = a->ndim() == 1 ? 1 : d.B;
    xt::xtensor<long long, 2> pos = xt::xtensor<long long, 2>::from_shape({rows, T_});
    for (std::size_t k = 0; k < rows * T_; ++k) {
        const double v = a->value(k);
        if (a->dtype == "bool" || !(std::fabs(v) < 9007199254740992.0) || v != std::floor(v)) {
            char buf[32];
            std::snprintf(buf, sizeof buf, "%g", v);
            bld.fail(*a, std::string("expected whole-number positions, found ") +
                             (a->dtype == "bool" ? "booleans" : std::string(buf) + " at element " + std::to_string(k)));
        }
        pos.data()[k] = (long long)v;
    }
    return pos;
}

// nn.MultiheadAttention's 3-D attn_mask (B·H, Tq, Tk), batch-major (row b·H + h): the
// (B, H, Tq, Tk) mask with its first two axes merged. Never ambiguous: with B = 1 or H = 1
// it is the (H, Tq, Tk) or (B, Tq, Tk) form, and with both above 1, B·H is neither B nor H.
bool merged_batch_heads(const std::vector<std::size_t>& sh, const Dims& d) {
    return sh.size() == 3 && d.B > 1 && d.H > 1 && sh[0] == d.B * d.H;
}

// Whether an attn_mask of this shape differs by head: (H, Tq, Tk) with H != B,
// (B·H, Tq, Tk) with B, H > 1, or (B or 1, H, Tq, Tk) with H > 1.
bool mask_has_heads(const std::vector<std::size_t>& sh, const Dims& d) {
    const std::size_t Tk = d.source_keys();
    if (sh.size() == 3)
        return (merged_batch_heads(sh, d) || (sh[0] == d.H && d.H != d.B)) && sh[1] == d.Tq && sh[2] == Tk;
    return sh.size() == 4 && sh[1] == d.H && d.H > 1 && (sh[0] == d.B || sh[0] == 1) && sh[2] == d.Tq && sh[3] == Tk;
}

// 5c. A boolean attn_mask ((Tq, Tk), (B, Tq, Tk), or 4-D with a head axis of 1), in the
// polarity {attn_mask_means} names, as "may attend". A mask that differs by head cannot
// be the mask stage (B, Tq, Tk): read_float_attn_mask() makes it an additive 0/-inf bias.
std::optional<xt::xtensor<bool, 3>> read_bool_attn_mask(const Builder& bld, const Spec& spec, const Dims& d) {
    const Array* a = bld.find("attn_mask");
    if (!a || spec.attn_mask_means == MaskMeans::unset || mask_has_heads(a->shape, d)) return std::nullopt;
    const auto& sh = a->shape;
    const std::size_t Tk = d.source_keys();  // the appended keys are always visible
    const std::string tqk = std::to_string(d.Tq) + ", " + std::to_string(Tk);
    std::size_t rows = 0;
    if (sh.size() == 2 && sh[0] == d.Tq && sh[1] == Tk) rows = 1;
    if (sh.size() == 3 && sh[0] == d.B && sh[1] == d.Tq && sh[2] == Tk) rows = d.B;
    if (sh.size() == 4 && (sh[0] == d.B || sh[0] == 1) && sh[1] == 1 && sh[2] == d.Tq && sh[3] == Tk) rows = sh[0];
    if (sh.size() == 3 && sh[0] == d.B && d.B == d.H && d.B > 1 && sh[1] == d.Tq && sh[2] == Tk)
        bld.fail(*a, "shape " + shape_str(sh) + " is ambiguous: B = H = " + std::to_string(d.B) +
                         ", so its first axis could be the batch or the heads; give it 4-D, (B, 1, Tq, Tk)");
    if (sh.size() == 4 && sh[1] != 1 && sh[2] == d.Tq && sh[3] == Tk)
        bld.fail(*a, "expected a head axis of 1 or H = " + std::to_string(d.H) + ", found shape " + shape_str(sh));
    if (rows == 0)
        bld.fail(*a, "expected a boolean mask of shape (Tq, Tk) = (" + tqk + "), (B, Tq, Tk) = (" +
                         std::to_string(d.B) + ", " + tqk + ") or (B, 1, Tq, Tk), found " + shape_str(sh));
    if (a->dtype.rfind("float", 0) == 0)
        bld.fail(*a, "a float mask (" + a->dtype +
                         ") is added to the scores as it is; {attn_mask_means} is for a bool or integer mask");
    const bool allow = spec.attn_mask_means == MaskMeans::allow;
    xt::xtensor<bool, 3> m = xt::xtensor<bool, 3>::from_shape({rows, d.Tq, d.Tk});
    m.fill(true);
    for (std::size_t k = 0; k < rows * d.Tq * Tk; ++k) {
        const double v = a->value(k);
        if (a->dtype == "json" && v != 0 && v != 1)
            bld.fail(*a, "expected true/false or 0/1 (read as a boolean mask: {attn_mask_means} is given), found " +
                             std::to_string(v) + " at element " + std::to_string(k));
        m.data()[k / Tk * d.Tk + k % Tk] = (v != 0) == allow;
    }
    return m;
}

// 5d. A float attn_mask, added to the scores: (Tq, Tk), (B, Tq, Tk), (H, Tq, Tk),
// (B·H, Tq, Tk) or (B, H, Tq, Tk); a 3-D mask is told apart by its first size. A boolean mask that differs
// by head comes here too, as 0 where it lets a key be seen and -inf where it hides it.
template <typename T>
std::optional<Tensor<T, 4>> read_float_attn_mask(const Builder& bld, const Spec& spec, const Dims& d,
                                                 NonFiniteLog& nonfinite) {
    const Array* a = bld.find("attn_mask");
    const bool by_head_bool = a && spec.attn_mask_means != MaskMeans::unset && mask_has_heads(a->shape, d);
    if (!a || (spec.attn_mask_means != MaskMeans::unset && !by_head_bool)) return std::nullopt;
    bld.numeric(*a);
    if (by_head_bool && a->dtype.rfind("float", 0) == 0)
        bld.fail(*a, "a float mask (" + a->dtype +
                         ") is added to the scores as it is; {attn_mask_means} is for a bool or integer mask");
    if (!by_head_bool && (a->dtype == "bool" || a->dtype.rfind("int", 0) == 0 || a->dtype.rfind("uint", 0) == 0))
        bld.fail(*a, "a " + a->dtype +
                         " mask: say which convention it follows, {attn_mask_means} allow (true = may attend, as "
                         "PyTorch's scaled_dot_product_attention) or {attn_mask_means} block (true = blocked, as "
                         "nn.MultiheadAttention)");
    const auto& sh = a->shape;
    const std::size_t Tk = d.source_keys();  // the appended keys get 0, as PyTorch pads
    const std::string tqk = std::to_string(d.Tq) + ", " + std::to_string(Tk);
    std::size_t Bm = 0, Hm = 0;
    const bool last_fit = sh.size() >= 2 && sh[sh.size() - 2] == d.Tq && sh.back() == Tk;
    if (last_fit && sh.size() == 2) Bm = Hm = 1;
    if (last_fit && sh.size() == 4 && (sh[0] == d.B || sh[0] == 1) && (sh[1] == d.H || sh[1] == 1)) {
        Bm = sh[0];
        Hm = sh[1];
    }
    if (last_fit && sh.size() == 3) {
        if (sh[0] == d.B && sh[0] == d.H && d.B > 1)
            bld.fail(*a,
                     "shape " + shape_str(sh) + " is ambiguous: B = H = " + std::to_string(d.B) +
                         ", so its first axis could be the batch or the heads; give it 4-D, (B, 1, Tq, Tk) or (1, H, "
                         "Tq, Tk)");
        if (sh[0] == d.B)
            Bm = d.B, Hm = 1;
        else if (sh[0] == d.H)
            Bm = 1, Hm = d.H;
        else if (merged_batch_heads(sh, d))  // (B·H, Tq, Tk): the same numbers as (B, H, Tq, Tk)
            Bm = d.B, Hm = d.H;
    }
    if (Bm == 0)
        bld.fail(*a, "expected (Tq, Tk) = (" + tqk + "), (B, Tq, Tk), (H, Tq, Tk), (B·H, Tq, Tk) or (B, H, Tq, Tk) " +
                         "with B = " + std::to_string(d.B) + ", H = " + std::to_string(d.H) + ", found " +
                         shape_str(sh));
    Buffer<T> given(a->count());
    copy_numbers<T>(*a, given.data());
    if (by_head_bool) {  // may attend -> 0, hidden -> -inf
        const bool allow = spec.attn_mask_means == MaskMeans::allow;
        for (std::size_t k = 0; k < given.size(); ++k) {
            if (a->dtype == "json" && given[k] != 0 && given[k] != 1)
                bld.fail(*a, "expected true/false or 0/1 (read as a boolean mask: {attn_mask_means} is given), found " +
                                 std::to_string(double(given[k])) + " at element " + std::to_string(k));
            given[k] = (given[k] != 0) == allow ? T(0) : -std::numeric_limits<T>::infinity();
        }
    }
    for (std::size_t k = 0; k < given.size(); ++k)
        if (std::isnan(given[k]) || given[k] == std::numeric_limits<T>::infinity())
            bld.fail(*a, std::string("expected finite numbers or -inf (which hides a key), found ") +
                             (std::isnan(given[k]) ? "nan" : "inf") + " at element " + std::to_string(k));
    (void)nonfinite;
    Tensor<T, 4> m = Tensor<T, 4>::from_shape({Bm, Hm, d.Tq, d.Tk});
    m.fill(T(0));
    for (std::size_t k = 0; k < given.size(); ++k) m.data()[k / Tk * d.Tk + k % Tk] = given[k];
    return m;
}

// 4b. nn.MultiheadAttention's add_bias_kv (bias_k, bias_v) and add_zero_attn: key/value
// positions appended after the projections, counted in Tk from here on.
template <typename T>
void read_extra_keys(const Builder& bld, const Spec& spec, Problem<T>& p, NonFiniteLog& nonfinite) {
    Dims& d = p.dims;
    const Array *bk = bld.find("bias_k"), *bv = bld.find("bias_v");
    if (bk || bv) {
        if (!bk || !bv) bld.fail(bk ? *bk : *bv, "add_bias_kv's bias_k and bias_v come together; the other is missing");
        auto vec = [&](const Array& a, std::size_t n, const char* expect) {
            bld.numeric(a);
            const bool fits =
                a.count() == n && (a.ndim() == 1 || (a.ndim() == 3 && a.shape[0] == 1 && a.shape[1] == 1));
            if (!fits)
                bld.fail(a, "expected (" + std::to_string(n) + ",) or (1, 1, " + std::to_string(n) + ") = " + expect +
                                ", found shape " + shape_str(a.shape));
            return to_tensor<T>(Vec{&a, 0, n}, nonfinite);
        };
        p.bias_k = vec(*bk, d.G * d.Dk, d.G == d.H ? "H*Dk" : "G*Dk");
        p.bias_v = vec(*bv, d.G * d.Dv, d.G == d.H ? "H*Dv" : "G*Dv");
    }
    d.extra_keys = (p.bias_k ? 1 : 0) + (spec.add_zero_attn ? 1 : 0);
    if (d.extra_keys && (spec.rope || spec.alibi))
        throw UsageError(std::string(spec.rope ? "{rope}" : "{alibi}") + ": " +
                         (p.bias_k ? "bias_k/bias_v (add_bias_kv)" : "{add_zero_attn}") +
                         " appends key positions that have no position to rotate or bias; use one or the other");
    if (d.extra_keys && (bld.find("k_positions") || bld.find("q_positions")))
        bld.fail(*bld.find(bld.find("k_positions") ? "k_positions" : "q_positions"),
                 "positions with appended keys (add_bias_kv, add_zero_attn): nn.MultiheadAttention has none");
    d.Tk += d.extra_keys;
}

// 5. The mask rule: padding, causal, window, a boolean attn_mask, and their positions.
template <typename T>
void read_mask(const Builder& bld, const Spec& spec, Problem<T>& p) {
    const Dims& d = p.dims;
    MaskParts parts;
    parts.key_padding = read_key_padding(bld, d, p.batched);
    parts.causal = spec.causal;
    parts.align = spec.causal_align;
    parts.window = spec.window;
    parts.q_positions = read_positions(bld, "q_positions", d, d.Tq, "Tq", p.batched);
    parts.k_positions = read_positions(bld, "k_positions", d, d.Tk, "Tk", p.batched);
    parts.extra_keys = d.extra_keys;
    parts.allow = read_bool_attn_mask(bld, spec, d);
    if ((parts.q_positions || parts.k_positions) && !spec.rope && !spec.alibi && !spec.causal && !spec.window) {
        const Array& a = *bld.find(parts.q_positions ? "q_positions" : "k_positions");
        bld.fail(a, "positions are used by {rope}, {alibi}, {causal} and {window}; none of them is given");
    }
    if (spec.attn_mask_means != MaskMeans::unset && !bld.find("attn_mask"))
        throw UsageError("{attn_mask_means}: the bundle has no attn_mask");
    p.mask = MaskRule(d.B, d.Tq, d.Tk, std::move(parts));
}

// 6. The variants' own arrays: RoPE's width, ALiBi's slopes, a float attn_mask, sinks.
template <typename T>
void read_variants(const Builder& bld, const Spec& spec, Problem<T>& p, NonFiniteLog& nonfinite) {
    const Dims& d = p.dims;
    if (spec.rope) {
        p.rope_dim = spec.rope->dim.value_or(d.Dk);
        if (p.rope_dim > d.Dk)
            throw UsageError("{rope_dim} " + std::to_string(p.rope_dim) + ": more than the " + std::to_string(d.Dk) +
                             " features of a head (Dk)");
        if (p.rope_dim % 2 != 0)
            throw UsageError("{rope}: rotates features in pairs, and Dk = " + std::to_string(d.Dk) +
                             " is odd; give an even {rope_dim}");
        if (!spec.rope->inv_freq.empty() && spec.rope->inv_freq.size() != p.rope_dim / 2)
            throw UsageError("{rope}: " + std::to_string(spec.rope->inv_freq.size()) + " scaled frequencies for " +
                             std::to_string(p.rope_dim) + " rotated features (expected one per pair)");
    }
    const Array* slopes = bld.find("alibi_slopes");
    if (slopes && !spec.alibi) bld.fail(*slopes, "given without {alibi}, which would use them");
    if (spec.alibi) {
        Tensor<T, 1> m = Tensor<T, 1>::from_shape({d.H});
        if (slopes) {
            m = to_tensor<T>(bld.vector(*slopes, d.H, "H"), nonfinite);
            for (std::size_t h = 0; h < d.H; ++h)
                if (!std::isfinite(m(h)))
                    bld.fail(*slopes, "expected finite slopes, found a non-finite one at " + std::to_string(h));
        } else {
            const std::vector<double> v = alibi_slopes(d.H);
            for (std::size_t h = 0; h < d.H; ++h) m(h) = T(v[h]);
        }
        p.alibi_slopes = std::move(m);
    }
    p.attn_bias = read_float_attn_mask<T>(bld, spec, d, nonfinite);
    if (const Array* a = bld.find("sinks")) {
        Tensor<T, 1> s = to_tensor<T>(bld.vector(*a, d.H, "H"), nonfinite);
        for (std::size_t h = 0; h < d.H; ++h)
            if (!std::isfinite(s(h)))
                bld.fail(*a,
                         "expected finite sink logits, one per head, found a non-finite one at " + std::to_string(h));
        p.sinks = std::move(s);
    }
    for (const char* name : {"q_norm", "k_norm"}) {
        const Array* a = bld.find(name);
        if (a && !spec.qk_norm_eps) bld.fail(*a, "given without the q/k norms' eps, which would use it");
        if (!a && spec.qk_norm_eps) throw UsageError(std::string("q/k norms: the bundle has no ") + name);
        if (a) (name[0] == 'q' ? p.q_norm : p.k_norm) = to_tensor<T>(bld.vector(*a, d.Dk, "Dk"), nonfinite);
    }
}

// 7. Scale: 1/sqrt(Dk) unless given.
template <typename T>
void choose_scale(const Spec& spec, Problem<T>& p) {
    const Dims& d = p.dims;
    if (spec.scale) {
        p.scale = static_cast<T>(*spec.scale);
        p.scale_source = !spec.scale_source.empty() ? spec.scale_source
                         : spec.scale_text.empty()  ? "--scale"
                                                    : "--scale " + spec.scale_text;
    } else if (spec.temperature != 1) {
        p.scale = static_cast<T>(1.0 / (std::sqrt(double(d.Dk)) * spec.temperature));
        char t[32];
        std::snprintf(t, sizeof t, "%g", spec.temperature);
        p.scale_source = "1/(sqrt(Dk) * temperature) = 1/(sqrt(" + std::to_string(d.Dk) + ") * " + t + ")";
    } else {
        p.scale = static_cast<T>(1.0 / std::sqrt(double(d.Dk)));
        p.scale_source = "1/sqrt(Dk) = 1/sqrt(" + std::to_string(d.Dk) + ")";
    }
    // The scale as the run's precision holds it: 1e39 is finite in float64, infinite in float32.
    if (!std::isfinite(p.scale) || (p.scale == T(0) && (spec.scale ? *spec.scale != 0 : true))) {
        char v[32];
        std::snprintf(v, sizeof v, "%g", spec.scale ? *spec.scale : 1.0 / (std::sqrt(double(d.Dk)) * spec.temperature));
        throw UsageError(std::string(spec.scale ? "{scale}" : "{temperature}") + ": gives the scale " + v + ", which " +
                         (p.scale == T(0) ? "rounds to 0" : "is infinite") + " in " +
                         (sizeof(T) == 4 ? "float32" : "float64") + "; expected a scale float" +
                         (sizeof(T) == 4 ? "32" : "64") + " can hold");
    }
    if (spec.zero_key && *spec.zero_key >= d.Tk)
        throw UsageError("{zero_key} " + std::to_string(*spec.zero_key) + ": key does not exist (expected 0.." +
                         std::to_string(d.Tk - 1) + ")");
}

// 5.-7., once the sizes are known: the mask rule, the variants, the token labels, the scale.
template <typename T>
void read_rest(const Builder& bld, const Spec& spec, Problem<T>& p, NonFiniteLog& nonfinite) {
    const Dims& d = p.dims;
    read_mask(bld, spec, p);                 // 5. the mask rule
    read_variants(bld, spec, p, nonfinite);  // 6. RoPE, ALiBi, attn_mask, sinks
    p.query_tokens = tokens(bld, "query_tokens", d.B, d.Tq, p.batched, "Tq");
    p.key_tokens = tokens(bld, "key_tokens", d.B, d.source_keys(), p.batched, "Tk");
    if (p.key_tokens.empty() && !p.cross) p.key_tokens = p.query_tokens;
    if (d.extra_keys) p.key_tokens = with_extra_labels(p.key_tokens, p.bias_k.has_value(), spec.add_zero_attn, d);
    choose_scale(spec, p);  // 7. scale
}

}  // namespace

template <typename T>
Problem<T> make_problem(const Bundle& bundle, const Spec& spec) {
    Builder bld(bundle, spec);
    NonFiniteLog nonfinite;
    Problem<T> p;
    p.spec = spec;
    Dims& d = p.dims;
    check_spec(spec);
    bld.check_names();
    read_inputs(bld, bundle, p, nonfinite);                   // 1. x, memory
    Weights w = read_weights(bld, bundle, spec, d, p.cross);  // 2. projections
    split_widths(bld, bundle, spec, w, d);                    // 3. H, Dk, Dv, Dout
    read_biases(bld, d, w);                                   // 4. biases
    copy_weights(bundle, w, p, nonfinite);
    read_extra_keys(bld, spec, p, nonfinite);  // 4b. <bias_kv>, <zero>
    read_rest(bld, spec, p, nonfinite);        // 5.-7. masks, variants, labels, scale
    return p;
}

template Problem<float> make_problem<float>(const Bundle&, const Spec&);
template Problem<double> make_problem<double>(const Bundle&, const Spec&);

template <typename T>
Problem<T> make_problem_qkv(const Bundle& bundle, const GivenQKV& qkv, const Spec& spec) {
    Builder bld(bundle, spec);
    NonFiniteLog nonfinite;
    Problem<T> p;
    p.spec = spec;
    Dims& d = p.dims;
    check_spec(spec);
    bld.check_names();
    std::vector<std::string> unused = {"x", "memory"};
    unused.insert(unused.end(), weight_array_names().begin(), weight_array_names().end());
    for (const std::string& n : unused)
        if (bld.find(n))
            throw UsageError(bundle.source + ": holds " + n +
                             "; with {qkv} the run starts from the given Q, K and V (no x, memory or weights)");
    if (spec.add_zero_attn)
        throw UsageError("{add_zero_attn}: appends a key to projected keys; with {qkv} append it to your k and v");
    p.batched = qkv.batched;
    p.cross = qkv.Tq != qkv.Tk;
    d.B = qkv.B, d.Tq = qkv.Tq, d.Tk = qkv.Tk, d.H = qkv.H, d.G = qkv.G, d.Dk = qkv.Dk, d.Dv = qkv.Dv;
    d.Dm = d.Dkv = 0;
    d.Dout = d.H * d.Dv;
    p.x = Tensor<T, 3>::from_shape({d.B, d.Tq, 0});
    p.W_Q = Tensor<T, 2>::from_shape({0, d.H * d.Dk});
    p.W_K = Tensor<T, 2>::from_shape({0, d.G * d.Dk});
    p.W_V = Tensor<T, 2>::from_shape({0, d.G * d.Dv});
    auto given = [&](const std::vector<double>& v, std::size_t T_, std::size_t width, const std::string& name) {
        Tensor<T, 3> t = Tensor<T, 3>::from_shape({d.B, T_, width});
        std::size_t bad = 0;
        for (std::size_t k = 0; k < v.size(); ++k) {
            t.data()[k] = static_cast<T>(v[k]);
            bad += !std::isfinite(t.data()[k]);
        }
        if (bad)
            p.warnings.push_back(qkv.source + ": " + name + ": " + std::to_string(bad) +
                                 " values are NaN or infinite (in the run's precision)");
        return t;
    };
    p.given_q = given(qkv.q, d.Tq, d.H * d.Dk, qkv.q_name);
    p.given_k = given(qkv.k, d.Tk, d.G * d.Dk, qkv.k_name);
    p.given_v = given(qkv.v, d.Tk, d.G * d.Dv, qkv.v_name);
    p.given_from = qkv.source + ": " + qkv.q_name + " as " + qkv.q_order + ", " + qkv.k_name + " as " + qkv.k_order +
                   ", " + qkv.v_name + " as " + qkv.v_order;
    read_rest(bld, spec, p, nonfinite);  // 5.-7. masks, variants, labels, scale
    return p;
}

template Problem<float> make_problem_qkv<float>(const Bundle&, const GivenQKV&, const Spec&);
template Problem<double> make_problem_qkv<double>(const Bundle&, const GivenQKV&, const Spec&);

}  // namespace attnscope
