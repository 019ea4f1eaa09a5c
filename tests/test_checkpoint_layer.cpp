// One layer out of a checkpoint: the presets' names, config.json's fields, TransformerLens's
// layout. The containers are tested on their own (test_safetensors.cpp, test_torch_zip.cpp)
// and end to end (tests/py/test_checkpoint.py); here a checkpoint is a table in memory.
#include <doctest/doctest.h>

#include <map>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "attnscope/base/errors.hpp"
#include "attnscope/io/checkpoint.hpp"
#include "attnscope/model/checkpoint_layer.hpp"

using namespace attnscope;

namespace {

// Tensors in memory, in the order given; counts which were read.
class TableSource : public TensorSource {
   public:
    void add(const std::string& name, std::vector<std::size_t> shape, double first = 0) {
        Array a;
        a.shape = shape;
        a.dtype = "float64";
        a.origin = "model.safetensors: " + name;
        const std::size_t n = std::accumulate(shape.begin(), shape.end(), std::size_t{1}, std::multiplies<>());
        a.values.resize(n);
        for (std::size_t k = 0; k < n; ++k) a.values[k] = first + double(k);
        arrays_[name] = a;
        info_.push_back({name, "float64", shape, n * 8, "model.safetensors"});
    }
    const std::vector<TensorInfo>& tensors() const override { return info_; }
    Array read(const std::string& name, std::size_t) const override {
        const auto it = arrays_.find(name);
        if (it == arrays_.end()) throw InputError("model.safetensors: no tensor '" + name + "'");
        reads.push_back(name);
        return it->second;
    }
    mutable std::vector<std::string> reads;

