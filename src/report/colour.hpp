// The palettes every heatmap uses (terminal, HTML, SVG), and their interpolation.
// Internal to the library.
//
// One viridis table (sequential: scores, masked_scores, weights) and one blue-red table
// (diverging, white at 0: Q, K, V, context, output). A colour at t in 0..1 lies on the
// straight line between the two stops around it.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

namespace attnscope::colour {

// Sequential: viridis (matplotlib), 16 stops from low to high.
constexpr std::array<std::uint32_t, 16> kViridis = {0x440154, 0x481a6c, 0x472f7d, 0x414487, 0x39568c, 0x31688e,
                                                    0x2a788e, 0x23888e, 0x1f988b, 0x22a884, 0x35b779, 0x54c568,
                                                    0x7ad151, 0xa5db36, 0xd2e21b, 0xfde725};
// Diverging: ColorBrewer RdBu, 11 stops from negative (blue) through 0 (white) to positive (red).
constexpr std::array<std::uint32_t, 11> kBlueRed = {0x053061, 0x2166ac, 0x4393c3, 0x92c5de, 0xd1e5f0, 0xf7f7f7,
                                                    0xfddbc7, 0xf4a582, 0xd6604d, 0xb2182b, 0x67001f};

enum class Palette { viridis, blue_red };

struct Rgb {
    double r, g, b;  // 0..255
};

template <std::size_t N>
Rgb interpolate(const std::array<std::uint32_t, N>& stops, double t) {
    const double x = std::clamp(t, 0.0, 1.0) * double(N - 1);
    const std::size_t k = std::min(static_cast<std::size_t>(x), N - 2);
    const double f = x - double(k);
    const auto channel = [&](unsigned shift) {
        const double a = double((stops[k] >> shift) & 0xFF), b = double((stops[k + 1] >> shift) & 0xFF);
        return a + (b - a) * f;
    };
    return {channel(16), channel(8), channel(0)};
}

// The colour at t in 0..1 of palette p.
inline Rgb at(Palette p, double t) {
    return p == Palette::viridis ? interpolate(kViridis, t) : interpolate(kBlueRed, t);
}

inline std::size_t stop_count(Palette p) { return p == Palette::viridis ? kViridis.size() : kBlueRed.size(); }

// A channel rounded to a byte, 0..255.
inline int byte(double u) { return static_cast<int>(std::lround(std::clamp(u, 0.0, 255.0))); }

// "#rrggbb"
inline std::string hex(Rgb c) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "#%02x%02x%02x", unsigned(byte(c.r)), unsigned(byte(c.g)), unsigned(byte(c.b)));
    return buf;
}

// True when white text reads better than black on `c` (WCAG relative luminance).
inline bool dark(Rgb c) {
    const auto lin = [](double u) {
        u /= 255;
        return u <= 0.04045 ? u / 12.92 : std::pow((u + 0.055) / 1.055, 2.4);
    };
    return 0.2126 * lin(c.r) + 0.7152 * lin(c.g) + 0.0722 * lin(c.b) < 0.179;
}

}  // namespace attnscope::colour
