// attnscope — io layer: arrays as read from files, and named bundles of them.
//
// Knows nothing of attention. Every error names the file (and the array inside it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace attnscope {

// An array as read from a file: its shape and its numbers, in C order.
//
// Numbers are held one of two ways. A .npy's little-endian, C-order float32 or float64
// data is kept as stored, in place in the file's bytes (`stored`, kept alive by `keep`):
// no widening, no copy, and a float32 input reaches a float32 run bit for bit; so is a
// checkpoint's float16 and bfloat16 data (safetensors, PyTorch zip), converted (exactly)
// only as it is read out, straight to the run's dtype. Every other numeric array (JSON,
// integers, bool, a .npy's float16, big-endian, Fortran order) is widened to double in
// `values`; widening is exact for every accepted dtype (integers beyond 2^53 excepted). Read the numbers through
// count(), value(), doubles() or copy_numbers(), which serve both ways alike. Arrays of text (numpy '<U' dtype, JSON
// lists of strings) keep `strings` instead.
struct Array {
    enum class Held : unsigned char { doubles, float32, float64, float16, bfloat16 };
    // The bytes of one stored number (0 for doubles, held in `values`).
    static constexpr std::size_t item_size(Held h) {
        return h == Held::float32 ? 4 : h == Held::float64 ? 8 : h == Held::doubles ? 0 : 2;
    }

    std::vector<std::size_t> shape;
    std::vector<double> values;        // numeric arrays held as doubles
    std::vector<std::string> strings;  // text arrays (token labels)
    std::string dtype;                 // as found: "float32", "bool", "int64", "text", "json"…
    std::string origin;                // where it came from, for messages: "data/x.npz: W_Q"
    Held held = Held::doubles;
    std::string_view stored;           // held as stored: the raw little-endian bytes
    std::shared_ptr<const void> keep;  // owns the bytes `stored` points into

    bool is_text() const { return dtype == "text"; }
    std::size_t ndim() const { return shape.size(); }
    // How many numbers the array holds (0 for text).
    std::size_t count() const { return held == Held::doubles ? values.size() : stored.size() / item_size(held); }
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

// One value of a bundle's `config` record, as written: a number (`text` its JSON token,
// "2", "0.35"), true/false (`text` "true" or "false"), or a string (`text` itself).
struct ConfigValue {
    enum class Kind : unsigned char { number, boolean, string };
    Kind kind = Kind::string;
    std::string text;
};

// Named arrays from one source (an .npz archive, a JSON object, or single files).
struct Bundle {
    std::string source;                   // file name, or "<stdin>"
    std::map<std::string, Array> arrays;  // by name, e.g. "x", "W_Q", "query_tokens"
    // The run options the bundle carries, by key ("heads", "causal", ...), from its
    // `config` record: a JSON object's "config" member, an .npz's member config.npy (one
    // string of JSON). The io layer reads it as a flat object of scalars; which keys mean
    // what is the command line's business. Empty when the bundle has none.
    std::map<std::string, ConfigValue> config;
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

}  // namespace attnscope
