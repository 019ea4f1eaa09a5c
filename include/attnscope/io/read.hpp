// attnscope — io layer: readers of .npy, .npz and JSON files, and of whole files.
//
// The .npy reader is our own (NEP 1, format versions 1–3): xtensor's reader accepts
// truncated files and mis-parses headers, so it is not used for anything a user hands us.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "attnscope/io/array.hpp"

namespace attnscope {

// Checks one name of a bundle before anything of its array is read or inflated, and
// throws (InputError, naming `source` and the name) when the caller will not use it: an
// unknown name then costs nothing, however large the member behind it claims to be.
// `source` is the bundle's name as shown in messages (escaped).
using NameCheck = std::function<void(const std::string& source, const std::string& name)>;

// Reads a bundle: `.npz`, `.json`, or "-" for a JSON object on standard input (bounded by
// the memory limit as it is read). `check_name`, when given, is asked about every array
// name first (an .npz archive's before any member is inflated, a JSON object's before its
// value is read).
Bundle load_bundle(const std::string& path, std::size_t max_bytes = kNoLimit, const NameCheck& check_name = {});

// Reads one array from its own file (`.npy`, or `.json` holding a nested list or an
// object with a single entry); `name` labels it in messages.
Array load_array(const std::string& path, const std::string& name, std::size_t max_bytes = kNoLimit);

// Parsers on bytes already in memory; `origin` prefixes every message. `keep`, when
// given, holds `bytes` alive: numbers kept as stored then point into `bytes` itself;
// without it they are copied out of `bytes`, which may die after the call.
Array parse_npy(std::string_view bytes, const std::string& origin, std::size_t max_bytes = kNoLimit,
                std::shared_ptr<const void> keep = {});
Bundle parse_npz(std::string_view bytes, const std::string& source, std::size_t max_bytes = kNoLimit,
                 std::shared_ptr<const void> keep = {}, const NameCheck& check_name = {});
Bundle parse_json_bundle(std::string_view text, const std::string& source, std::size_t max_bytes = kNoLimit,
                         const NameCheck& check_name = {});
Array parse_json_array(std::string_view text, const std::string& origin, std::size_t max_bytes = kNoLimit);
// A bundle's `config` record given as JSON text (an .npz's config member): one object of
// at most 64 options, each a number, true/false or a string. `origin` names it in messages.
std::map<std::string, ConfigValue> parse_bundle_config(std::string_view text, const std::string& origin,
                                                       std::size_t max_bytes = kNoLimit);

// The CRC-32 of n bytes continuing from `crc` (0 to start), as zip and zlib's crc32()
// compute it; what an .npz member is checked against.
std::uint32_t crc32_bytes(std::uint32_t crc, const unsigned char* p, std::size_t n);

// A file's bytes, alive as long as `keep`. A regular file is mapped read-only: its pages
// are the page cache's, nothing is copied or zero-filled. Anything else is read to its
// end: a pipe, a device, a file that cannot be mapped, and a regular file whose size says
// 0 (procfs and sysfs files such as /proc/self/status give their bytes only when read).
// InputError naming the file when it cannot be read. The memory limit holds as the bytes
// arrive: a regular file larger than `max_bytes` is refused before it is read, anything
// else once more than `max_bytes` have been read (never more than that is held, whatever
// the source sends: `/dev/zero` is refused, not read until memory runs out). A mapped file
// truncated while it is read raises SIGBUS: see exit_on_changed_mappings().
struct FileBytes {
    std::string_view bytes;
    std::shared_ptr<const void> keep;
    bool mapped = false;  // `bytes` are a read-only mapping of the file (see drop_mapped_pages)
};
FileBytes map_file(const std::string& path, std::size_t max_bytes = kNoLimit);

// A file's bytes mapped without reading them: only the pages read are ever touched (no
// MAP_POPULATE, unlike map_file, which serves readers that go through every byte); for the
// checkpoint readers, which read one layer of a file of many gigabytes. What cannot be
// mapped (a pipe, /dev/stdin, a procfs file) is read by map_file under the limit; with
// `regular_only` (a shard named by an index), anything but a regular file is refused,
// without blocking on a FIFO.
FileBytes map_file_lazily(const std::string& path, std::size_t max_bytes = kNoLimit, bool regular_only = false);

// Gives back the resident pages that lie wholly inside `bytes`, part of a read-only file
// mapping (FileBytes::mapped): they leave the process's memory (its RSS) and are read
// again from the page cache if touched, with the same contents. A checkpoint reader calls
// it once a tensor's bytes are converted or no longer referenced, so that a forward pass
// over many layers holds one layer's pages at a time.
void drop_mapped_pages(std::string_view bytes);
// `keep` (which holds a mapping alive) for an array read in place from `bytes` of it: once
// the returned owner's last copy is gone, drop_mapped_pages(bytes).
std::shared_ptr<const void> keep_until_dropped(std::shared_ptr<const void> keep, std::string_view bytes);

// From now on, a mapped file found truncated while it is read (SIGBUS) ends the process
// with exit code 2 and one line on standard error naming the file ("attnscope: error:
// FILE: the file changed while it was read ..."), after removing the outputs being
// written, instead of dying without a word. For programs (the CLI), not libraries.
void exit_on_changed_mappings();

// A stream (standard input) read to its end, bounded as map_file() bounds a pipe: once
// more than `max_bytes` have been read, MemoryLimitError "NAME: the input is larger than
// the memory limit of ...". `name` ("<stdin>") names it in messages.
FileBytes read_stream(std::istream& in, const std::string& name, std::size_t max_bytes = kNoLimit);

// Whole file into memory: a copy of map_file()'s bytes, with its errors and limit.
std::string read_file(const std::string& path, std::size_t max_bytes = kNoLimit);

}  // namespace attnscope
