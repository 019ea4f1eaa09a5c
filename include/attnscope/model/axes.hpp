// attnscope — model layer: the axis-order grammar of {axes} NAME=ORDER, one for `run --qkv`
// and `check`.
//
// An axis order names the axes of someone's array, outermost first, by letters: b (batch),
// h (head), t (position), d (feature), and q, k for the query and key axes of score-like
// stages. A merged axis is written in parentheses, row-major inside: "bt(hd)" is
// (B, T, H·D), head h in columns [h·D, (h+1)·D). Letters in either case, each at most once;
// nothing else: no nested or empty parentheses, no other character. Which letters an array
// may use is the caller's (`Axes`): q, k and v of `run --qkv` use b, h, t, d (t and d
// required); a stage of `check` its own axes, where q and k mean t in a stage with one
// position axis. A letter an order leaves out has size 1.
//
// An order read against a shape gives every letter's size (`AxisReading`): a size known in
// the run (the head count) must fit, an unknown one (B, T, D of --qkv) is read off the
// shape, at most one unknown per axis. Two readings with the same letters of size > 1 in
// the same order put every cell in the same place: they are one reading.
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace attnscope {

struct AxisOrder {
    std::vector<std::string> groups;  // one per axis of the array, outermost first: {"b", "t", "hd"}
    std::string name() const;         // "bt(hd)"
    std::string letters() const;      // "bthd"
    bool has(char letter) const;
};

// An axis an array may have: its letter and its size in the run (0: unknown, read from the
// array's shape).
struct Axis {
    char letter;
    std::size_t size;
};
using Axes = std::vector<Axis>;

// {axes} NAME=ORDER items, split at the first '=' (NAME as spelled in the file; the later
// of two items for one NAME wins). UsageError "{axes} ITEM: expected NAME=ORDER, e.g.
// EXAMPLE" for an item without '=' or with an empty NAME or ORDER.
std::map<std::string, std::string> parse_axes_option(const std::vector<std::string>& items, std::string_view example);

// ORDER over the letters of `axes`, lower-cased; with `qk_as_t`, q and k read as t. None,
// with the reason in `why`, for a character that is no letter or parenthesis, nested,
// empty or unclosed parentheses ("expected the letters ..."), a letter that is not one of
// `axes` ("no axis x here"), a letter given twice ("the letter t twice").
std::optional<AxisOrder> parse_axis_order(std::string_view order, const Axes& axes, bool qk_as_t, std::string* why);

// One array read in one order.
struct AxisReading {
    AxisOrder order;
    Axes sizes;                      // every letter of the Axes read against, its size known
    std::vector<std::size_t> shape;  // of the array
    std::string signature;           // the letters of size > 1, in the order's order
    std::size_t size(char letter) const;
    std::string name() const { return order.name(); }
};

// The sizes `order` gives an array of `shape`: none when the rank differs, an axis is not
// the product of its letters' known sizes (times one unknown, which must divide it and be
// > 0), two unknown letters share an axis, or a letter left out has a known size other
// than 1.
std::optional<AxisReading> read_axes(const AxisOrder& order, const std::vector<std::size_t>& shape, const Axes& axes);

// The shape `order` means when every size of `axes` is known. None, with `why`, when a
// letter of size > 1 is left out ("the axis h (size 2) is missing").
std::optional<AxisReading> layout_of(const AxisOrder& order, const Axes& axes, std::string* why);

// The distinct readings of `shape` among `orders`, in their order: the candidates.
std::vector<AxisReading> readings_of(const std::vector<AxisOrder>& orders, const std::vector<std::size_t>& shape,
                                     const Axes& axes);

// The orders q, k and v of `run --qkv` are recognised in, by preference: bhtd, bthd, bt(hd),
// htd, (bh)td, t(hd), td.
const std::vector<AxisOrder>& qkv_orders();

// The orders a stage of `check` is recognised in, by preference: its own (`axes`' letters
// in their order), then those of bhtd, bthd, bt(hd), (bh)td, bhqk, (bh)qk, btd with the
// same letters; each also without b and/or h where their size is 1. One per distinct
// (shape, signature); every size of `axes` known.
std::vector<AxisReading> stage_layouts(const Axes& axes);

}  // namespace attnscope
