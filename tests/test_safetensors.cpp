// .safetensors reading: single files and sharded checkpoints, against files written by an
// independent writer (scripts/make_safetensors_fixtures.py: struct + json from the format's
// description, numpy and torch for the values). Every tensor's expected values are
// numpy's/torch's widening to float64, saved as .npy beside the file; nothing is compared
// with the code under test. Hostile files must be refused with one line that names the
// file and what is wrong (the sanitizer build runs these too).
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "attnscope/base/errors.hpp"
#include "attnscope/io/checkpoint.hpp"
#include "attnscope/io/read.hpp"
#include "test_util.hpp"

using namespace attnscope;
using namespace testutil;

namespace {

const std::string kCk = kFixtures + "checkpoints/safetensors/";

// Reads every tensor of `src` and compares it with DIR/NAME.npy, exactly.
void check_against_npy(const TensorSource& src, const std::string& dir) {
    for (const TensorInfo& t : src.tensors()) {
        CAPTURE(t.name);
        const Array want = load_array(dir + "/" + t.name + ".npy", t.name);
        const Array a = src.read(t.name);
        CHECK(a.shape == t.shape);
        CHECK(a.shape == want.shape);
        CHECK(a.dtype == t.dtype);
        CHECK(contains(a.origin, t.name));
        std::size_t count = 1;
        for (std::size_t d : t.shape) count *= d;
        CHECK(a.count() == count);
        const std::map<std::string, Array::Held> floats = {{"float64", Array::Held::float64},
                                                           {"float32", Array::Held::float32},
                                                           {"float16", Array::Held::float16},
                                                           {"bfloat16", Array::Held::bfloat16}};
        if (floats.count(t.dtype)) {
            // Kept as stored, in place, not widened (halves are widened as they are read out).
            CHECK(a.held == floats.at(t.dtype));
            CHECK(a.values.empty());
            CHECK(a.keep != nullptr);
            CHECK(a.stored.size() == t.bytes);
        } else {
            CHECK(a.held == Array::Held::doubles);
        }
        check_values(a.doubles(), want.doubles());
    }
}

std::vector<std::string> names_of(const TensorSource& src) {
    std::vector<std::string> names;
    for (const TensorInfo& t : src.tensors()) names.push_back(t.name);
    return names;
}

}  // namespace

// ---- good files ---------------------------------------------------------------------------

TEST_CASE("safetensors: every dtype reads with its shape and exact values") {
    const std::string path = kCk + "good/dtypes.safetensors";
    const auto src = open_safetensors(path);
    // In data order (here also the header's), each in numpy's spelling.
    const std::vector<std::pair<std::string, std::string>> want = {
        {"f64", "float64"}, {"f32", "float32"}, {"f16", "float16"}, {"bf16", "bfloat16"},  {"i64", "int64"},
        {"i32", "int32"},   {"i16", "int16"},   {"i8", "int8"},     {"u64", "uint64"},     {"u32", "uint32"},
        {"u16", "uint16"},  {"u8", "uint8"},    {"bool", "bool"},   {"scalar", "float32"}, {"empty", "float16"}};
    REQUIRE(src->tensors().size() == want.size());
    for (std::size_t i = 0; i < want.size(); ++i) {
        const TensorInfo& t = src->tensors()[i];
        CAPTURE(t.name);
        CHECK(t.name == want[i].first);
        CHECK(t.dtype == want[i].second);
        CHECK(t.file == path);
    }
    CHECK(src->tensors()[0].shape == std::vector<std::size_t>{2, 4});
    CHECK(src->tensors()[0].bytes == 64);
    CHECK(src->tensors()[13].shape.empty());  // a 0-d scalar
    CHECK(src->tensors()[14].shape == std::vector<std::size_t>{0, 3});
    check_against_npy(*src, kCk + "good/dtypes");
}

