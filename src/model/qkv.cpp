// Someone's own q, k and v: names, axis orders, and the pipeline's (B, T, H·D) layout.
#include "attnscope/model/qkv.hpp"

#include <algorithm>
#include <cctype>
#include <optional>
#include <string>
#include <vector>

#include "attnscope/base/errors.hpp"
#include "attnscope/base/text.hpp"

namespace attnscope {
namespace {

std::string lower(const std::string& s) {
    std::string out = s;
    for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
    return out;
}

// Which of q, k, v a name means (0, 1, 2), or -1.
int role_of(const std::string& name) {
    const std::string n = lower(name);
    if (n == "q" || n == "query" || n == "queries") return 0;
    if (n == "k" || n == "key" || n == "keys") return 1;
    if (n == "v" || n == "value" || n == "values") return 2;
    return -1;
}

// An order: each axis of the array is a group of the letters b, h, t, d.
using Groups = std::vector<std::string>;

std::string order_name(const Groups& g) {
    std::string out;
    for (const auto& grp : g) out += grp.size() == 1 ? grp : "(" + grp + ")";
    return out;
}

std::optional<Groups> parse_order(const std::string& order) {
    Groups g;
    bool open = false;
    std::string seen;
    for (char raw : order) {
        const char c = char(std::tolower(static_cast<unsigned char>(raw)));
        if (c == '(' && !open) {
            open = true, g.emplace_back();
        } else if (c == ')' && open && !g.back().empty()) {
            open = false;
        } else if (c == 'b' || c == 'h' || c == 't' || c == 'd') {
            if (seen.find(c) != std::string::npos) return std::nullopt;
            seen += c;
            if (open)
                g.back() += c;
            else
                g.emplace_back(1, c);
        } else {
            return std::nullopt;
        }
    }
    if (open || g.empty() || seen.find('t') == std::string::npos || seen.find('d') == std::string::npos)
        return std::nullopt;
    return g;
}

// One array read in one order: the sizes of b, h, t, d it implies.
struct Reading {
    Groups groups;
    std::size_t b = 1, h = 1, t = 0, d = 0;
    bool has_b = false;
    std::string signature;  // the letters of size > 1 in the array's order, and the shape: equal = same cells
};

// The sizes `groups` gives `shape`, with h fixed to `heads`; none when they do not fit.
std::optional<Reading> read_as(const Groups& groups, const std::vector<std::size_t>& shape, std::size_t heads) {
    if (groups.size() != shape.size()) return std::nullopt;
    Reading r;
    r.groups = groups;
    std::string letters;
    for (const auto& grp : groups) letters += grp;
    r.has_b = letters.find('b') != std::string::npos;
    if (letters.find('h') == std::string::npos && heads != 1) return std::nullopt;
    r.h = heads;
    std::size_t* size_of[128] = {};
    size_of['b'] = &r.b, size_of['h'] = &r.h, size_of['t'] = &r.t, size_of['d'] = &r.d;
    for (std::size_t a = 0; a < groups.size(); ++a) {
        std::size_t known = 1;
        char unknown = 0;
        for (char c : groups[a]) {
            if (c == 'h') {
                known *= heads;
            } else if (unknown) {
                return std::nullopt;  // two unknown sizes in one axis: cannot tell them apart
            } else {
                unknown = c;
            }
        }
        if (!unknown) {
            if (shape[a] != known) return std::nullopt;
            continue;
        }
        if (known == 0 || shape[a] % known != 0 || shape[a] == 0) return std::nullopt;
        *size_of[static_cast<unsigned char>(unknown)] = shape[a] / known;
    }
    for (const auto& grp : groups)
        for (char c : grp)
            if (*size_of[static_cast<unsigned char>(c)] > 1) r.signature += c;
    r.signature += shape_str(shape);
    return r;
}

const char* const kTemplates[] = {"bhtd", "bthd", "bt(hd)", "htd", "(bh)td", "t(hd)", "td"};

struct Given {
    const Array* a = nullptr;
    std::string name;
    std::vector<Reading> readings;
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
    for (const char* t : kTemplates) {
        const Groups groups = *parse_order(t);
        const auto merged = std::find_if(groups.begin(), groups.end(), [](const std::string& g) {
            return g.size() > 1 && g.find('h') != std::string::npos;
        });
        for (std::size_t h : counts) {
            if (h == heads || (merged != groups.end() && h != 1)) continue;  // (hd): said once, below
            const auto r = read_as(groups, shape, h);
            if (!r || std::find(seen.begin(), seen.end(), r->signature) != seen.end()) continue;
            seen.push_back(r->signature);
            const std::size_t size = merged == groups.end() ? 0 : shape[std::size_t(merged - groups.begin())];
            out += (out.empty() ? "" : ", or ") + std::string(t) + " with " + field +
                   (size > 1 ? " dividing " + std::to_string(size) : " " + std::to_string(h));
        }
    }
    return out;
}

std::string candidates_text(const std::vector<Reading>& rs) {
    std::string s;
    for (const auto& r : rs) s += (s.empty() ? "" : " or ") + order_name(r.groups);
    return s;
}

}  // namespace

GivenQKV read_qkv(const Bundle& file, std::size_t heads, std::size_t kv_heads,
                  const std::map<std::string, std::string>& axes) {
    const std::string src = escape_control(file.source);
    Given g[3];
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

    // Each array's readings: the one {axes} gives, or every template that fits.
    for (int role = 0; role < 3; ++role) {
        Given& x = g[role];
        const std::size_t h = role == 0 ? heads : kv_heads;
        const auto it = axes.find(x.name);
        if (it != axes.end()) {
            const auto groups = parse_order(it->second);
            if (!groups)
                throw UsageError("{axes} " + escape_control(x.name) + "=" + escape_control(it->second) +
                                 ": expected the letters b, h, t, d (each once, t and d required) with (..) around "
                                 "merged axes, e.g. bthd or bt(hd)");
            auto r = read_as(*groups, x.a->shape, h);
            if (!r)
                throw UsageError("{axes} " + escape_control(x.name) + "=" + escape_control(it->second) +
                                 ": does not fit shape " + shape_str(x.a->shape) + " with " + std::to_string(h) +
                                 (role == 0 ? " heads ({heads})" : " K/V heads ({kv_heads}, default {heads})"));
            x.readings.push_back(*r);
            continue;
        }
        for (const char* t : kTemplates) {
            auto r = read_as(*parse_order(t), x.a->shape, h);
            if (!r) continue;
            const bool dup = std::any_of(x.readings.begin(), x.readings.end(),
                                         [&](const Reading& o) { return o.signature == r->signature; });
            if (!dup) x.readings.push_back(*r);
        }
        if (x.readings.empty()) {
            const std::string field = role == 0 ? "{heads}" : "{kv_heads}";
            const std::string fits = other_fits(x.a->shape, h, field);
            throw InputError(x.a->origin + ": shape " + shape_str(x.a->shape) + " fits no axis order with " +
                             std::to_string(h) + (role == 0 ? " head" : " K/V head") + (h == 1 ? "" : "s") + " (" +
                             field + (role == 0 ? ")" : ", default {heads})") +
                             (fits.empty() ? "; expected (B, H, T, D), (B, T, H, D), (B, T, H·D), (H, T, D), "
                                             "(B·H, T, D), (T, H·D) or (T, D)"
                                           : "; it fits " + fits));
        }
    }

    // The combinations on which q, k and v agree: one batch, one key length, one query/key width.
    struct Pick {
        const Reading *q, *k, *v;
    };
    std::vector<Pick> ok;
    for (const auto& q : g[0].readings)
        for (const auto& k : g[1].readings)
            for (const auto& v : g[2].readings)
                if (q.has_b == k.has_b && k.has_b == v.has_b && q.b == k.b && k.b == v.b && k.t == v.t && q.d == k.d)
                    ok.push_back({&q, &k, &v});
    if (ok.empty())
        throw InputError(src + ": q " + shape_str(g[0].a->shape) + ", k " + shape_str(g[1].a->shape) + " and v " +
                         shape_str(g[2].a->shape) +
                         " do not agree in any axis order (q and k share the batch and the head width D; k and v "
                         "the batch and the key length)");
    if (ok.size() > 1) {
        // Name the arrays whose order is open.
        std::string open, example;
        for (int role = 0; role < 3; ++role) {
            std::vector<Reading> seen;
            for (const auto& p : ok) {
                const Reading* r = role == 0 ? p.q : role == 1 ? p.k : p.v;
                if (std::none_of(seen.begin(), seen.end(),
                                 [&](const Reading& s) { return s.signature == r->signature; }))
                    seen.push_back(*r);
            }
            if (seen.size() > 1) {
                open += (open.empty() ? "" : "; ") + escape_control(g[role].name) + " " + shape_str(g[role].a->shape) +
                        " could be " + candidates_text(seen);
                if (example.empty()) example = escape_control(g[role].name) + "=" + order_name(seen[0].groups);
            }
        }
        throw InputError(src + ": the axis order is ambiguous: " + open +
                         "; say which with {axes} NAME=ORDER, e.g. {axes} " + example);
    }

    const Pick& p = ok[0];
    GivenQKV out;
    out.source = file.source;
    out.batched = p.q->has_b;
    out.B = p.q->b;
    out.H = heads, out.G = kv_heads;
    out.Tq = p.q->t, out.Tk = p.k->t, out.Dk = p.q->d, out.Dv = p.v->d;
    out.q_name = g[0].name, out.k_name = g[1].name, out.v_name = g[2].name;
    out.q_order = order_name(p.q->groups), out.k_order = order_name(p.k->groups), out.v_order = order_name(p.v->groups);
    out.dtype = g[0].a->dtype;
    // Lay each out as (B, T, heads·D): walk its cells in C order, counting b, h, t, d.
    auto lay_out = [&](const Given& x, const Reading& r, std::size_t h, std::vector<double>& to) {
        to.assign(r.b * r.t * h * r.d, 0.0);
        std::vector<char> letters;
        std::vector<std::size_t> sizes;
        for (const auto& grp : r.groups)
            for (char c : grp) {
                letters.push_back(c);
                sizes.push_back(c == 'b' ? r.b : c == 'h' ? h : c == 't' ? r.t : r.d);
            }
        std::vector<std::size_t> idx(letters.size(), 0);
        const std::size_t n = x.a->count();
        for (std::size_t k = 0; k < n; ++k) {
            std::size_t b = 0, hh = 0, t = 0, d = 0;
            for (std::size_t a = 0; a < letters.size(); ++a)
                (letters[a] == 'b' ? b : letters[a] == 'h' ? hh : letters[a] == 't' ? t : d) = idx[a];
            to[((b * r.t + t) * h + hh) * r.d + d] = x.a->value(k);
            for (std::size_t a = letters.size(); a-- > 0;) {
                if (++idx[a] < sizes[a]) break;
                idx[a] = 0;
            }
        }
    };
    lay_out(g[0], *p.q, heads, out.q);
    lay_out(g[1], *p.k, kv_heads, out.k);
    lay_out(g[2], *p.v, kv_heads, out.v);
    return out;
}

}  // namespace attnscope
