// attnscope — io layer, private: small helpers the readers and writers share (byte
// order, file names, memory-limit messages, UTF-8). Not installed; src/io/ only.
#pragma once

#include <sys/stat.h>

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

#include "attnscope/base/text.hpp"
#include "attnscope/io/array.hpp"

namespace attnscope::io_detail {

// The n-byte (n <= 8) little-endian unsigned integer at b[at, at + n); the caller has
// checked that those bytes exist.
inline std::uint64_t load_le(std::string_view b, std::size_t at, int n) {
    std::uint64_t v = 0;
    for (int k = n - 1; k >= 0; --k) v = v << 8 | static_cast<unsigned char>(b[at + std::size_t(k)]);
    return v;
}

// Appends the low n bytes of v to s, little-endian.
inline void put_le(std::string& s, std::uint64_t v, int n) {
    for (int k = 0; k < n; ++k) s += char(v >> (8 * k) & 0xff);
}

// Text from the input echoed in a message, one line and nothing a terminal acts on:
// control characters and invalid UTF-8 escaped (base's escape_control), at most `max`
// bytes of it kept (clip_fragment says how long it was). For member names, keys, strings,
// numbers and header text: anything a file can make as long as it likes.
inline std::string shown(std::string_view s, std::size_t max = 80) { return escape_control(clip_fragment(s, max)); }

// A file name in a message: escaped like shown(), but whole (the user typed it).
inline std::string shown_path(std::string_view path) { return escape_control(path); }

// "the memory limit of 1.0 GiB ({max_memory})": the end of every MemoryLimitError
// message the io layer builds ("... over the memory limit of ...", "... more than the
// memory limit of ..."), the option named as its field.
inline std::string memory_limit_of(std::size_t max_bytes) {
    return "the memory limit of " + format_bytes(max_bytes) + " ({max_memory})";
}

// What an array read counts against the memory limit: its numbers as doubles (whether
// held as doubles or kept as stored: what a float64 run holds of them), and a string
// object per text element.
inline std::size_t held_bytes(const Array& a) {
    return a.count() * sizeof(double) + a.strings.size() * sizeof(std::string);
}

// Refuses (InputError naming `path` and what it is) a character or block device opened
// as `fd` with status `st`, as an input: /dev/zero or a disk never ends, and a listing
// or a run has nothing to read in one. A terminal is let through (text typed, ended by
// the user).
void refuse_device(int fd, const struct stat& st, const std::string& path);

// UTF-8 of a code point: base's (text.hpp).
using attnscope::append_utf8;

// IEEE half precision (float16) to float: exact (every half is a float), by its bits.
inline float half_to_float(std::uint16_t h) {
    const std::uint32_t sign = std::uint32_t(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    if (exp == 0) {  // zero or subnormal: mant · 2^-24
        const float v = float(mant) * 0x1p-24f;
        return sign ? -v : v;
    }
    if (exp == 31) {
        const float v = mant ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
        return sign ? -v : v;
    }
    return std::bit_cast<float>(sign | (exp + 112) << 23 | mant << 13);  // rebias 15 -> 127
}
inline double half_to_double(std::uint16_t h) { return double(half_to_float(h)); }

// bfloat16 is the high half of a float32: exact.
inline float bf16_to_float(std::uint16_t b) { return std::bit_cast<float>(std::uint32_t(b) << 16); }
inline double bf16_to_double(std::uint16_t b) { return double(bf16_to_float(b)); }

}  // namespace attnscope::io_detail
