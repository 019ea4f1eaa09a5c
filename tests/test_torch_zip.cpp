// PyTorch zip state dicts (torch.save): the reader's tensors against PyTorch's own reading.
// Fixtures under tests/fixtures/checkpoints/ are written by scripts/make_torch_fixtures.py
// with Debian's PyTorch 1.13 (torch.save) or, for forms torch 1.13 does not write, by a
// Python pickle writer and zipfile; beside each good file, NAME.expected/ holds the
// tensors' names, dtypes and shapes (manifest.json) and their values as float64 .npy
// files, as torch.load reads them. Nothing is compared with the code under test.
#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "attnscope/base/errors.hpp"
#include "attnscope/io/checkpoint.hpp"
#include "attnscope/io/read.hpp"
#include "test_util.hpp"

using namespace attnscope;
using namespace testutil;

namespace {

const std::string kCheckpoints = kFixtures + "checkpoints/";
std::string checkpoint(const std::string& name) { return kCheckpoints + name; }

// The file the hostile fixtures' pickles would create if anything ran them.
const char* const kMarker = "/tmp/attnscope-torch-fixture-marker-must-not-exist";

struct Expected {
    std::string name, dtype;
    std::vector<std::size_t> shape;
};

std::vector<Expected> manifest(const std::string& file) {
    const std::string dir = checkpoint(file.substr(0, file.rfind('.')) + ".expected/");
    const nlohmann::json j = nlohmann::json::parse(slurp(dir + "manifest.json"));
    std::vector<Expected> out;
    for (const auto& t : j.at("tensors"))
        out.push_back({t.at("name").get<std::string>(), t.at("dtype").get<std::string>(),
                       t.at("shape").get<std::vector<std::size_t>>()});
    return out;
}

std::vector<double> expected_values(const std::string& file, const std::string& tensor) {
    const std::string dir = checkpoint(file.substr(0, file.rfind('.')) + ".expected/");
    return load_array(dir + tensor + ".npy", tensor).doubles();
}

// The file's bytes, kept alive by the returned pointer (as a mapped file would be).
std::shared_ptr<const std::string> bytes_of(const std::string& path) {
    return std::make_shared<const std::string>(slurp(path));
}

bool inside(const Array& a, const std::string& bytes) {
    return a.stored.data() >= bytes.data() && a.stored.data() + a.stored.size() <= bytes.data() + bytes.size();
}

void check_one_line(const std::string& message) {
    CHECK_MESSAGE(message.find('\n') == std::string::npos, message);
    CHECK(!message.empty());
}

const char* const kGood[] = {"torch_mha.pt",        "torch_gpt2.pt",     "torch_llama.pt",    "torch_dtypes.pt",
                             "torch_views.pt",      "torch_nested.pt",   "torch_metadata.pt", "torch_protocol4.pt",
                             "torch_parameters.pt", "torch_deflated.pt", "torch_v3.pt"};

}  // namespace

TEST_CASE("torch zip: every tensor's name, dtype, shape and values are torch.load's") {
    for (const char* file : kGood) {
        CAPTURE(file);
        const std::string path = checkpoint(file);
        const std::unique_ptr<TensorSource> src = open_torch_zip(path);
        const std::vector<Expected> want = manifest(file);
        const std::vector<TensorInfo>& got = src->tensors();
        REQUIRE(got.size() == want.size());
        for (std::size_t i = 0; i < got.size(); ++i) {
            CAPTURE(want[i].name);
            CHECK(got[i].name == want[i].name);
            CHECK(got[i].dtype == want[i].dtype);
            CHECK(got[i].shape == want[i].shape);
            CHECK(got[i].file == path);
            const Array a = src->read(got[i].name);
            CHECK(a.shape == want[i].shape);
            CHECK(a.dtype == want[i].dtype);
            CHECK(a.origin == path + ": " + got[i].name);
            check_values(a.doubles(), expected_values(file, want[i].name));
        }
    }
}

