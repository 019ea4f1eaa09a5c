// The mask rule (see mask.hpp).
#include "attnscope/model/mask.hpp"

#include <utility>

namespace attnscope {

MaskRule::MaskRule(std::size_t B, std::size_t Tq, std::size_t Tk, std::optional<xt::xtensor<bool, 2>> key_padding,
                   bool causal, CausalAlign align)
    : B_(B), Tq_(Tq), Tk_(Tk), padding_(std::move(key_padding)), causal_(causal), align_(align) {}

long long MaskRule::query_position(std::size_t i) const {
    const long long shift = align_ == CausalAlign::top_left ? 0 : (long long)Tk_ - (long long)Tq_;
    return (long long)i + shift;
}

bool MaskRule::visible(std::size_t b, std::size_t i, std::size_t j) const {
    return !padded(b, j) && (!causal_ || (long long)j <= query_position(i));
}

bool MaskRule::row(std::size_t b, std::size_t i, bool* out) const {
    const long long last = causal_ ? query_position(i) : (long long)Tk_;
    bool any = false;
    for (std::size_t j = 0; j < Tk_; ++j) {
        out[j] = !padded(b, j) && (long long)j <= last;
        any |= out[j];
    }
    return any;
}

std::string MaskRule::causal_rule() const { return align_ == CausalAlign::top_left ? "j <= i" : "j <= i + Tk - Tq"; }

}  // namespace attnscope
