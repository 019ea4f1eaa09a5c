// The axis-order grammar of {axes} NAME=ORDER (see axes.hpp).
#include "attnscope/model/axes.hpp"

#include <algorithm>
#include <cctype>

#include "attnscope/base/errors.hpp"
#include "attnscope/base/text.hpp"

namespace attnscope {
namespace {

const Axis* find_axis(const Axes& axes, char letter) {
    for (const Axis& a : axes)
        if (a.letter == letter) return &a;
    return nullptr;
}

// The syntax alone: letters (lower-cased) and "(" letters ")"; none when anything else.
std::optional<AxisOrder> parse_groups(std::string_view order, bool qk_as_t) {
    AxisOrder o;
    bool open = false;
    for (char raw : order) {
        char c = char(std::tolower(static_cast<unsigned char>(raw)));
        if (c == '(' && !open) {
            open = true, o.groups.emplace_back();
        } else if (c == ')' && open && !o.groups.back().empty()) {
            open = false;
        } else if (std::isalpha(static_cast<unsigned char>(c))) {
            if (qk_as_t && (c == 'q' || c == 'k')) c = 't';
            if (open)
                o.groups.back() += c;
            else
                o.groups.emplace_back(1, c);
        } else {
            return std::nullopt;
        }
    }
    if (open || o.groups.empty()) return std::nullopt;
    return o;
}

void set_why(std::string* why, std::string text) {
    if (why) *why = std::move(text);
}

}  // namespace

std::string AxisOrder::name() const {
    std::string out;
    for (const auto& g : groups) out += g.size() == 1 ? g : "(" + g + ")";
    return out;
}

std::string AxisOrder::letters() const {
    std::string out;
    for (const auto& g : groups) out += g;
    return out;
}

bool AxisOrder::has(char letter) const { return letters().find(letter) != std::string::npos; }

std::size_t AxisReading::size(char letter) const {
    const Axis* a = find_axis(sizes, letter);
    return a ? a->size : 1;
}

std::map<std::string, std::string> parse_axes_option(const std::vector<std::string>& items, std::string_view example) {
    std::map<std::string, std::string> out;
    for (const auto& item : items) {
        const auto eq = item.find('=');
        if (eq == std::string::npos || eq == 0 || eq + 1 == item.size())
            throw UsageError("{axes} " + escape_control(item) + ": expected NAME=ORDER, e.g. " + std::string(example));
        out[item.substr(0, eq)] = item.substr(eq + 1);
    }
    return out;
}

std::optional<AxisOrder> parse_axis_order(std::string_view order, const Axes& axes, bool qk_as_t, std::string* why) {
    auto o = parse_groups(order, qk_as_t);
    if (!o) {
        set_why(why, "expected the letters b, h, t, d (q, k for scores) with (..) around merged axes");
        return std::nullopt;
    }
    std::string seen;
    for (char c : o->letters()) {
        if (!find_axis(axes, c)) return set_why(why, std::string("no axis ") + c + " here"), std::nullopt;
        if (seen.find(c) != std::string::npos)
            return set_why(why, std::string("the letter ") + c + " twice"), std::nullopt;
        seen += c;
    }
    return o;
}

std::optional<AxisReading> read_axes(const AxisOrder& order, const std::vector<std::size_t>& shape, const Axes& axes) {
    if (order.groups.size() != shape.size()) return std::nullopt;
    AxisReading r;
    r.order = order, r.shape = shape, r.sizes = axes;
    for (Axis& a : r.sizes)
        if (!order.has(a.letter)) {
            if (a.size != 0 && a.size != 1) return std::nullopt;  // left out: size 1
            a.size = 1;
        }
    for (std::size_t i = 0; i < shape.size(); ++i) {
        std::size_t known = 1;
        Axis* unknown = nullptr;
        for (char c : order.groups[i]) {
            Axis* a = &*std::find_if(r.sizes.begin(), r.sizes.end(), [c](const Axis& x) { return x.letter == c; });
            if (a->size != 0)
                known *= a->size;
            else if (unknown)
                return std::nullopt;  // two unknown sizes in one axis: cannot tell them apart
            else
                unknown = a;
        }
        if (!unknown) {
            if (shape[i] != known) return std::nullopt;
            continue;
        }
        if (known == 0 || shape[i] % known != 0 || shape[i] == 0) return std::nullopt;
        unknown->size = shape[i] / known;
    }
    for (char c : order.letters())
        if (r.size(c) > 1) r.signature += c;
    return r;
}

std::optional<AxisReading> layout_of(const AxisOrder& order, const Axes& axes, std::string* why) {
    for (const Axis& a : axes)
        if (a.size != 1 && !order.has(a.letter)) {
            set_why(why, std::string("the axis ") + a.letter + " (size " + std::to_string(a.size) + ") is missing");
            return std::nullopt;
        }
    AxisReading r;
    r.order = order, r.sizes = axes;
    for (const auto& g : order.groups) {
        std::size_t n = 1;
        for (char c : g) {
            n *= find_axis(axes, c)->size;
            if (find_axis(axes, c)->size > 1) r.signature += c;
        }
        r.shape.push_back(n);
    }
    return r;
}

std::vector<AxisReading> readings_of(const std::vector<AxisOrder>& orders, const std::vector<std::size_t>& shape,
                                     const Axes& axes) {
    std::vector<AxisReading> out;
    for (const AxisOrder& o : orders) {
        auto r = read_axes(o, shape, axes);
        if (!r) continue;
        const bool dup = std::any_of(out.begin(), out.end(), [&](const AxisReading& x) {
            return x.signature == r->signature;  // the same shape: the same cells
        });
        if (!dup) out.push_back(std::move(*r));
    }
    return out;
}

const std::vector<AxisOrder>& qkv_orders() {
    static const std::vector<AxisOrder> kOrders = [] {
        const Axes bhtd = {{'b', 0}, {'h', 0}, {'t', 0}, {'d', 0}};
        std::vector<AxisOrder> out;
        for (const char* t : {"bhtd", "bthd", "bt(hd)", "htd", "(bh)td", "t(hd)", "td"})
            out.push_back(*parse_axis_order(t, bhtd, false, nullptr));
        return out;
    }();
    return kOrders;
}

namespace {

// `base` without b (drop & 1) and/or h (drop & 2), empty parentheses removed; "" when a
// dropped letter is not in `base` or its size is not 1.
std::string dropped(const std::string& base, unsigned drop, const Axes& axes) {
    for (unsigned bit = 0; bit < 2; ++bit) {
        const char c = bit ? 'h' : 'b';
        const Axis* a = find_axis(axes, c);
        if (((drop >> bit) & 1) && !(a && a->size == 1 && base.find(c) != std::string::npos)) return "";
    }
    std::string t;
    for (char c : base)
        if (!((c == 'b' && (drop & 1)) || (c == 'h' && (drop & 2)))) t += c;
    for (std::size_t p; (p = t.find("()")) != std::string::npos;) t.erase(p, 2);
    return t;
}

// `axes`' own order, then the templates with the same letters.
std::vector<std::string> stage_bases(const Axes& axes) {
    static const char* const kTemplates[] = {"bhtd", "bthd", "bt(hd)", "(bh)td", "bhqk", "(bh)qk", "btd"};
    std::string ours;
    for (const Axis& a : axes) ours += a.letter;
    std::vector<std::string> bases = {ours};
    std::string sorted_ours = ours;
    std::sort(sorted_ours.begin(), sorted_ours.end());
    for (const char* t : kTemplates) {
        std::string letters;
        for (const char* c = t; *c; ++c)
            if (std::isalpha(static_cast<unsigned char>(*c))) letters += *c;
        std::sort(letters.begin(), letters.end());
        if (letters == sorted_ours) bases.emplace_back(t);
    }
    return bases;
}

}  // namespace

std::vector<AxisReading> stage_layouts(const Axes& axes) {
    const bool one_position = find_axis(axes, 't') != nullptr;
    std::vector<AxisReading> out;
    for (const auto& base : stage_bases(axes))
        for (unsigned drop = 0; drop < 4; ++drop) {
            const std::string t = dropped(base, drop, axes);
            const auto o = t.empty() ? std::nullopt : parse_axis_order(t, axes, one_position, nullptr);
            const auto l = o ? layout_of(*o, axes, nullptr) : std::nullopt;
            if (!l) continue;
            const bool dup = std::any_of(out.begin(), out.end(), [&](const AxisReading& x) {
                return x.shape == l->shape && x.signature == l->signature;
            });
            if (!dup) out.push_back(*l);
        }
    return out;
}

}  // namespace attnscope