TEST_CASE("torch zip: the names of a GPT-2-like, a Llama-like and an nn.MultiheadAttention state dict") {
    auto names = [](const std::string& file) {
        std::vector<std::string> out;
        const std::unique_ptr<TensorSource> src = open_torch_zip(checkpoint(file));
        for (const TensorInfo& t : src->tensors()) out.push_back(t.name);
        return out;
    };
    CHECK(names("torch_mha.pt") ==
          std::vector<std::string>{"in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"});
    const std::vector<std::string> gpt2 = names("torch_gpt2.pt");
    REQUIRE(gpt2.size() == 29);
    CHECK(gpt2.front() == "transformer.wte.weight");
    CHECK(gpt2[4] == "transformer.h.0.attn.c_attn.weight");
    CHECK(gpt2.back() == "lm_head.weight");
    const std::vector<std::string> llama = names("torch_llama.pt");
    REQUIRE(llama.size() == 26);
    CHECK(llama[1] == "model.layers.0.self_attn.q_proj.weight");
    CHECK(llama[2] == "model.layers.0.self_attn.k_proj.weight");
    const std::unique_ptr<TensorSource> src = open_torch_zip(checkpoint("torch_llama.pt"));
    CHECK(src->tensors()[2].dtype == "bfloat16");
    CHECK(src->tensors()[2].shape == std::vector<std::size_t>{4, 8});
    CHECK(src->tensors()[2].bytes == 4 * 8 * 2);
    const Array k = src->read(src->tensors()[2].name);  // held as stored, widened as read out
    CHECK(k.held == Array::Held::bfloat16);
    CHECK(k.values.empty());
    CHECK(k.count() == 4 * 8);
}

TEST_CASE("torch zip: contiguous float32 and float64 stay in place in the file's bytes; views are gathered") {
    const auto bytes = bytes_of(checkpoint("torch_views.pt"));
    const std::unique_ptr<TensorSource> src = parse_torch_zip(*bytes, "views.pt", kNoLimit, bytes);
    // torch.save aligns each storage member to 64 bytes: the data is used where it lies.
    for (const char* name : {"weight", "row", "narrow", "scalar"}) {
        CAPTURE(name);
        const Array a = src->read(name);
        CHECK(a.held == Array::Held::float32);
        CHECK(inside(a, *bytes));
        CHECK(a.keep == bytes);
    }
    // "row" is w[1]: its bytes start 4 floats into the weight's storage.
    CHECK(src->read("row").stored.data() == src->read("weight").stored.data() + 16);
    // Transposed, a column, an expanded row: gathered into C order, still float32/float64.
    for (const char* name : {"transposed", "column", "expanded"}) {
        CAPTURE(name);
        const Array a = src->read(name);
        CHECK(a.held == Array::Held::float32);
        CHECK(!inside(a, *bytes));
    }
    CHECK(src->read("f64_transposed").held == Array::Held::float64);
    const Array t = src->read("transposed");
    CHECK(t.shape == std::vector<std::size_t>{4, 3});
    check_values(t.doubles(), {-2, 0, 2, -1.5, 0.5, 2.5, -1, 1, 3, -0.5, 1.5, 3.5});  // (w * 0.5 - 2).T, by hand
    // Integers are widened to double, gathered the same way.
    const Array i = src->read("i64_transposed");
    CHECK(i.held == Array::Held::doubles);
    check_values(i.doubles(), {0, 3, 1, 4, 2, 5});

    // Without `keep` the bytes may die after the call: reads copy.
    const std::unique_ptr<TensorSource> copied = parse_torch_zip(*bytes, "views.pt");
    const Array w = copied->read("weight");
    CHECK(w.held == Array::Held::float32);
    CHECK(!inside(w, *bytes));
    check_values(w.doubles(), src->read("weight").doubles());
}

TEST_CASE("torch zip: tied weights read from the one storage they share") {
    const auto bytes = bytes_of(checkpoint("torch_gpt2.pt"));
    const std::unique_ptr<TensorSource> src = parse_torch_zip(*bytes, "gpt2.pt", kNoLimit, bytes);
    const Array wte = src->read("transformer.wte.weight"), head = src->read("lm_head.weight");
    CHECK(inside(wte, *bytes));
    CHECK(wte.stored.data() == head.stored.data());
    CHECK(wte.shape == std::vector<std::size_t>{11, 8});
    check_values(head.doubles(), expected_values("torch_gpt2.pt", "transformer.wte.weight"));
}

