// attnscope — model layer: someone's own Q, K and V as the start of a run (`run --qkv`).
//
// Users of fused kernels (scaled_dot_product_attention, FlashAttention) have q, k and v
// but never the weights. read_qkv() finds them in a bundle (named q/query, k/key, v/value,
// any case), recognises each one's axis order from its shape and the head counts —
// (B, H, T, D), (B, T, H, D), (B, T, H·D), (H, T, D), (B·H, T, D), (T, H·D), (T, D) —
// or takes it from {axes} (the grammar of axes.hpp), and lays them out as the pipeline's projections are laid out:
// (B, T, H·D), head h in columns [h·D, (h+1)·D). make_problem_qkv() then builds a problem
// whose Q, K and V are these (no x, no weights): every later stage, mask, bias and view
// works as usual. An order the shapes leave open is refused, naming the candidates.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "attnscope/io/array.hpp"
#include "attnscope/model/axes.hpp"
#include "attnscope/model/model.hpp"

namespace attnscope {

struct GivenQKV {
    std::string source;  // the file, for reports
    std::size_t B = 1, Tq = 0, Tk = 0, Dk = 0, Dv = 0, H = 0, G = 0;
    bool batched = true;                    // false: no batch axis in q (results drop it too)
    std::string q_name, k_name, v_name;     // as spelled in the file
    std::string q_order, k_order, v_order;  // as recognised: "bhtd", "bt(hd)", …
    std::vector<double> q, k, v;            // (B, Tq, H·Dk), (B, Tk, G·Dk), (B, Tk, G·Dv)
    std::string dtype;                      // q's, as read ("float32", …)
};

// `axes`: NAME=ORDER as given with {axes} (NAME as spelled in the file). InputError for a
// missing or unknown array, a shape that fits no order or several, sizes that disagree
// between q, k and v; UsageError for an {axes} entry that names no array or does not fit.
GivenQKV read_qkv(const Bundle& file, std::size_t heads, std::size_t kv_heads,
                  const std::map<std::string, std::string>& axes);

// The problem of `qkv` with the rest of `bundle` (masks, positions, attn_mask, sinks,
// token labels; no x, memory or weights: refused, naming them).
template <typename T>
Problem<T> make_problem_qkv(const Bundle& bundle, const GivenQKV& qkv, const Spec& spec);
extern template Problem<float> make_problem_qkv<float>(const Bundle&, const GivenQKV&, const Spec&);
extern template Problem<double> make_problem_qkv<double>(const Bundle&, const GivenQKV&, const Spec&);

}  // namespace attnscope
