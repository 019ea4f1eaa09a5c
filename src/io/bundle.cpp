// Choosing the reader for a bundle or a single array: by file name and magic bytes.
#include <iostream>
#include <string>

#include "attnscope/base/errors.hpp"
#include "attnscope/io/read.hpp"
#include "bytes.hpp"

namespace attnscope {
namespace {
using io_detail::ends_with;
using io_detail::shown;
using io_detail::shown_path;
}  // namespace

Bundle load_bundle(const std::string& path, std::size_t max_bytes, const NameCheck& check_name) {
    if (path == "-") {
        // Bounded as it is read: a pipe that never ends stops at the memory limit.
        const FileBytes in = read_stream(std::cin, "<stdin>", max_bytes);
        return parse_json_bundle(in.bytes, "<stdin>", max_bytes, check_name);
    }
    // Mapped, not copied: an .npz's stored members are read in place (kept alive by the arrays).
    const FileBytes file = map_file(path, max_bytes);
    const std::string_view bytes = file.bytes;
    if (ends_with(path, ".npy"))
        throw InputError(shown_path(path) +
                         ": a .npy file holds one array, not a bundle; pass it with its own option (e.g. {x} " +
                         shown_path(path) + ")");
    if (ends_with(path, ".npz") || bytes.substr(0, 2) == "PK")
        return parse_npz(bytes, path, max_bytes, file.keep, check_name);
    return parse_json_bundle(bytes, path, max_bytes, check_name);
}

Array load_array(const std::string& path, const std::string& name, std::size_t max_bytes) {
    const FileBytes file = map_file(path, max_bytes);
    const std::string_view bytes = file.bytes;
    std::string origin = shown_path(path) + ": " + shown(name);
    if (ends_with(path, ".npy") || bytes.substr(0, 6) == "\x93NUMPY")
        return parse_npy(bytes, origin, max_bytes, file.keep);
    if (ends_with(path, ".npz"))
        throw InputError(shown_path(path) + ": an .npz archive is a bundle; pass it as the bundle, or give " +
                         shown(name) + " as .npy or .json");
    return parse_json_array(bytes, origin, max_bytes);
}

}  // namespace attnscope
