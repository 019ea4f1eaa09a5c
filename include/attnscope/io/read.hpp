// attnscope — io layer: readers of .npy, .npz and JSON files, and of whole files.
//
// The .npy reader is our own (NEP 1, format versions 1–3): xtensor's reader accepts
// truncated files and mis-parses headers, so it is not used for anything a user hands us.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "attnscope/io/array.hpp"

namespace attnscope {

// Reads a bundle: `.npz`, `.json`, or "-" for a JSON object on standard input.
Bundle load_bundle(const std::string& path, std::size_t max_bytes = kNoLimit);

// Reads one array from its own file (`.npy`, or `.json` holding a nested list or an
// object with a single entry); `name` labels it in messages.
Array load_array(const std::string& path, const std::string& name, std::size_t max_bytes = kNoLimit);

// Parsers on bytes already in memory; `origin` prefixes every message. `keep`, when
// given, holds `bytes` alive: numbers kept as stored then point into `bytes` itself;
// without it they are copied out of `bytes`, which may die after the call.
Array parse_npy(std::string_view bytes, const std::string& origin, std::size_t max_bytes = kNoLimit,
                std::shared_ptr<const void> keep = {});
Bundle parse_npz(std::string_view bytes, const std::string& source, std::size_t max_bytes = kNoLimit,
                 std::shared_ptr<const void> keep = {});
Bundle parse_json_bundle(std::string_view text, const std::string& source, std::size_t max_bytes = kNoLimit);
Array parse_json_array(std::string_view text, const std::string& origin, std::size_t max_bytes = kNoLimit);

// The CRC-32 of n bytes continuing from `crc` (0 to start), as zip and zlib's crc32()
// compute it; what an .npz member is checked against.
std::uint32_t crc32_bytes(std::uint32_t crc, const unsigned char* p, std::size_t n);

// Whole file into memory; InputError naming the file when it cannot be read.
std::string read_file(const std::string& path, std::size_t max_bytes = kNoLimit);

// A file's bytes, alive as long as `keep`. A regular file is mapped read-only: its pages
// are the page cache's, nothing is copied or zero-filled. Anything else (a pipe, a
// device, a file that cannot be mapped) is read as read_file() does. The same errors and
// memory limit as read_file(). A mapped file must not be truncated while it is read.
struct FileBytes {
    std::string_view bytes;
    std::shared_ptr<const void> keep;
};
FileBytes map_file(const std::string& path, std::size_t max_bytes = kNoLimit);

}  // namespace attnscope
