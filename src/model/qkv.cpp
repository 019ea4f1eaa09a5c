// Someone's own q, k and v: names, axis orders, and the pipeline's (B, T, H·D) layout.
#include "attnscope/model/qkv.hpp"

#include <algorithm>
#include <cctype>
#include <optional>
#include <string>
#include <vector>

#include "attnscope/base/errors.hpp"
#include "attnscope/base/text.hpp"
#include "attnscope/model/aliases.hpp"
#include "attnscope/model/axes.hpp"

namespace attnscope {
namespace {

// Which of q, k, v a name means (0, 1, 2): the stage Q, K or V by its name or an alias
// (model/aliases.hpp), any case; -1 for any other.
int role_of(const std::string& name) {
    for (int role = 0; role < 3; ++role) {
        const std::string_view stage = role == 0 ? "Q" : role == 1 ? "K" : "V";
        if (same_name(name, stage) || aliased_stage(name) == stage) return role;
    }
    return -1;
}

// The axes of q, k or v: b, t, d read from the shape, h the head count.
Axes qkv_axes(std::size_t heads) { return {{'b', 0}, {'h', heads}, {'t', 0}, {'d', 0}}; }

struct Given {
    const Array* a = nullptr;
    std::string name;
    std::vector<AxisReading> readings;
};

// When `heads` fits no order of `shape`: the orders that other head counts would fit, "bhtd
// with {heads} 2, or bthd with {heads} 5, or bt(hd) with {heads} dividing 8"; "" when none
// would. A head axis of its own fits its size; a merged one, (hd), any divisor of its size.
// `field`: {heads} or {kv_heads}.
std::string other_fits(const std::vector<std::size_t>& shape, std::size_t heads, const std::string& field) {
    std::vector<std::size_t> counts = {1};
    for (std::size_t n : shape)
        if (std::find(counts.begin(), counts.end(), n) == counts.end()) counts.push_back(n);
    std::vector<std::string> seen;
    std::string out;
    for (const AxisOrder& order : qkv_orders()) {
        const auto& groups = order.groups;
        const auto merged = std::find_if(groups.begin(), groups.end(), [](const std::string& g) {
            return g.size() > 1 && g.find('h') != std::string::npos;
        });
        for (std::size_t h : counts) {
            if (h == heads || (merged != groups.end() && h != 1)) continue;  // (hd): said once, below
            const auto r = read_axes(order, shape, qkv_axes(h));
            if (!r || std::find(seen.begin(), seen.end(), r->signature) != seen.end()) continue;
            seen.push_back(r->signature);
            const std::size_t size = merged == groups.end() ? 0 : shape[std::size_t(merged - groups.begin())];
            out += (out.empty() ? "" : ", or ") + order.name() + " with " + field +
                   (size > 1 ? " dividing " + std::to_string(size) : " " + std::to_string(h));
        }
    }
    return out;
}

std::string candidates_text(const std::vector<AxisReading>& rs) {
    std::string s;
    for (const auto& r : rs) s += (s.empty() ? "" : " or ") + r.name();
    return s;
}

// q, k and v of `file` by name (their roles 0, 1, 2), and {axes} naming arrays it has.
void find_arrays(const Bundle& file, const std::map<std::string, std::string>& axes, Given (&g)[3]) {
    const std::string src = escape_control(file.source);
    for (const auto& [name, a] : file.arrays) {
        const int role = role_of(name);
        if (role < 0)
            throw InputError(src + ": unknown array '" + escape_control(clip_fragment(name)) +
                             "' ({qkv} holds q, k and v: q/query, k/key, v/value, any case)");
        if (g[role].a)
            throw InputError(src + ": two arrays for " + "qkv"[role] + ": '" + escape_control(g[role].name) +
                             "' and '" + escape_control(name) + "'");
        if (a.is_text()) throw InputError(a.origin + ": expected numbers, found text");
        g[role].a = &a;
        g[role].name = name;
    }
    for (int role = 0; role < 3; ++role)
        if (!g[role].a)
            throw InputError(src + ": no array " + std::string(1, "qkv"[role]) + " ({qkv} needs q, k and v)");
    for (const auto& [name, order] : axes)
        if (!file.arrays.count(name))
            throw UsageError("{axes} " + escape_control(name) + "=" + escape_control(order) + ": " + src +
                             " has no array '" + escape_control(name) + "'");
}

// The one reading {axes} NAME=ORDER gives array x (t and d required: q, k and v have both).
AxisReading reading_given(const Given& x, const std::string& order, std::size_t h, bool is_q) {
    const std::string entry = "{axes} " + escape_control(x.name) + "=" + escape_control(order);
    const auto o = parse_axis_order(order, qkv_axes(h), false, nullptr);
    if (!o || !o->has('t') || !o->has('d'))
        throw UsageError(entry +
                         ": expected the letters b, h, t, d (each once, t and d required) with (..) around "
                         "merged axes, e.g. bthd or bt(hd)");
    auto r = read_axes(*o, x.a->shape, qkv_axes(h));
    if (!r)
        throw UsageError(entry + ": does not fit shape " + shape_str(x.a->shape) + " with " + std::to_string(h) +
                         (is_q ? " heads ({heads})" : " K/V heads ({kv_heads}, default {heads})"));
    return *r;
}

// Every reading of array x that its shape allows with `h` heads; InputError when none does.
std::vector<AxisReading> readings_found(const Given& x, std::size_t h, bool is_q) {
    auto out = readings_of(qkv_orders(), x.a->shape, qkv_axes(h));
    if (!out.empty()) return out;
    const std::string field = is_q ? "{heads}" : "{kv_heads}";
    const std::string fits = other_fits(x.a->shape, h, field);
    throw InputError(x.a->origin + ": shape " + shape_str(x.a->shape) + " fits no axis order with " +
                     std::to_string(h) + (is_q ? " head" : " K/V head") + (h == 1 ? "" : "s") + " (" + field +
                     (is_q ? ")" : ", default {heads})") +
                     (fits.empty() ? "; expected (B, H, T, D), (B, T, H, D), (B, T, H·D), (H, T, D), "
                                     "(B·H, T, D), (T, H·D) or (T, D)"
                                   : "; it fits " + fits));
}

struct Pick {
    const AxisReading *q, *k, *v;
};

// The one combination on which q, k and v agree: one batch, one key length, one query/key
// width. InputError when none does, or several (naming the arrays whose order is open).
Pick agreeing(const std::string& src, const Given (&g)[3]) {
    std::vector<Pick> ok;
    for (const auto& q : g[0].readings)
        for (const auto& k : g[1].readings)
            for (const auto& v : g[2].readings)
                if (q.order.has('b') == k.order.has('b') && k.order.has('b') == v.order.has('b') &&
                    q.size('b') == k.size('b') && k.size('b') == v.size('b') && k.size('t') == v.size('t') &&
                    q.size('d') == k.size('d'))
                    ok.push_back({&q, &k, &v});
    if (ok.empty())
        throw InputError(src + ": q " + shape_str(g[0].a->shape) + ", k " + shape_str(g[1].a->shape) + " and v " +
                         shape_str(g[2].a->shape) +
                         " do not agree in any axis order (q and k share the batch and the head width D; k and v "
                         "the batch and the key length)");
    if (ok.size() == 1) return ok[0];
    std::string open, example;
    for (int role = 0; role < 3; ++role) {
        std::vector<AxisReading> seen;
        for (const auto& p : ok) {
            const AxisReading* r = role == 0 ? p.q : role == 1 ? p.k : p.v;
            if (std::none_of(seen.begin(), seen.end(),
                             [&](const AxisReading& s) { return s.signature == r->signature; }))
                seen.push_back(*r);
        }
        if (seen.size() > 1) {
            open += (open.empty() ? "" : "; ") + escape_control(g[role].name) + " " + shape_str(g[role].a->shape) +
                    " could be " + candidates_text(seen);
            if (example.empty()) example = escape_control(g[role].name) + "=" + seen[0].name();
        }
    }
    throw InputError(src + ": the axis order is ambiguous: " + open +
                     "; say which with {axes} NAME=ORDER, e.g. {axes} " + example);
}

// Array x read as r, laid out as (B, T, h·D): its cells walked in C order, counting b, h, t, d.
std::vector<double> lay_out(const Array& x, const AxisReading& r, std::size_t h) {
    const std::size_t B = r.size('b'), T = r.size('t'), D = r.size('d');
    std::vector<double> to(B * T * h * D, 0.0);
    const std::string letters = r.order.letters();
    std::vector<std::size_t> sizes, idx(letters.size(), 0);
    for (char c : letters) sizes.push_back(c == 'h' ? h : r.size(c));
    const std::size_t n = x.count();
    for (std::size_t k = 0; k < n; ++k) {
        std::size_t b = 0, hh = 0, t = 0, d = 0;
        for (std::size_t a = 0; a < letters.size(); ++a)
            (letters[a] == 'b' ? b : letters[a] == 'h' ? hh : letters[a] == 't' ? t : d) = idx[a];
        to[((b * T + t) * h + hh) * D + d] = x.value(k);
        for (std::size_t a = letters.size(); a-- > 0;) {
            if (++idx[a] < sizes[a]) break;
            idx[a] = 0;
        }
    }
    return to;
}

}  // namespace

GivenQKV read_qkv(const Bundle& file, std::size_t heads, std::size_t kv_heads,
                  const std::map<std::string, std::string>& axes) {
    Given g[3];
    find_arrays(file, axes, g);
    // Each array's readings: the one {axes} gives, or every usual order that fits.
    for (int role = 0; role < 3; ++role) {
        const std::size_t h = role == 0 ? heads : kv_heads;
        const auto it = axes.find(g[role].name);
        g[role].readings = it != axes.end() ? std::vector<AxisReading>{reading_given(g[role], it->second, h, role == 0)}
                                            : readings_found(g[role], h, role == 0);
    }
    const Pick p = agreeing(escape_control(file.source), g);
    GivenQKV out;
    out.source = file.source;
    out.batched = p.q->order.has('b');
    out.B = p.q->size('b');
    out.H = heads, out.G = kv_heads;
    out.Tq = p.q->size('t'), out.Tk = p.k->size('t'), out.Dk = p.q->size('d'), out.Dv = p.v->size('d');
    out.q_name = g[0].name, out.k_name = g[1].name, out.v_name = g[2].name;
    out.q_order = p.q->name(), out.k_order = p.k->name(), out.v_order = p.v->name();
    out.dtype = g[0].a->dtype;
    out.q = lay_out(*g[0].a, *p.q, heads);
    out.k = lay_out(*g[1].a, *p.k, kv_heads);
    out.v = lay_out(*g[2].a, *p.v, kv_heads);
    return out;
}

}  // namespace attnscope
