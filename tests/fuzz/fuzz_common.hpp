// Shared pieces of the libFuzzer targets (tests/fuzz/fuzz_*.cpp).
//
// Every target feeds untrusted bytes to a reader and accepts exactly one kind of
// outcome besides success: an expected rejection, i.e. attnscope::InputError (which
// includes MemoryLimitError) or attnscope::UsageError. Any other exception escapes
// LLVMFuzzerTestOneInput and aborts the process, so libFuzzer reports it as a crash;
// so do sanitizer reports, leaks, timeouts and the __builtin_trap of an oracle.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string_view>

#include "attnscope/base/errors.hpp"
#include "attnscope/io/read.hpp"
#include "attnscope/io/write.hpp"

namespace attnscope::fuzz {

// The memory limit handed to the readers: valid files that claim more are refused with
// MemoryLimitError instead of being allocated (libFuzzer's -rss_limit_mb is 2048).
inline constexpr std::size_t kMaxBytes = std::size_t{64} << 20;

inline std::string_view as_bytes(const std::uint8_t* data, std::size_t size) {
    return {reinterpret_cast<const char*>(data), size};
}

// Runs `f` and swallows the expected rejections; everything else propagates.
template <typename F>
bool accepts(F&& f) {
    try {
        f();
        return true;
    } catch (const InputError&) {  // also MemoryLimitError
    } catch (const UsageError&) {
    }
    return false;
}

// An oracle violation: says which check failed, then stops with a recognisable crash.
// (Not a bare __builtin_trap: the optimiser merges those, and the stack loses the line.)
[[noreturn]] __attribute__((noinline)) inline void oracle_failed(const char* check, const char* file, int line) {
    std::fprintf(stderr, "attnscope fuzz oracle failed: %s at %s:%d\n", check, file, line);
    __builtin_trap();
}

#define ATTNSCOPE_FUZZ_CHECK(cond)                                                \
    do {                                                                          \
        if (!(cond)) ::attnscope::fuzz::oracle_failed(#cond, __FILE__, __LINE__); \
    } while (0)

// Well-formed UTF-8 (RFC 3629): no stray continuation bytes, no overlong forms, no
// UTF-16 surrogates, nothing above U+10FFFF. Token labels are printed, and written
// into --json output, as they are.
inline bool valid_utf8(std::string_view s) {
    for (std::size_t i = 0; i < s.size();) {
        const auto c = static_cast<unsigned char>(s[i]);
        std::size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
        if (n == 0 || i + n > s.size()) return false;
        std::uint32_t cp = n == 1 ? c : c & (0xFFu >> (n + 1));
        for (std::size_t k = 1; k < n; ++k) {
            const auto d = static_cast<unsigned char>(s[i + k]);
            if ((d & 0xC0) != 0x80) return false;
            cp = cp << 6 | (d & 0x3Fu);
        }
        static constexpr std::uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
        i += n;
    }
    return true;
}

// Invariants every accepted Array must satisfy, whatever the format it came from:
// exactly shape-product values (or strings), and text in valid UTF-8.
inline void check_array(const Array& a) {
    std::size_t n = 1;
    for (std::size_t d : a.shape) ATTNSCOPE_FUZZ_CHECK(!__builtin_mul_overflow(n, d, &n));
    if (a.is_text()) {
        ATTNSCOPE_FUZZ_CHECK(a.strings.size() == n && a.count() == 0);
        for (const std::string& s : a.strings) ATTNSCOPE_FUZZ_CHECK(valid_utf8(s));
    } else {
        ATTNSCOPE_FUZZ_CHECK(a.count() == n && a.strings.empty());
        // Numbers kept as stored are whole elements of their dtype.
        if (a.held != Array::Held::doubles)
            ATTNSCOPE_FUZZ_CHECK(a.values.empty() && a.stored.size() == n * Array::item_size(a.held));
    }
}

}  // namespace attnscope::fuzz