TEST_CASE("torch zip: nested dicts are flattened with dots, lists by index; other leaves are skipped") {
    const std::unique_ptr<TensorSource> src = open_torch_zip(checkpoint("torch_nested.pt"));
    std::set<std::string> names;
    for (const TensorInfo& t : src->tensors()) names.insert(t.name);
    CHECK(names.count("model.transformer.h.0.attn.c_attn.weight"));
    CHECK(names.count("model.lm_head.weight"));
    CHECK(names.count("optimizer.state.0.step"));  // an integer key
    CHECK(names.count("optimizer.state.0.exp_avg"));
    CHECK(names.count("extras.0"));
    CHECK(names.count("extras.1"));
    // epoch, run, lr, done, nothing, param_groups: not tensors, not listed
    for (const char* leaf : {"epoch", "run", "lr", "done", "nothing", "optimizer.param_groups.0.lr"})
        CHECK(!names.count(leaf));
    CHECK(names.size() == 21);
    // An OrderedDict's _metadata (set by module.state_dict(), or by hand) is not a tensor.
    std::vector<std::string> meta;
    const std::unique_ptr<TensorSource> metadata = open_torch_zip(checkpoint("torch_metadata.pt"));
    for (const TensorInfo& t : metadata->tensors()) meta.push_back(t.name);
    CHECK(meta == std::vector<std::string>{"encoder.weight", "encoder.bias"});
}

TEST_CASE("torch zip: a deflated archive reads like the stored one") {
    const auto bytes = bytes_of(checkpoint("torch_deflated.pt"));
    const std::unique_ptr<TensorSource> src = parse_torch_zip(*bytes, "deflated.pt", kNoLimit, bytes);
    const Array w = src->read("weight");
    CHECK(w.held == Array::Held::float32);
    CHECK(!inside(w, *bytes));  // in its own inflated buffer
    check_values(w.doubles(), expected_values("torch_views.pt", "weight"));
}

TEST_CASE("torch zip: opening reads the directory and the pickle only; a storage's bytes are checked on read") {
    // Flip a byte of the first storage's data: open lists every tensor; reading a tensor
    // of that storage finds the CRC-32 mismatch, reading another does not.
    std::string bytes = slurp(checkpoint("torch_mha.pt"));
    const std::size_t name_at = bytes.find("torch_mha/data/0");
    REQUIRE(name_at != std::string::npos);
    const std::size_t header = name_at - 30;
    REQUIRE(bytes.compare(header, 4, "PK\x03\x04") == 0);
    const std::size_t data = header + 30 +
                             std::size_t(std::uint8_t(bytes[header + 26]) | std::uint8_t(bytes[header + 27]) << 8) +
                             std::size_t(std::uint8_t(bytes[header + 28]) | std::uint8_t(bytes[header + 29]) << 8);
    bytes[data + 5] = char(bytes[data + 5] ^ 0x40);
    const std::unique_ptr<TensorSource> src = parse_torch_zip(bytes, "mha.pt");
    CHECK(src->tensors().size() == 4);
    check_values(src->read("out_proj.bias").doubles(), expected_values("torch_mha.pt", "out_proj.bias"));
    const std::string e = input_error([&] { src->read("in_proj_weight"); });
    check_message(e, {"mha.pt", "CRC-32 mismatch"});
}

TEST_CASE("torch zip: the memory limit holds for reading a tensor and for the pickle") {
    const std::string path = checkpoint("torch_gpt2.pt");
    const std::unique_ptr<TensorSource> src = open_torch_zip(path, std::size_t{1} << 20);
    // wte is (11, 8): 704 bytes as doubles.
    CHECK_NOTHROW(src->read("transformer.wte.weight", 704));
    const std::string e = memory_limit_error([&] { src->read("transformer.wte.weight", 703); });
    check_message(e, {path, "transformer.wte.weight", "(11, 8)", "memory limit"});
    check_one_line(e);
    const std::string p = memory_limit_error([&] { open_torch_zip(path, 1000); });
    check_message(p, {path, "pickle", "memory limit"});
    // One tensor listed 20000 times by memo references: a 40 KB pickle whose listing
    // would take megabytes is refused under a 3 MiB limit, read whole without one.
    const std::string many = checkpoint("torch_bad_many_names.pt");
    check_message(memory_limit_error([&] { open_torch_zip(many, std::size_t{3} << 20); }),
                  {many, "listing its tensors", "memory limit"});
    CHECK(open_torch_zip(many)->tensors().size() == 20000);
    // Unknown names are refused by name.
    check_message(input_error([&] { src->read("transformer.wte.bias"); }), {path, "no tensor 'transformer.wte.bias'"});
}

