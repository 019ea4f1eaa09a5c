// Opening a checkpoint by path: which container it is, and the config.json beside it.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>

#include "attnscope/base/errors.hpp"
#include "attnscope/io/checkpoint.hpp"
#include "attnscope/io/gguf.hpp"
#include "attnscope/io/read.hpp"
#include "bytes.hpp"
#include "json_doc.hpp"

namespace attnscope {
namespace {

using io_detail::shown;
using io_detail::shown_path;

// The largest config.json read: real ones are a few KiB.
constexpr std::size_t kMaxConfigBytes = 16u << 20;

bool is_dir(const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool is_file(const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string dir_of(const std::string& path) {
    const auto slash = path.find_last_of('/');
    if (slash == std::string::npos) return ".";
    return slash == 0 ? "/" : path.substr(0, slash);
}

std::string join(const std::string& dir, const std::string& name) {
    return dir.empty() || dir.back() == '/' ? dir + name : dir + "/" + name;
}

// The first bytes of a file (fewer when it is shorter), for telling containers apart.
std::string head_of(const std::string& path, std::size_t n) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw InputError(shown_path(path) + ": cannot open file: " + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) == 0) try {
            io_detail::refuse_device(fd, st, path);
        } catch (...) {
            ::close(fd);
            throw;
        }
    std::string out(n, '\0');
    std::size_t got = 0;
    while (got < n) {
        const ssize_t r = ::read(fd, out.data() + got, n - got);
        if (r <= 0) break;
        got += std::size_t(r);
    }
    ::close(fd);
    out.resize(got);
    return out;
}

// A checkpoint file's name that is a directory: refused by name (else it would be
// searched as a checkpoint directory, or passed over as missing).
void refuse_directory(const std::string& path) {
    if (is_dir(path)) throw InputError(shown_path(path) + ": is a directory, expected a file");
}

// The file of a checkpoint directory: the sharded index first, then the single files.
std::string pick_in_directory(const std::string& dir) {
    for (const char* name : {"model.safetensors.index.json", "model.safetensors", "pytorch_model.bin"}) {
        refuse_directory(join(dir, name));
        if (is_file(join(dir, name))) return join(dir, name);
    }
    std::string lone;
    int count = 0;
    if (DIR* d = ::opendir(dir.c_str())) {
        while (const dirent* e = ::readdir(d)) {
            const std::string name = e->d_name;
            if (ends_with(name, ".safetensors") && is_file(join(dir, name))) {
                ++count;
                lone = join(dir, name);
            }
        }
        ::closedir(d);
    }
    if (count == 1) return lone;
    if (count > 1)
        throw InputError(shown_path(dir) +
                         ": holds several .safetensors files and no model.safetensors.index.json; name the file");
    throw InputError(shown_path(dir) +
                     ": no checkpoint here (expected model.safetensors.index.json, model.safetensors, "
                     "pytorch_model.bin or one .safetensors file)");
}

// config.json's top-level members, each as its JSON text. Bounded as every JSON input:
// its nesting, and its tree with its text within the memory limit.
std::map<std::string, std::string> read_config(const std::string& path, std::size_t max_bytes) {
    const FileBytes file = map_file(path, std::min(max_bytes, kMaxConfigBytes));
    const nlohmann::json j =
        io_detail::parse_json_document<nlohmann::json>(file.bytes, shown_path(path), max_bytes, false);
    if (!j.is_object()) throw InputError(shown_path(path) + ": expected a JSON object, found " + j.type_name());
    std::map<std::string, std::string> out;
    for (const auto& [key, value] : j.items()) out[key] = value.dump();
    return out;
}

// Which container a file is: by its name, then by checks that cannot collide. A GGUF
// file starts with "GGUF"; a safetensors header is a JSON object right after the 8-byte
// length (JSON whitespace may come first); a torch zip starts with a zip signature; a legacy torch file with a pickle's
// PROTO opcode (0x80), which is also the low byte of any safetensors header length
// 128 + 256k, so it is named only when the file is neither of the others.
enum class Container { safetensors, torch_zip, legacy_torch, gguf };
Container container_of(const std::string& file) {
    if (ends_with(file, ".safetensors")) return Container::safetensors;
    if (ends_with(file, ".gguf")) return Container::gguf;
    const std::string head = head_of(file, 64);
    if (head.compare(0, 4, "GGUF") == 0) return Container::gguf;
    const auto at = [&](std::size_t i) { return i < head.size() ? static_cast<unsigned char>(head[i]) : 0u; };
    if (head.compare(0, 4, "PK\x03\x04") == 0) return Container::torch_zip;
    std::size_t i = 8;
    while (at(i) == ' ' || at(i) == '\t' || at(i) == '\n' || at(i) == '\r') ++i;
    if (at(i) == '{') return Container::safetensors;
    if (at(0) == 0x80 && at(1) >= 2 && at(1) <= 5) return Container::legacy_torch;
    return Container::safetensors;  // its reader says what is wrong
}

}  // namespace

Checkpoint open_checkpoint(const std::string& path, std::size_t max_bytes) {
    Checkpoint c;
    c.path = path;
    const bool named_as_file = ends_with(path, ".json") || ends_with(path, ".safetensors") || ends_with(path, ".bin") ||
                               ends_with(path, ".pt") || ends_with(path, ".pth") || ends_with(path, ".gguf");
    if (named_as_file) refuse_directory(path);
    const std::string file = is_dir(path) ? pick_in_directory(path) : path;
    if (ends_with(file, ".json")) {
        c.format = "sharded safetensors";
        c.source = open_safetensors_index(file, max_bytes);
    } else {
        switch (container_of(file)) {
            case Container::torch_zip:
                c.format = "torch zip";
                c.source = open_torch_zip(file, max_bytes);
                break;
            case Container::legacy_torch:
                throw InputError(shown_path(file) +
                                 ": a PyTorch file in the legacy (pre-1.6) format; re-save it with torch.save "
                                 "(the zip format) or as .safetensors");
            case Container::gguf:
                c.format = "gguf";
                c.source = open_gguf(file, max_bytes);
                break;
            case Container::safetensors:
                c.format = "safetensors";
                c.source = open_safetensors(file, max_bytes);
                break;
        }
    }
    const std::string config = join(dir_of(file), "config.json");
    if (is_file(config)) {
        c.config = read_config(config, max_bytes);
        c.config_path = config;
    }
    return c;
}

std::string json_too_deep(const std::string& src, std::size_t depth) {
    return src + ": objects and arrays nested more than " + std::to_string(depth) + " deep";
}

nlohmann::json parse_json_tree(std::string_view text, const std::string& src, std::size_t max_bytes,
                               std::size_t* held) {
    return io_detail::parse_json_document<nlohmann::json>(text, src, max_bytes, false, held);
}

}  // namespace attnscope