TEST_CASE("safetensors: tensors listed out of data order, with __metadata__ and a zero-sized tensor") {
    const auto src = open_safetensors(kCk + "good/multi.safetensors");
    // The header lists them by name; tensors() gives them in data order.
    CHECK(names_of(*src) == std::vector<std::string>{"model.layers.0.self_attn.o_proj.weight",
                                                     "model.layers.0.self_attn.q_proj.weight", "zero_sized",
                                                     "model.layers.0.self_attn.k_proj.weight",
                                                     "model.layers.0.self_attn.v_proj.weight"});
    check_against_npy(*src, kCk + "good/multi");
}

TEST_CASE("safetensors: float32 and float64 data at odd addresses stay in place, or are copied without keep") {
    const std::string path = kCk + "good/unaligned.safetensors";
    check_against_npy(*open_safetensors(path), kCk + "good/unaligned");
    // An array read in place keeps the mapping alive after its source is gone.
    Array kept;
    {
        const auto src = open_safetensors(path);
        kept = src->read("b");
    }
    check_values(kept.doubles(), load_array(kCk + "good/unaligned/b.npy", "b").doubles());

    auto bytes = std::make_shared<const std::string>(slurp(path));
    const char* begin = bytes->data();
    const char* end = begin + bytes->size();
    {
        const auto src = parse_safetensors(*bytes, "unaligned.safetensors", kNoLimit, bytes);
        const Array a = src->read("a");
        CHECK(a.held == Array::Held::float32);
        CHECK(a.stored.data() >= begin);
        CHECK(a.stored.data() + a.stored.size() <= end);
        CHECK(reinterpret_cast<std::uintptr_t>(a.stored.data()) % 2 == 1);  // the fixture's point
        CHECK(a.origin == "unaligned.safetensors: a");
        check_values(a.doubles(), load_array(kCk + "good/unaligned/a.npy", "a").doubles());
    }
    // Without `keep`, a read copies: the array outlives the bytes.
    Array b;
    {
        const std::string copy = *bytes;
        b = parse_safetensors(copy, "unaligned.safetensors")->read("b");
        CHECK((b.stored.data() < copy.data() || b.stored.data() >= copy.data() + copy.size()));
    }
    CHECK(b.held == Array::Held::float64);
    check_values(b.doubles(), load_array(kCk + "good/unaligned/b.npy", "b").doubles());
}

TEST_CASE("safetensors: a file of no tensors, only __metadata__ and padding") {
    const auto src = open_safetensors(kCk + "good/no_tensors.safetensors");
    CHECK(src->tensors().empty());
    check_message(input_error([&] { src->read("x"); }), {"no_tensors.safetensors: no tensor 'x'", "0 tensors"});
}

TEST_CASE("safetensors: a sharded checkpoint reads through its index, in weight_map order") {
    const std::string dir = kCk + "sharded/";
    const auto src = open_safetensors_index(dir + "model.safetensors.index.json");
    CHECK(names_of(*src) ==
          std::vector<std::string>{"model.layers.0.self_attn.k_proj.weight", "model.layers.0.self_attn.o_proj.weight",
                                   "model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.v_proj.weight"});
    for (const TensorInfo& t : src->tensors()) {
        CAPTURE(t.name);
        const bool first = contains(t.name, "k_proj") || contains(t.name, "o_proj");
        const std::string stem = first ? "model-00001-of-00002" : "model-00002-of-00002";
        CHECK(t.file == dir + stem + ".safetensors");
        const Array want = load_array(dir + stem + "/" + t.name + ".npy", t.name);
        check_values(src->read(t.name).doubles(), want.doubles());
    }
    check_message(input_error([&] { src->read("lm_head.weight"); }),
                  {"model.safetensors.index.json: no tensor 'lm_head.weight' in weight_map"});

    // open_checkpoint finds the index in the directory, and config.json beside it.
    const Checkpoint c = open_checkpoint(kCk + "sharded");
    CHECK(c.format == "sharded safetensors");
    CHECK(c.source->tensors().size() == 4);
    CHECK(c.config.at("hidden_size") == "4");
    CHECK(c.config.at("model_type") == "\"llama\"");
    const Checkpoint single = open_checkpoint(kCk + "good/multi.safetensors");
    CHECK(single.format == "safetensors");
    CHECK(single.source->tensors().size() == 5);
}