TEST_CASE("torch zip: hostile and broken files are refused with one line, and nothing they name runs") {
    std::remove(kMarker);
    struct Case {
        const char* file;
        std::vector<std::string> phrases;
    };
    const std::vector<Case> cases = {
        {"torch_bad_os_system.pt", {"not a plain tensor state dict", "it references posix.system"}},
        {"torch_bad_eval.pt", {"not a plain tensor state dict", "it references builtins.eval"}},
        {"torch_bad_module.pt", {"it references __main__.TinyModel", "state_dict()"}},
        {"torch_bad_offset.pt",
         {"tensor 'x' of shape (3, 4), stride (4, 1) at offset 11", "reaches past the end of storage 'data/0'",
          "holds 12 float32 elements"}},
        {"torch_bad_stride.pt", {"stride (5, 1)", "reaches past the end of storage 'data/0'"}},
        {"torch_bad_truncated.pt", {"storage 'data/0' holds 40 bytes", "12 float32 elements (48 bytes)", "truncated"}},
        {"torch_bad_missing_storage.pt", {"tensor 'x' needs storage member 'torch_bad_missing_storage/data/0'"}},
        {"torch_bad_huge_shape.pt", {"tensor 'x' has shape (1099511627776, 1099511627776)", "more elements than"}},
        {"torch_bad_huge_storage.pt", {"storage 'data/0' holds 48 bytes", "4611686018427387904 float32 elements"}},
        {"torch_bad_deep.pt", {"not a plain tensor state dict", "nested more than 64 deep"}},
        {"torch_bad_cycle.pt", {"a list contains itself (reached again at 'x.0')"}},
        {"torch_bad_big_endian.pt", {"big-endian"}},
        {"torch_bad_no_pickle.pt", {"without ARCHIVE/data.pkl"}},
    };
    for (const Case& c : cases) {
        CAPTURE(c.file);
        const std::string path = checkpoint(c.file);
        const std::string e = input_error([&] { open_torch_zip(path, std::size_t{64} << 20); });
        check_message(e, c.phrases);
        CHECK(e.rfind(path + ": ", 0) == 0);
        check_one_line(e);
        // The same through open_checkpoint, which picks the reader by the zip signature.
        CHECK(input_error([&] { open_checkpoint(path); }) == e);
    }
    CHECK_MESSAGE(!std::filesystem::exists(kMarker), "a hostile pickle ran: " << kMarker << " exists");
    // The legacy (pre-1.6) format is no zip: open_checkpoint refuses it by its signature.
    const std::string legacy = checkpoint("torch_bad_legacy.pt");
    const std::string e = input_error([&] { open_checkpoint(legacy); });
    check_message(e, {legacy, "legacy (pre-1.6) format"});
    check_one_line(e);
}

TEST_CASE("torch zip: open_checkpoint knows a .pt by its zip signature") {
    const Checkpoint c = open_checkpoint(checkpoint("torch_mha.pt"));
    CHECK(c.format == "torch zip");
    REQUIRE(c.source);
    CHECK(c.source->tensors().size() == 4);
}

TEST_CASE("torch zip: every hand-made hostile file of the fuzz regressions is refused with one line") {
    // Opcodes a state dict does not use, memo and stack misuse, calls of the wrong thing,
    // shared containers, names twice, too many names for a 1 MiB limit: each refused by
    // name, none crashing.
    const std::string dir = std::string(ATTNSCOPE_SOURCE_DIR) + "/tests/fuzz/regressions/fuzz_torch/";
    std::size_t files = 0;
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
        const std::string path = entry.path().string();
        if (entry.path().extension() != ".pt") continue;
        CAPTURE(path);
        ++files;
        const std::string e = input_error([&] { open_torch_zip(path, std::size_t{1} << 20); });
        MESSAGE(e);
        CHECK(e.rfind(path + ": ", 0) == 0);
        check_one_line(e);
    }
    CHECK(files >= 25);
}
