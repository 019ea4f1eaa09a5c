// attnscope — io layer: GGUF files (llama.cpp's container), their metadata and ggml's
// tensor types.
//
// A GGUF file (versions 2 and 3) is a header (magic "GGUF", version, tensor and key
// counts), metadata key/values, tensor infos (name, dims innermost first, ggml type,
// offset), then the data section, aligned to `general.alignment` (32 by default). Opening
// one maps the file and parses the header, metadata and infos, every count, length and
// offset checked against the file; a tensor's bytes are read only when it is read, and
// quantized blocks are dequantized to float32 then (docs/checkpoints.md, "GGUF").
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "attnscope/io/checkpoint.hpp"

namespace attnscope {

// The metadata value types, numbered as the GGUF specification numbers them.
enum class GgufType : std::uint32_t {
    u8 = 0,
    i8 = 1,
    u16 = 2,
    i16 = 3,
    u32 = 4,
    i32 = 5,
    f32 = 6,
    boolean = 7,
    string = 8,
    array = 9,
    u64 = 10,
    i64 = 11,
    f64 = 12,
};

// "uint32", "string", "array": the type's name in listings and messages.
std::string_view gguf_type_name(GgufType t);

// One metadata value. Strings and the items of arrays stay in the mapped file (the
// GgufInfo's `keep` holds it): a tokenizer's 150 000 tokens are not copied out.
struct GgufValue {
    GgufType type = GgufType::u8;
    std::uint64_t u = 0;    // u8..u64, and bool (0 or 1)
    std::int64_t i = 0;     // i8..i64
    double f = 0;           // f32, f64
    std::string_view text;  // string: its bytes (any bytes: escape before showing)
    // array: its items' type and count; `raw` holds their bytes when they are not arrays
    // themselves, `items` the nested arrays (each a GgufValue of type array).
    GgufType item = GgufType::u8;
    std::uint64_t count = 0;
    std::string_view raw;
    std::vector<GgufValue> items;

    // The items of an array of strings, in order (the first `first` of them).
    std::vector<std::string_view> strings(std::size_t first = SIZE_MAX) const;
    // The items of an array of numbers or bools, as double (64-bit integers beyond 2^53
    // rounded; the first `first` of them); empty for other arrays.
    std::vector<double> numbers(std::size_t first = SIZE_MAX) const;
    // A scalar number or bool as double; 0 for strings and arrays.
    double number() const;
};

struct GgufKeyValue {
    std::string key;
    GgufValue value;
};

// What a GGUF file says besides its tensors.
struct GgufInfo {
    std::uint32_t version = 0;
    std::uint64_t alignment = 32;        // general.alignment, or 32
    std::uint64_t data_offset = 0;       // where the data section starts in the file
    std::vector<GgufKeyValue> metadata;  // in file order, keys distinct
    std::shared_ptr<const void> keep;    // holds the bytes the values point into

    // The value of `key`, or null.
    const GgufValue* find(std::string_view key) const;
};

// A ggml tensor type: its number in a GGUF file, its name, and its block (elements per
// block, bytes per block; 1 and the element's size for the plain types).
struct GgmlType {
    std::uint32_t id;
    std::string_view name;  // "F32", "Q4_K", "IQ2_XXS"
    std::uint32_t block;
    std::uint32_t block_bytes;
    bool readable;  // read() reads it; the others are listed, and refused by name when read
};

// The type numbered `id`, or null when ggml has none (or no longer has it).
const GgmlType* ggml_type(std::uint32_t id);
// The names of the readable types, for messages: "F32, F16, BF16, ..."
std::string_view ggml_readable_types();

// Dequantizes `count` elements (a multiple of the type's block) of a readable quantized
// or float type from `blocks` (count / block * block_bytes bytes, any alignment) into
// out[0, count), exactly as ggml's dequantize_row_* (and its float16/bfloat16 widening)
// computes them. The integer types and F64 are not dequantized (read() widens them).
void ggml_dequantize(const GgmlType& type, const char* blocks, std::size_t count, float* out);

// A GGUF file mapped and parsed (open_checkpoint picks it by its magic bytes), and the
// same on bytes in memory, for the fuzzers (`keep` as for parse_safetensors). Every
// refusal is an InputError of one line naming the file and the key or tensor.
std::unique_ptr<TensorSource> open_gguf(const std::string& path, std::size_t max_bytes = kNoLimit);
std::unique_ptr<TensorSource> parse_gguf(std::string_view bytes, const std::string& source,
                                         std::size_t max_bytes = kNoLimit, std::shared_ptr<const void> keep = {});

}  // namespace attnscope