// ---- hostile files ----------------------------------------------------------------------------

TEST_CASE("safetensors: hostile files are refused with one line naming the file and what is wrong") {
    struct Case {
        const char* file;
        std::vector<std::string> phrases;
    };
    const std::vector<Case> cases = {
        {"too_short", {"not a .safetensors file: 5 bytes, too short for the 8-byte header length"}},
        {"header_too_large", {"header length 1099511627776 is over the format's limit of 100000000 bytes"}},
        {"header_past_end", {"header length 1000 runs past the end of the file (2 bytes follow the length)"}},
        {"not_utf8", {"the header is not valid UTF-8 (byte 0xff at header offset 3)"}},
        {"not_json", {"the header is not valid JSON: [json.exception.parse_error.101]", "unexpected end of input"}},
        {"not_object", {"the header is an array, expected a JSON object of tensors"}},
        {"metadata_not_strings", {"__metadata__ 'n' is a number, expected a string"}},
        {"metadata_not_object", {"__metadata__ must be an object of strings, found an array"}},
        {"entry_not_object", {"tensor 'a': expected an object of dtype, shape and data_offsets, found an array"}},
        {"missing_offsets", {"tensor 'a': lacks data_offsets"}},
        {"bad_dtype", {"tensor 'a': unknown dtype 'F12' (expected F64, F32, F16, BF16"}},
        {"dtype_not_string", {"tensor 'a': dtype must be a string, found a number"}},
        {"f4_half_byte", {"tensor 'a': shape (3,) of F4 is 12 bits, not a whole number of bytes"}},
        {"dtype_bytes_disagree", {"tensor 'a': shape (3,) of F32 needs 12 bytes, data_offsets [0, 16] hold 16"}},
        {"overlap", {"tensors 'a' (data_offsets [0, 16]) and 'b' (data_offsets [8, 24]) overlap"}},
        {"gap", {"data bytes [8, 12) belong to no tensor (after 'a', before 'b')"}},
        {"trailing_bytes", {"data bytes [8, 16) belong to no tensor (after the last one, 'a')"}},
        {"offsets_out_of_bounds",
         {"tensor 'a' (data_offsets [0, 16]) runs past the end of the data: the file holds 8 data bytes"}},
        // 10 GB claimed, 16 bytes there: an InputError, nothing allocated.
        {"huge_shape_10gb",
         {"tensor 'a' (data_offsets [0, 10000000000]) runs past the end of the data: the file holds 16 data bytes"}},
        {"shape_overflow", {"tensor 'a': shape (4294967296, 4294967296) has more elements than can be addressed"}},
        {"negative_shape", {"tensor 'a': shape must hold non-negative integers, found the negative number -1"}},
        {"fractional_shape", {"tensor 'a': shape must hold non-negative integers, found 4.0"}},
        {"offsets_reversed", {"tensor 'a': data_offsets [16, 0] end before they begin"}},
        {"offsets_three", {"tensor 'a': data_offsets must be [begin, end], found more than 2 numbers"}},
        {"duplicate_tensor", {"tensor 'a' appears twice in the header"}},
        {"duplicate_field", {"tensor 'a': key 'dtype' appears twice"}},
        // Control characters in a name are escaped: the message stays one line.
        {"control_name", {"tensor 'a\\x1b[31m\\nb': unknown dtype 'F12'"}},
    };
    for (const Case& c : cases) {
        CAPTURE(c.file);
        const std::string path = kCk + "bad/" + c.file + ".safetensors";
        const std::string m = input_error([&] { open_safetensors(path); });
        CHECK(m.rfind(path + ": ", 0) == 0);  // starts with the file
        CHECK(m.find('\n') == std::string::npos);
        check_message(m, c.phrases);
        // The same bytes in memory give the same message, under the source's name.
        check_message(input_error([&] { parse_safetensors(slurp(path), "mem.safetensors"); }), c.phrases);
    }
}

