// attnscope — io layer: named arrays from .npy, .npz and JSON files, and .npy/.npz writers.
//
// Knows nothing of attention. Every error names the file (and the array inside it).
// The .npy reader is our own (NEP 1, format versions 1–3): xtensor's reader accepts
// truncated files and mis-parses headers, so it is not used for anything a user hands us.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <ostream>
#include <streambuf>
#include <string>
#include <string_view>
#include <vector>

namespace attnscope {

// An array as read from a file: its shape and its values widened to double, in C order.
// Widening is exact for every accepted dtype (integers beyond 2^53 excepted).
// Arrays of text (numpy '<U' dtype, JSON lists of strings) keep `strings` instead.
struct Array {
    std::vector<std::size_t> shape;
    std::vector<double> values;        // numeric arrays
    std::vector<std::string> strings;  // text arrays (token labels)
    std::string dtype;                 // as found: "float32", "bool", "int64", "text", "json"…
    std::string origin;                // where it came from, for messages: "data/x.npz: W_Q"

    bool is_text() const { return dtype == "text"; }
    std::size_t ndim() const { return shape.size(); }
};

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

// Parsers on bytes already in memory; `origin` prefixes every message.
Array parse_npy(std::string_view bytes, const std::string& origin, std::size_t max_bytes = kNoLimit);
Bundle parse_npz(std::string_view bytes, const std::string& source, std::size_t max_bytes = kNoLimit);
Bundle parse_json_bundle(std::string_view text, const std::string& source, std::size_t max_bytes = kNoLimit);
Array parse_json_array(std::string_view text, const std::string& origin, std::size_t max_bytes = kNoLimit);

// Whole file into memory; InputError naming the file when it cannot be read.
std::string read_file(const std::string& path, std::size_t max_bytes = kNoLimit);

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
std::string npy_header(const OutArray& a);

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

private:
    std::string target_, temp_;
    int fd_ = -1;
    std::uint64_t written_ = 0;
    bool committed_ = false;
};

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