   private:
    std::map<std::string, Array> arrays_;
    std::vector<TensorInfo> info_;
};

struct Fixture {
    Checkpoint c;
    TableSource* table;
    Fixture() {
        auto t = std::make_unique<TableSource>();
        table = t.get();
        c.path = "model.safetensors";
        c.format = "safetensors";
        c.source = std::move(t);
    }
    void config(std::map<std::string, std::string> cfg) {
        c.config = std::move(cfg);
        c.config_path = "config.json";
    }
};

std::string message_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST_CASE("checkpoint layer: gpt2 splits c_attn into Q, K, V columns and reads only the chosen layer") {
    Fixture f;
    const std::size_t dm = 4;
    for (int n = 0; n < 3; ++n) {
        const std::string p = "transformer.h." + std::to_string(n) + ".attn.";
        f.table->add(p + "c_attn.weight", {dm, 3 * dm}, 100.0 * n);
        f.table->add(p + "c_attn.bias", {3 * dm}, 1000.0 * n);
        f.table->add(p + "c_proj.weight", {dm, dm});
        f.table->add(p + "c_proj.bias", {dm});
        f.table->add(p + "bias", {1, 1, 8, 8});  // the causal-mask buffer of older checkpoints: not a weight
    }
    f.table->add("transformer.wte.weight", {10, dm});
    f.config({{"model_type", "\"gpt2\""}, {"n_head", "2"}, {"n_embd", "4"}});
    LayerRequest r;
    r.layer = 1;
    const CheckpointLayer l = choose_layer(f.c, r);
    CHECK(l.preset == "gpt2");
    CHECK(l.prefix == "transformer.h.1.attn.");
    CHECK(l.layers == 3);
    CHECK(l.layout == Layout::math);
    CHECK(l.config.heads == 2u);
    CHECK(l.config.causal == true);
    // W_K[r][c] = c_attn[r][dm + c]; c_attn holds 100 + k at flat index k.
    const Array& wk = l.arrays.at("W_K");
    REQUIRE(wk.shape == std::vector<std::size_t>{dm, dm});
    for (std::size_t row = 0; row < dm; ++row)
        for (std::size_t col = 0; col < dm; ++col)
            CHECK(wk.value(row * dm + col) == 100.0 + double(row * 3 * dm + dm + col));
    CHECK(l.arrays.at("b_V").value(0) == 1000.0 + 2 * dm);
    CHECK(l.arrays.count("W_O") == 1);
    for (const auto& name : f.table->reads) CHECK(name.rfind("transformer.h.1.attn.c_", 0) == 0);

    // Several layers and none chosen: refused, naming them.
    CHECK(message_of([&] { choose_layer(f.c, LayerRequest{}); }) ==
          "model.safetensors: holds 3 layers (0–2); choose one with layer");
    r.layer = 7;
    CHECK(message_of([&] { choose_layer(f.c, r); }) == "model.safetensors: no layer 7 (it holds 3 layers (0–2))");
}

TEST_CASE("checkpoint layer: llama family reads GQA, head_dim, RoPE and each family's window rule") {
    Fixture f;
    for (int n = 0; n < 4; ++n) {
        const std::string p = "model.layers." + std::to_string(n) + ".self_attn.";
        f.table->add(p + "q_proj.weight", {8, 4});
        f.table->add(p + "k_proj.weight", {4, 4});
        f.table->add(p + "v_proj.weight", {4, 4});
        f.table->add(p + "o_proj.weight", {4, 8});
        f.table->add(p + "q_proj.bias", {8});
    }
    f.config({{"model_type", "\"qwen2\""},
              {"num_attention_heads", "4"},
              {"num_key_value_heads", "2"},
              {"hidden_size", "4"},
              {"head_dim", "2"},
              {"rope_theta", "1000000.0"},
              {"partial_rotary_factor", "1.0"},
              {"use_sliding_window", "true"},
              {"sliding_window", "16"},
              {"max_window_layers", "2"},
              {"rope_scaling", "null"}});
    LayerRequest r;
    r.layer = 1;
    CheckpointLayer l = choose_layer(f.c, r);
    CHECK(l.preset == "qwen2");
    CHECK(l.layout == Layout::torch);
    CHECK(l.config.heads == 4u);
    CHECK(l.config.kv_heads == 2u);
    CHECK(l.config.head_dim == 2u);
    REQUIRE(l.config.rope);
    CHECK(l.config.rope->base == 1e6);
    CHECK_FALSE(l.config.window);  // Qwen2 slides only from max_window_layers on
    CHECK(l.arrays.count("b_Q") == 1);
    CHECK(l.arrays.count("b_K") == 0);
    r.layer = 2;
    CHECK(choose_layer(f.c, r).config.window == 16u);

    // A per-layer list wins over the family's rule.
    f.c.config["layer_types"] = R"(["full_attention", "sliding_attention", "full_attention", "full_attention"])";
    r.layer = 1;
    CHECK(choose_layer(f.c, r).config.window == 16u);
    r.layer = 2;
    CHECK_FALSE(choose_layer(f.c, r).config.window);
    f.c.config.erase("layer_types");

    // Partial rotation: R = head_dim × factor features.
    f.c.config["model_type"] = "\"llama\"";
    f.c.config["head_dim"] = "8";
    f.c.config["partial_rotary_factor"] = "0.5";
    l = choose_layer(f.c, r);
    CHECK(l.config.rope->dim == 4u);
    f.c.config["partial_rotary_factor"] = "0.3";
    CHECK(message_of([&] { choose_layer(f.c, r); }) ==
          "config.json: partial_rotary_factor: 0.3 × head_dim 8 is not an even number of features");
    f.c.config["partial_rotary_factor"] = "1";
    f.c.config["rope_scaling"] = R"({"rope_type": "llama3", "factor": 8.0})";
    CHECK(message_of([&] { choose_layer(f.c, r); }) ==
          "config.json: rope_scaling.low_freq_factor: missing (rope_type llama3 needs it)");
    f.c.config["rope_scaling"] = R"({"rope_type": "wavy"})";
    CHECK(message_of([&] { choose_layer(f.c, r); }) ==
          "config.json: rope_scaling: rope_type 'wavy' is not a RoPE scaling attnscope follows (default, linear, "
          "dynamic, yarn, longrope, su, llama3)");
}

TEST_CASE("checkpoint layer: without config.json a preset must be named; mha and prefix leave heads to the user") {
    Fixture f;
    f.table->add("encoder.layers.0.self_attn.in_proj_weight", {12, 4});
    f.table->add("encoder.layers.0.self_attn.in_proj_bias", {12});
    f.table->add("encoder.layers.0.self_attn.out_proj.weight", {4, 4});
    f.table->add("encoder.layers.0.self_attn.out_proj.bias", {4});
    f.table->add("encoder.layers.0.linear1.weight", {16, 4});
    {
        Fixture llama;  // Llama's names: the preset needs config.json's RoPE and K/V heads
        llama.table->add("model.layers.0.self_attn.q_proj.weight", {4, 4});
        CHECK(message_of([&] { choose_layer(llama.c, LayerRequest{}); }) ==
              "model.safetensors: no config.json beside it to choose a preset; give preset (gpt2, bert, llama, "
              "mistral, qwen2, qwen3, gpt_neox, gemma, gemma2, gemma3_text, phi3, mixtral, mha, tl) or prefix");
    }
    CHECK(choose_layer(f.c, LayerRequest{}).preset == "mha");  // nn.MultiheadAttention's names need no config
    LayerRequest r;
    r.preset = "mha";
    const CheckpointLayer l = choose_layer(f.c, r);
    CHECK(l.prefix == "encoder.layers.0.self_attn.");
    CHECK_FALSE(l.config.heads);  // a state dict does not record it
    CHECK(l.arrays.size() == 4);
    CHECK(l.arrays.count("in_proj_weight") == 1);

    LayerRequest p;
    p.prefix = "encoder.layers.0.self_attn.";
    const CheckpointLayer byprefix = choose_layer(f.c, p);
    CHECK(byprefix.preset == "prefix");
    CHECK_FALSE(byprefix.layout_fixed);
    CHECK(byprefix.arrays.size() == 4);
    p.prefix = "decoder.";
    CHECK(message_of([&] { choose_layer(f.c, p); }) == "model.safetensors: no tensor's name begins with 'decoder.'");
    r.preset = "gpt3";
    CHECK(message_of([&] { choose_layer(f.c, r); }) ==
          "preset gpt3: unknown (presets: auto, gpt2, bert, llama, mistral, qwen2, qwen3, gpt_neox, gemma, gemma2, "
          "gemma3_text, phi3, mixtral, mha, tl)");
    f.config({{"model_type", "\"t5\""}});
    CHECK(message_of([&] { choose_layer(f.c, LayerRequest{}); }) ==
          "config.json: model_type 't5' has no preset (presets: gpt2, bert, llama, mistral, qwen2, qwen3, gpt_neox, "
          "gemma, gemma2, gemma3_text, phi3, mixtral, mha, tl); name the layer's weights with prefix");
}

TEST_CASE("checkpoint layer: TransformerLens's (H, Dm, Dk) weights become the math layout") {
    Bundle b;
    b.source = "tl.npz";
    auto put = [&](const std::string& name, std::vector<std::size_t> shape) {
        Array a;
        a.shape = shape;
        a.origin = "tl.npz: " + name;
        a.dtype = "float64";
        const std::size_t n = std::accumulate(shape.begin(), shape.end(), std::size_t{1}, std::multiplies<>());
        for (std::size_t k = 0; k < n; ++k) a.values.push_back(double(k));
        b.arrays[name] = a;
    };
    const std::size_t H = 2, dm = 3, dk = 4;
    for (const char* n : {"W_Q", "W_K", "W_V"}) put(n, {H, dm, dk});
    put("W_O", {H, dk, dm});
    put("b_Q", {H, dk});
    put("b_O", {dm});
    CHECK(convert_tl_layout(b) == H);
    const Array& wq = b.arrays.at("W_Q");
    REQUIRE(wq.shape == std::vector<std::size_t>{dm, H * dk});
    for (std::size_t h = 0; h < H; ++h)
        for (std::size_t i = 0; i < dm; ++i)
            for (std::size_t d = 0; d < dk; ++d)
                CHECK(wq.value(i * H * dk + h * dk + d) == double((h * dm + i) * dk + d));
    CHECK(b.arrays.at("W_O").shape == std::vector<std::size_t>{H * dk, dm});
    CHECK(b.arrays.at("b_Q").shape == std::vector<std::size_t>{H * dk});

    put("W_Q", {H, dm, dk});
    put("W_K", {3, dm, dk});
    CHECK(message_of([&] { convert_tl_layout(b); }) ==
          "tl.npz: W_K: layout tl: expected (2, Din, D) (H from W_Q), found (3, 3, 4)");
}

TEST_CASE("checkpoint layer: one nn.TransformerEncoderLayer saved alone is the mha preset's, at self_attn.") {
    Fixture f;
    f.table->add("self_attn.in_proj_weight", {12, 4});
    f.table->add("self_attn.in_proj_bias", {12});
    f.table->add("self_attn.out_proj.weight", {4, 4});
    f.table->add("self_attn.out_proj.bias", {4});
    f.table->add("linear1.weight", {16, 4});
    f.table->add("norm1.weight", {4});
    const CheckpointLayer l = choose_layer(f.c, LayerRequest{});
    CHECK(l.preset == "mha");
    CHECK(l.prefix == "self_attn.");
    CHECK_FALSE(l.layer);
    CHECK(l.layers == 1);
    CHECK(l.layout == Layout::torch);
    CHECK(l.arrays.size() == 4);
    LayerRequest r;
    r.layer = 0;
    CHECK(message_of([&] { choose_layer(f.c, r); }) ==
          "layer 0: model.safetensors holds one layer, saved alone (self_attn., no number); drop layer");

    const CheckpointOverview ov = describe_checkpoint(f.c);
    CHECK(ov.preset == "mha");
    CHECK(ov.preset_note == "its tensors' names");
    REQUIRE(ov.groups.size() == 1);
    REQUIRE(ov.groups[0].attention);
    CHECK(ov.groups[0].attention->prefix == "self_attn.");
    CHECK(run_command(f.c, ov, *ov.groups[0].attention) ==
          std::vector<std::string>{"attnscope", "run", "BUNDLE", "{checkpoint}", "model.safetensors", "{heads}", "H"});
    // With {prefix}, the names are the prefix's, as before: no preset is taken from them.
    LayerRequest p;
    p.prefix = "self_attn.";
    CHECK(choose_layer(f.c, p).preset == "prefix");
}

TEST_CASE("checkpoint layer: config.json's values that do not fit are named by their key, not as options") {
    Fixture f;
    for (const char* w : {"q_proj", "k_proj", "v_proj", "o_proj"})
        f.table->add(std::string("model.layers.0.self_attn.") + w + ".weight", {8, 8});
    f.config({{"model_type", "\"llama\""}, {"num_attention_heads", "2"}, {"rope_theta", "0"}});
    CHECK(message_of([&] { choose_layer(f.c, LayerRequest{}); }) ==
          "config.json: rope_theta 0: expected a finite number above 1");
    f.c.config["rope_theta"] = "500000";
    f.c.config["num_key_value_heads"] = "4";
    CHECK(message_of([&] { choose_layer(f.c, LayerRequest{}); }) ==
          "config.json: num_key_value_heads 4: does not divide num_attention_heads 2 (each K/V head serves H/G "
          "query heads)");
    f.c.config["num_key_value_heads"] = "1";
    f.c.config["num_attention_heads"] = "3";
    CHECK(message_of([&] { choose_layer(f.c, LayerRequest{}); }) ==
          "config.json: num_attention_heads 3: does not divide the 8 output features of model.layers.0.self_attn.'s "
          "W_Q (heads split them evenly)");
    f.c.config["num_attention_heads"] = "2";
    CHECK(choose_layer(f.c, LayerRequest{}).config.kv_heads == 1u);
}

TEST_CASE("checkpoint layer: TransformerLens weights with no element are refused, however large their axes") {
    for (const std::vector<std::size_t>& shape :
         {std::vector<std::size_t>{1, std::size_t{1} << 62, 0}, std::vector<std::size_t>{std::size_t{1} << 40, 8, 0}}) {
        CAPTURE(shape_str(shape));
        Bundle b;
        b.source = "tl.npz";
        for (const char* n : {"W_Q", "W_K", "W_V"}) {
            Array a;
            a.shape = shape;
            a.dtype = "float64";
            a.origin = std::string("tl.npz: ") + n;
            b.arrays[n] = a;
        }
        CHECK(message_of([&] { convert_tl_layout(b); }) ==
              "tl.npz: W_Q: layout tl: shape " + shape_str(shape) +
                  " holds no element (expected weights with no axis of size 0)");
    }
}
