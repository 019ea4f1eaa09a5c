// Counts and indices on the command line, checked the same way in every subcommand.
//
// CLI11 reads "-1" into an unsigned option as 2^64 - 1 (strtoull), so `--window -1`
// would be a window of 18446744073709551615 keys. These checks see the text before that
// conversion: digits only, within a range, said as "--window: expected a number from 1 to
// 1000000000000, found '-1'".
#pragma once

#include <CLI/CLI.hpp>
#include <cstddef>
#include <optional>
#include <string>

namespace attnscope::cli {

// The bound of every count of positions or layers (--window, --local, --sink-keys,
// --prefill, --layer): more than any run can hold (10^12 keys of one float32 feature are
// 4 TB), and far from the 2^63 at which a count turns negative as a signed position.
inline constexpr std::size_t kMaxPositions = 1'000'000'000'000;
// The bound of head counts and head widths (--heads, --kv-heads, --rope-dim).
inline constexpr std::size_t kMaxHeads = std::size_t{1} << 20;
// The bound of --threads.
inline constexpr std::size_t kMaxThreads = 4096;

// `s` as a number when it is digits only and at most `hi`; otherwise nothing.
inline std::optional<std::size_t> digits_value(const std::string& s, std::size_t hi) {
    if (s.empty() || s.size() > 20) return std::nullopt;
    std::size_t v = 0;
    for (char c : s) {
        if (c < '0' || c > '9') return std::nullopt;
        const std::size_t d = std::size_t(c - '0');
        if (v > (hi - d) / 10) return std::nullopt;  // v * 10 + d > hi
        v = v * 10 + d;
    }
    return v;
}

// A count from `lo` to `hi` ("expected a number from lo to hi, found '-1'").
inline CLI::Validator count_in(std::size_t lo, std::size_t hi) {
    return CLI::Validator(
        [lo, hi](std::string& s) -> std::string {
            const auto v = digits_value(s, hi);
            if (v && *v >= lo) return {};
            return "expected a number from " + std::to_string(lo) + " to " + std::to_string(hi) + ", found '" + s + "'";
        },
        "COUNT");
}

// An index counted from 0 (a position, head or batch item), checked against the sizes
// once they are known; here only that it is one.
inline CLI::Validator index_check() {
    return CLI::Validator(
        [](std::string& s) -> std::string {
            if (digits_value(s, kMaxPositions)) return {};
            if (digits_value(s, ~std::size_t{0}))
                return "expected an index up to " + std::to_string(kMaxPositions) + ", found '" + s + "'";
            return "expected an index counted from 0, found '" + s + "'";
        },
        "INDEX");
}

}  // namespace attnscope::cli
