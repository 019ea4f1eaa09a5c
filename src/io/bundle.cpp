// Choosing the reader for a bundle or a single array: by file name and magic bytes.
#include <iostream>
#include <iterator>
#include <string>

#include "attnscope/base/errors.hpp"
#include "attnscope/io/read.hpp"
#include "bytes.hpp"

namespace attnscope {
namespace {

using io_detail::ends_with;

std::string read_stdin() {
    std::string s((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    if (std::cin.bad()) throw InputError("<stdin>: cannot read standard input");
    return s;
}
}  // namespace

Bundle load_bundle(const std::string& path, std::size_t max_bytes) {
    if (path == "-") return parse_json_bundle(read_stdin(), "<stdin>", max_bytes);
    // Mapped, not copied: an .npz's stored members are read in place (kept alive by the arrays).
    const FileBytes file = map_file(path, max_bytes);
    const std::string_view bytes = file.bytes;
    if (ends_with(path, ".npy"))
        throw InputError(path + ": a .npy file holds one array, not a bundle; pass it with its own option (e.g. {x} " +
                         path + ")");
    if (ends_with(path, ".npz") || bytes.substr(0, 2) == "PK") return parse_npz(bytes, path, max_bytes, file.keep);
    return parse_json_bundle(bytes, path, max_bytes);
}

Array load_array(const std::string& path, const std::string& name, std::size_t max_bytes) {
    const FileBytes file = map_file(path, max_bytes);
    const std::string_view bytes = file.bytes;
    std::string origin = path + ": " + name;
    if (ends_with(path, ".npy") || bytes.substr(0, 6) == "\x93NUMPY")
        return parse_npy(bytes, origin, max_bytes, file.keep);
    if (ends_with(path, ".npz"))
        throw InputError(path + ": an .npz archive is a bundle; pass it as the bundle, or give " + name +
                         " as .npy or .json");
    return parse_json_array(bytes, origin, max_bytes);
}

}  // namespace attnscope
