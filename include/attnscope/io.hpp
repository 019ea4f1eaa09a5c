// attnscope — io layer: named arrays from .npy, .npz and JSON files, and .npy/.npz writers.
//
// Knows nothing of attention. Every error names the file (and the array inside it).
// The .npy reader is our own (NEP 1, format versions 1–3): xtensor's reader accepts
// truncated files and mis-parses headers, so it is not used for anything a user hands us.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <ostream>
#include <streambuf>
#include <string>
#include <string_view>
#include <vector>

namespace attnscope {

// An array as read from a file: its shape and its numbers, in C order.
//
// Numbers are held one of two ways. A .npy's little-endian, C-order float32 or float64
// data is kept as stored, in place in the file's bytes (`stored`, kept alive by `keep`):
// no widening, no copy, and a float32 input reaches a float32 run bit for bit. Every other
// numeric array (JSON, integers, bool, float16, big-endian, Fortran order) is widened to
// double in `values`; widening is exact for every accepted dtype (integers beyond 2^53
// excepted). Read the numbers through count(), value(), doubles() or copy_numbers(),
// which serve both ways alike. Arrays of text (numpy '<U' dtype, JSON lists of strings)
// keep `strings` instead.
struct Array {
    enum class Held : unsigned char { doubles, float32, float64 };

    std::vector<std::size_t> shape;
    std::vector<double> values;        // numeric arrays held as doubles
    std::vector<std::string> strings;  // text arrays (token labels)
    std::string dtype;                 // as found: "float32", "bool", "int64", "text", "json"…
    std::string origin;                // where it came from, for messages: "data/x.npz: W_Q"
    Held held = Held::doubles;
    std::string_view stored;           // held float32/float64: the raw little-endian bytes
    std::shared_ptr<const void> keep;  // owns the bytes `stored` points into

    bool is_text() const { return dtype == "text"; }
    std::size_t ndim() const { return shape.size(); }
    // How many numbers the array holds (0 for text).
    std::size_t count() const {
        return held == Held::doubles ? values.size() : stored.size() / (held == Held::float32 ? 4 : 8);
    }
    double value(std::size_t k) const;    // the k-th number (C order), as double
    std::vector<double> doubles() const;  // every number, as double
};

// Numbers found non-finite while copying an array out: how many, and the first of them
// (its C-order index and value as stored).
struct NonFinite {
    std::size_t count = 0, first = 0;
    double first_value = 0;
};

// Copies every number of a numeric array into out[0, a.count()) as T (static_cast from
// the number as held: bit for bit when T is the stored type). Returns the numbers that
// are NaN or infinite, or beyond T's finite range (a float64 value too large for float32),
// found in the same pass.
template <typename T>
NonFinite copy_numbers(const Array& a, T* out);
extern template NonFinite copy_numbers<float>(const Array&, float*);
extern template NonFinite copy_numbers<double>(const Array&, double*);

// Named arrays from one source (an .npz archive, a JSON object, or single files).
struct Bundle {
    std::string source;                  // file name, or "<stdin>"
    std::map<std::string, Array> arrays; // by name, e.g. "x", "W_Q", "query_tokens"
};

// "(2, 3, 4)", "(5,)", "()" — numpy's spelling, used in every shape message.
std::string shape_str(const std::vector<std::size_t>& shape);

// Memory limits. Every reader takes `max_bytes`, the most it may allocate for what it
// reads (file contents, decompressed members, values widened to double), and refuses
// with MemoryLimitError *before* allocating more — so a header claiming terabytes, or a
// decompression bomb, costs nothing.
inline constexpr std::size_t kNoLimit = static_cast<std::size_t>(-1);

// "1.5 GiB": a byte count for messages.
std::string format_bytes(std::size_t bytes);

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

// ---- writers --------------------------------------------------------------------------

enum class DType { float32, float64, boolean };

// A borrowed view of a contiguous C-order array to be written.
struct OutArray {
    std::string name;
    std::vector<std::size_t> shape;
    DType dtype;
    const void* data;  // shape-product elements of dtype (bool as one byte each)
};

std::size_t dtype_size(DType dtype);
std::size_t element_count(const std::vector<std::size_t>& shape);

// The complete .npy encoding (header + data) as numpy's np.save writes it.
// `align` (a multiple of 64) is where the data starts: 64 as np.save does, or the page
// size for a file whose data is mapped into memory and computed in place (numpy reads
// headers of any length up to 10000 bytes).
std::string npy_header(const OutArray& a, std::size_t align = 64);

// A file written under a temporary name beside its target and renamed into place by
// commit(); destroyed uncommitted, it removes the temporary. A failed run therefore
// never leaves a half-written output nor damages what was at the target before.
class AtomicFile {
public:
    explicit AtomicFile(std::string target);
    ~AtomicFile();
    AtomicFile(const AtomicFile&) = delete;
    AtomicFile& operator=(const AtomicFile&) = delete;
    AtomicFile(AtomicFile&&) noexcept;

    void write(const void* data, std::size_t n);
    void write(std::string_view s) { write(s.data(), s.size()); }
    std::uint64_t written() const { return written_; }
    void close();   // flush and close; throws RuntimeFailure on a write error
    void commit();  // close, then rename over the target
    const std::string& target() const { return target_; }
    int fd() const { return fd_; }  // the open temporary (-1 once closed), e.g. to map it

private:
    std::string target_, temp_;
    int fd_ = -1;
    int slot_ = -1;  // register_unfinished's, while the temporary exists
    std::uint64_t written_ = 0;
    bool committed_ = false;
};

// Outputs not yet complete: AtomicFile temporaries and directories a dump created. They
// are listed so that a run killed by a signal (Ctrl-C, a closed pipe) can remove them:
// the CLI's handlers call remove_unfinished_outputs(), which is async-signal-safe and
// removes the listed files, then the listed directories that are empty.
int register_unfinished(const std::string& path, bool directory) noexcept;  // a slot, or -1
void unregister_unfinished(int slot) noexcept;
void remove_unfinished_outputs() noexcept;

// An std::ostream into an AtomicFile, for text outputs (HTML, SVG). Write errors surface
// as RuntimeFailure from commit().
class AtomicTextFile : public std::ostream {
public:
    explicit AtomicTextFile(std::string target);
    void commit();

private:
    struct Buf : std::streambuf {
        explicit Buf(AtomicFile& f) : file(f) { setp(data, data + sizeof data); }
        int_type overflow(int_type c) override;
        int sync() override;
        AtomicFile& file;
        char data[1 << 16];
    };
    AtomicFile file_;
    Buf buf_;
};

// One .npy file; one .npz archive (stored members, zip64 where needed).
void write_npy(AtomicFile& file, const OutArray& a);
void write_npz(AtomicFile& file, const std::vector<OutArray>& arrays);

}  // namespace attnscope
