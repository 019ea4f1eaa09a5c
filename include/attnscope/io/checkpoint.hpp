// attnscope — io layer: model checkpoints as people have them.
//
// A checkpoint is a set of named tensors in one of four containers: a `.safetensors`
// file, a sharded safetensors checkpoint (`model.safetensors.index.json` and its shards),
// a PyTorch zip state dict (`torch.save`: `.pt`, `.pth`, `pytorch_model.bin`), or a GGUF
// file (io/gguf.hpp). Opening
// one reads and validates only its directory (the safetensors header, the pickle); a
// tensor's bytes are touched only when that tensor is read, so choosing one layer of a
// multi-gigabyte file costs that layer's bytes. Knows nothing of attention: which names
// make a layer is the model layer's business (model/checkpoint_layer.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "attnscope/io/array.hpp"

namespace attnscope {

// Text shared by its copies: the file of every tensor of one file is one string (a path
// may be 4 KB long, and a file may list a million tensors). Empty by default.
class SharedText {
   public:
    SharedText() = default;
    SharedText(std::string s) : p_(std::make_shared<const std::string>(std::move(s))) {}  // NOLINT: a string
    SharedText(const char* s) : SharedText(std::string(s)) {}                             // NOLINT: a string
    const std::string& str() const { return p_ ? *p_ : empty(); }
    operator const std::string&() const { return str(); }  // NOLINT: reads as the string it is
    friend bool operator==(const SharedText& a, std::string_view b) { return a.str() == b; }

   private:
    static const std::string& empty() {
        static const std::string e;
        return e;
    }
    std::shared_ptr<const std::string> p_;
};

// One tensor of a checkpoint, as its directory describes it.
struct TensorInfo {
    std::string name;                // "model.layers.3.self_attn.q_proj.weight"
    std::string dtype;               // numpy's spelling: "float32", "float16", "bfloat16", "int64", "bool"…
    std::vector<std::size_t> shape;  // C order
    std::size_t bytes = 0;           // its data's size in the file
    SharedText file;                 // the file holding it (a shard, or the checkpoint itself)
    std::uint64_t offset = 0;        // GGUF only: where its data start in the file
};

struct GgufInfo;  // io/gguf.hpp

// The tensors of one container. Implementations: safetensors (one file or a sharded
// index) and PyTorch zip state dicts.
class TensorSource {
   public:
    virtual ~TensorSource() = default;
    // Every tensor, in the order the container lists them.
    virtual const std::vector<TensorInfo>& tensors() const = 0;
    // One tensor as an Array whose origin is "FILE: NAME". Little-endian, C-order float64,
    // float32, float16 and bfloat16 data stay in place in the mapped file (Array::Held),
    // widened exactly as they are read out; integers and bool are widened exactly to
    // double. A mapped file's pages are given back once the tensor's last copy is gone
    // (drop_mapped_pages). InputError when
    // the name is unknown (naming it) or the tensor cannot be read; MemoryLimitError before
    // allocating more than `max_bytes`.
    virtual Array read(const std::string& name, std::size_t max_bytes = kNoLimit) const = 0;
    // A GGUF file's version, alignment and metadata (io/gguf.hpp); null for the others.
    virtual const GgufInfo* gguf() const { return nullptr; }
};

// A checkpoint opened from a path given on the command line.
struct Checkpoint {
    std::string path;    // as given
    std::string format;  // "safetensors", "sharded safetensors", "torch zip", "gguf"
    std::unique_ptr<TensorSource> source;
    // config.json beside the weights (Hugging Face), parsed to its top-level members, each
    // kept as its JSON text ("12", "\"gpt2\"", "true", "null", "[...]"); empty when absent.
    std::map<std::string, std::string> config;
    std::string config_path;  // "" when there is none
};

// Opens PATH: a `.safetensors` file; a `model.safetensors.index.json`; a PyTorch zip
// (`.pt`, `.pth`, `.bin`, recognised by its zip signature); a GGUF file (`.gguf`, or
// its magic bytes "GGUF"); or a directory holding one of
// them (the index first, then `model.safetensors`, then `pytorch_model.bin`, then a lone
// `*.safetensors`). Reads `config.json` from the same directory when present. InputError,
// one line naming the path, for anything else (including PyTorch's pre-1.6 legacy format).
Checkpoint open_checkpoint(const std::string& path, std::size_t max_bytes = kNoLimit);

// The containers, for open_checkpoint() and the fuzzers. `source` names the file in
// messages; `keep`, when given, holds `bytes` alive and tensors read later may point into
// them (without it they are copied out on read and `bytes` must outlive the source).
std::unique_ptr<TensorSource> open_safetensors(const std::string& path, std::size_t max_bytes = kNoLimit);
std::unique_ptr<TensorSource> parse_safetensors(std::string_view bytes, const std::string& source,
                                                std::size_t max_bytes = kNoLimit,
                                                std::shared_ptr<const void> keep = {});
// A sharded checkpoint: the index's `weight_map` names each tensor's shard (relative to
// the index's directory); every shard is opened and checked against the map.
std::unique_ptr<TensorSource> open_safetensors_index(const std::string& index_path, std::size_t max_bytes = kNoLimit);
std::unique_ptr<TensorSource> open_torch_zip(const std::string& path, std::size_t max_bytes = kNoLimit);
std::unique_ptr<TensorSource> parse_torch_zip(std::string_view bytes, const std::string& source,
                                              std::size_t max_bytes = kNoLimit, std::shared_ptr<const void> keep = {});

}  // namespace attnscope
