// Choosing the reader for a bundle or a single array: by file name and magic bytes.
#include <iostream>
#include <string>

#include "attnscope/base/errors.hpp"
#include "attnscope/io/read.hpp"
#include "bytes.hpp"

namespace attnscope {
namespace {
using io_detail::shown;
using io_detail::shown_path;

// An .npz's `config` member, one string of JSON (numpy: np.array(json.dumps({...})), a 0-d
// '<U' array), read into the bundle's config record and taken out of its arrays.
void take_config(Bundle& b, std::size_t max_bytes) {
    const auto it = b.arrays.find("config");
    if (it == b.arrays.end()) return;
    const Array& a = it->second;
    if (!a.is_text() || a.ndim() != 0)
        throw InputError(a.origin + ": expected one string of JSON run options (numpy: np.array(json.dumps({...}))), " +
                         "found " + (a.is_text() ? "text" : a.dtype) + " of shape " + shape_str(a.shape));
    b.config = parse_bundle_config(a.strings.at(0), a.origin, max_bytes);
    b.arrays.erase(it);
}
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
    if (ends_with(path, ".npz") || bytes.substr(0, 2) == "PK") {
        // The config member is not an array: no name check for it (JSON's is read as its key).
        NameCheck check = check_name;
        if (check_name)
            check = [&check_name](const std::string& source, const std::string& name) {
                if (name != "config") check_name(source, name);
            };
        Bundle b = parse_npz(bytes, path, max_bytes, file.keep, check);
        take_config(b, max_bytes);
        return b;
    }
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