TEST_CASE("safetensors: 8-bit floats are listed but refused by name when read") {
    const auto src = open_safetensors(kCk + "bad/f8.safetensors");
    REQUIRE(src->tensors().size() == 1);
    CHECK(src->tensors()[0].dtype == "F8_E4M3");
    CHECK(src->tensors()[0].bytes == 4);
    check_message(input_error([&] { src->read("a"); }),
                  {"f8.safetensors: tensor 'a': dtype F8_E4M3 (8-bit float) is not supported"});
}

TEST_CASE("safetensors: sharded indexes that escape their directory or disagree with their shards") {
    struct Case {
        const char* index;
        std::string phrase;
    };
    const std::string beside = "', expected the name of a file beside the index (no '/', not '.' or '..')";
    const std::vector<Case> cases = {
        {"escape", "weight_map puts tensor 'x' in '../a.safetensors" + beside},
        {"subdir", "weight_map puts tensor 'x' in 'sub/a.safetensors" + beside},
        {"dotdot", "weight_map puts tensor 'x' in '.." + beside},
        {"absolute", "weight_map puts tensor 'x' in '/etc/passwd" + beside},
        {"missing_in_shard", "weight_map puts tensor 'w' in 'b.safetensors', which does not hold it"},
        {"not_in_map", "shard 'a.safetensors' holds tensor 'y', which weight_map does not list"},
        {"two_shards", "shard 'b_dup.safetensors' holds tensor 'y', which weight_map puts in 'a.safetensors'"},
        {"no_shard_file", "weight_map puts tensor 'q' in 'c.safetensors', which does not exist beside the index"},
        {"no_weight_map", "lacks weight_map"},
        {"shard_not_string", "weight_map gives tensor 'x' a number, expected a shard's file name"},
        {"duplicate", "key 'x' appears twice in an object"},
        {"not_json", "not valid JSON: [json.exception.parse_error.101]"},
    };
    for (const Case& c : cases) {
        CAPTURE(c.index);
        const std::string path = kCk + "bad_sharded/" + c.index + ".index.json";
        const std::string m = input_error([&] { open_safetensors_index(path); });
        CHECK(m.rfind(path + ": ", 0) == 0);
        check_message(m, {c.phrase});
    }
}

TEST_CASE("safetensors: every truncation of a good file is refused, and no byte change crashes") {
    const std::string good_file = slurp(kCk + "good/multi.safetensors");
    for (std::size_t n = 0; n < good_file.size(); ++n) {
        CAPTURE(n);
        // A proper prefix never covers the data the header describes.
        CHECK_THROWS_AS(parse_safetensors(std::string_view(good_file).substr(0, n), "cut.safetensors"), InputError);
    }
    // Each byte set to a few values: refused, or read whole (every tensor).
    std::size_t accepted = 0;
    for (std::size_t at = 0; at < good_file.size(); ++at)
        for (const char v : {'\0', '"', '9', '\xff'}) {
            std::string b = good_file;
            b[at] = v;
            try {
                const auto src = parse_safetensors(b, "changed.safetensors", 1 << 20);
                for (const TensorInfo& t : src->tensors()) {
                    try {
                        const Array a = src->read(t.name, 1 << 20);
                        CHECK(a.shape == t.shape);
                    } catch (const InputError&) {  // a dtype changed to an unsupported one
                    }
                }
                ++accepted;
            } catch (const InputError&) {
            }
        }
    CHECK(accepted > 0);  // changes in the data bytes are still valid files
}

// ---- memory: mapped, only what a read allocates counts ------------------------------------

