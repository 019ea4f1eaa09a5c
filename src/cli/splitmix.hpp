// The numbers of `attnscope make` and of `run --sweep dk=...` (docs/classroom.md, "The
// numbers"): splitmix64 (Steele, Lea and Flood 2014; Vigna's reference code), one 64-bit
// state, each number z = mix(state += 0x9e3779b97f4a7c15); uniform() = (z >> 11) · 2^-53.
#pragma once

#include <cstdint>

namespace attnscope::cli {

struct SplitMix64 {
    std::uint64_t state;
    std::uint64_t next() {
        std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        return z ^ (z >> 31);
    }
    double symmetric() { return 2 * (double(next() >> 11) * 0x1.0p-53) - 1; }  // [-1, 1)
};

}  // namespace attnscope::cli