TEST_CASE("safetensors: a read over the memory limit is a MemoryLimitError; opening costs the header only") {
    const std::string path = kCk + "good/dtypes.safetensors";
    // f32 is (3, 4): 12 numbers, 96 bytes as doubles (stored in place or not, as every reader counts).
    const auto src = open_safetensors(path, 1 << 20);
    CHECK(src->read("f32", 96).count() == 12);
    check_message(memory_limit_error([&] { src->read("f32", 95); }),
                  {"dtypes.safetensors: tensor 'f32' of shape (3, 4) needs 96 bytes in memory, over the memory "
                   "limit of 95 bytes"});
    // The header's list of tensors counts too.
    check_message(memory_limit_error([&] { open_safetensors(path, 200); }),
                  {"dtypes.safetensors: the header's list of tensors needs more than the memory limit of 200 bytes"});

    // A file larger than the limit is mapped, not read: a 10 GB tensor (a sparse file) is
    // listed, and reading it is refused before anything is allocated.
    TempDir tmp;
    const std::string big = tmp / "big.safetensors";
    const std::string header = R"({"w":{"dtype":"F32","shape":[50000,50000],"data_offsets":[0,10000000000]}})";
    std::string head(8, '\0');
    for (int k = 0; k < 8; ++k) head[std::size_t(k)] = char(header.size() >> (8 * k) & 0xff);
    spit(big, head + header);
    const int fd = ::open(big.c_str(), O_WRONLY);
    REQUIRE(fd >= 0);
    const bool sparse = ::ftruncate(fd, off_t(8 + header.size() + 10'000'000'000ULL)) == 0;
    ::close(fd);
    if (!sparse) return;  // the file system cannot hold a 10 GB sparse file
    const auto huge = open_safetensors(big, 1 << 20);
    REQUIRE(huge->tensors().size() == 1);
    CHECK(huge->tensors()[0].bytes == 10'000'000'000ULL);
    check_message(memory_limit_error([&] { huge->read("w", 1 << 20); }),
                  {"tensor 'w' of shape (50000, 50000) needs 18.6 GiB in memory, over the memory limit of 1.0 MiB"});
}

// ---- the header as the reference reads it ------------------------------------------------------

namespace {
// A file of the header text `h` (its length prefixed) and `data`.
std::string st_file(const std::string& h, const std::string& data = "") {
    std::string out;
    for (int k = 0; k < 8; ++k) out += char(h.size() >> (8 * k) & 0xff);
    return out + h + data;
}
}  // namespace

TEST_CASE("safetensors: the header's framing, as the reference's serde_json::from_str reads it") {
    const std::string f4("\x00\x00\x80\x3f\x00\x00\x80\x3f", 8);  // two float32 ones
    const std::string entry = R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
    // Accepted: JSON whitespace before and after the object (the reference's own tests
    // test_whitespace_padded_header and test_whitespace_leading_padded_header, bytes as there).
    for (const std::string& h : {std::string("{}\x0D\x20\x09\x0A"), std::string("\x09\x0A{}\x0D\x20")}) {
        CAPTURE(h);
        CHECK(parse_safetensors(st_file(h), "ws.safetensors")->tensors().empty());
    }
    CHECK(parse_safetensors(st_file("\n {" + entry + "}  ", f4), "ws.safetensors")->tensors().size() == 1);
    // Refused: NUL padding, a byte-order mark, anything after the object after a NUL.
    struct Bad {
        std::string header, phrase;
    };
    const std::vector<Bad> bad = {
        {"{" + entry + "}" + std::string(6, '\0'), "the header holds a NUL byte at header offset 54"},
        {"\xEF\xBB\xBF{" + entry + "}", "the header starts with a UTF-8 byte-order mark, expected '{'"},
        {std::string("{}\0garbage", 10), "the header holds a NUL byte at header offset 2"},
        {"{}garbage", "the header is not valid JSON"},
    };
    for (const Bad& b : bad) {
        CAPTURE(b.header);
        check_message(input_error([&] { parse_safetensors(st_file(b.header, f4), "pad.safetensors"); }),
                      {"pad.safetensors: " + b.phrase});
    }
}

TEST_CASE("safetensors: keys other than dtype, shape and data_offsets are ignored, as the reference does") {
    // tensor.rs: TensorInfo derives Deserialize without deny_unknown_fields, so serde
    // ignores any other key of an entry, whatever its value.
    const auto extra = open_safetensors(kCk + "bad/extra_key.safetensors");  // {"a": {..., "crc": 1}}
    REQUIRE(extra->tensors().size() == 1);
    check_values(extra->read("a").doubles(), {1, 1, 1, 1});
    const std::string f4("\x00\x00\x80\x3f\x00\x00\x80\x3f", 8);
    const std::string h = R"({"a":{"x":{"y":[1,{"z":null}],"w":"s"},"dtype":"F32","q":[[]],"shape":[2],)"
                          R"("data_offsets":[0,8],"r":-1.5}})";
    const std::string file = st_file(h, f4);  // outlives the source: parse_safetensors keeps a view of it
    const auto nested = parse_safetensors(file, "extra.safetensors");
    REQUIRE(nested->tensors().size() == 1);
    CHECK(nested->tensors()[0].shape == std::vector<std::size_t>{2});
    check_values(nested->read("a").doubles(), {1, 1});
    // Still refused: a known key given twice, and a value of a known key of the wrong kind.
    check_message(input_error([&] {
                      parse_safetensors(st_file(R"({"a":{"q":1,"dtype":"F32","dtype":"F32","shape":[2],)"
                                                R"("data_offsets":[0,8]}})",
                                                f4),
                                        "e.safetensors");
                  }),
                  {"tensor 'a': key 'dtype' appears twice"});
}

TEST_CASE("checkpoints: a directory where a file is expected, and config.json nested 100,000 deep") {
    TempDir dir;
    const std::string good_file = slurp(kCk + "good/multi.safetensors");
    // model.safetensors.index.json that is a directory: said so, not "no checkpoint here".
    REQUIRE(::mkdir((dir / "model.safetensors.index.json").c_str(), 0755) == 0);
    spit(dir / "model.safetensors", good_file);
    check_message(input_error([&] { open_checkpoint(dir.path.string()); }),
                  {dir / "model.safetensors.index.json", ": is a directory, expected a file"});
    check_message(input_error([&] { open_checkpoint(dir / "model.safetensors.index.json"); }),
                  {dir / "model.safetensors.index.json", ": is a directory, expected a file"});
    REQUIRE(::rmdir((dir / "model.safetensors.index.json").c_str()) == 0);
    CHECK(open_checkpoint(dir.path.string()).source->tensors().size() == 5);

    // config.json of 100,000 nested arrays (200 KB): refused by its depth, no stack overflow.
    spit(dir / "config.json", std::string(100000, '[') + std::string(100000, ']'));
    check_message(input_error([&] { open_checkpoint(dir / "model.safetensors"); }),
                  {dir / "config.json", ": objects and arrays nested more than 64 deep"});
    // 64 levels are read; a NUL byte (which nlohmann's reader takes for the end) is refused.
    spit(dir / "config.json", "{\"a\": " + std::string(63, '[') + std::string(63, ']') + "}");
    CHECK(open_checkpoint(dir / "model.safetensors").config.size() == 1);
    spit(dir / "config.json", std::string("{}\0{", 4));
    check_message(input_error([&] { open_checkpoint(dir / "model.safetensors"); }),
                  {dir / "config.json", ": not valid JSON: a NUL byte at offset 2"});
}

TEST_CASE("safetensors: a file truncated by another process while mapped: one line naming it, exit 2") {
    TempDir dir;
    const std::string path = dir / "shrinks.safetensors";
    const std::size_t n = 1 << 20;  // float16 elements: 2 MiB of data, 512 pages
    spit(path, st_file(R"({"a":{"dtype":"F16","shape":[)" + std::to_string(n) + R"(],"data_offsets":[0,)" +
                           std::to_string(2 * n) + "]}}",
                       std::string(2 * n, '\0')));
    const std::string err = dir / "stderr";
    const int status = in_child([&] {
        const int fd = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        ::dup2(fd, 2);
        exit_on_changed_mappings();
        const auto src = open_safetensors(path);  // mapped, data not read
        if (::truncate(path.c_str(), 4096) != 0) return 3;
        src->read("a").doubles();  // widens every float16: touches the pages past the new end
        return 0;
    });
    CHECK(status == 2);
    CHECK(slurp(err) == "attnscope: error: " + path +
                            ": the file changed while it was read (truncated by another process?); nothing more "
                            "was read\n");
}

namespace {
// IEEE 754 binary16 (1, 5, 10 bits) and bfloat16 (1, 8, 7 bits) values from their fields,
// as the standard defines them (independent of the reader's bit manipulation).
double ieee_value(std::uint16_t b, int exp_bits, int mant_bits) {
    const int bias = (1 << (exp_bits - 1)) - 1, top = (1 << exp_bits) - 1;
    const int exp = (b >> mant_bits) & top, mant = b & ((1 << mant_bits) - 1);
    const double sign = (b >> 15) ? -1.0 : 1.0;
    if (exp == top) return mant ? std::nan("") : sign * HUGE_VAL;
    if (exp == 0) return sign * std::ldexp(double(mant), 1 - bias - mant_bits);
    return sign * std::ldexp(double(mant + (1 << mant_bits)), exp - bias - mant_bits);
}
}  // namespace

TEST_CASE("safetensors: every F16 and BF16 number, held in place, widens exactly to float and double") {
    std::string data;  // the 65,536 bit patterns in order, little-endian
    for (std::uint32_t b = 0; b < 65536; ++b) data += char(b & 0xff), data += char(b >> 8);
    const std::string header = R"({"h":{"dtype":"F16","shape":[65536],"data_offsets":[0,131072]},)"
                               R"("b":{"dtype":"BF16","shape":[65536],"data_offsets":[131072,262144]}})";
    auto bytes = std::make_shared<const std::string>(st_file(header, data + data));
    const auto src = parse_safetensors(*bytes, "all.safetensors", kNoLimit, bytes);
    // (No structured binding: clang 14 cannot capture one in CAPTURE's lambda.)
    for (const std::pair<std::string, int>& kind : {std::pair<std::string, int>{"h", 5}, {"b", 8}}) {
        const std::string& name = kind.first;
        const int exp_bits = kind.second;
        CAPTURE(name);
        const Array a = src->read(name);
        CHECK(a.held == (exp_bits == 5 ? Array::Held::float16 : Array::Held::bfloat16));
        std::vector<float> f(65536);
        std::vector<double> d(65536);
        const NonFinite nf = copy_numbers<float>(a, f.data());
        copy_numbers<double>(a, d.data());
        std::size_t nonfinite = 0;
        for (std::uint32_t b = 0; b < 65536; ++b) {
            const double want = ieee_value(std::uint16_t(b), exp_bits, 15 - exp_bits);
            if (!std::isfinite(want)) ++nonfinite;
            if (std::isnan(want)) {
                CHECK(std::isnan(f[b]));
                CHECK(std::isnan(d[b]));
                CHECK(std::isnan(a.value(b)));
                continue;
            }
            if (double(f[b]) != want || d[b] != want || a.value(b) != want || std::signbit(d[b]) != std::signbit(want))
                FAIL_CHECK("bits " << b << ": " << f[b] << ", " << d[b] << ", " << a.value(b) << " for " << want);
        }
        CHECK(nf.count == nonfinite);
    }
}
