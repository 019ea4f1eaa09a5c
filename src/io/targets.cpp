// Output targets: what may be replaced, checked with lstat (a link is never followed blindly).
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "attnscope/base/errors.hpp"
#include "attnscope/io/write.hpp"

namespace attnscope {
namespace {

const char* kind_of(mode_t m) {
    if (S_ISREG(m)) return "a regular file";
    if (S_ISDIR(m)) return "a directory";
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISSOCK(m)) return "a socket";
    if (S_ISLNK(m)) return "a symbolic link";
    return "not a regular file";
}

// The directory `path` would be made in ("l0/" names l0 itself, made in ".").
std::string parent_of(std::string path) {
    while (path.size() > 1 && path.back() == '/') path.pop_back();
    const std::size_t slash = path.find_last_of('/');
    if (slash == std::string::npos) return ".";
    return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

std::string describe_path(const std::string& path) {
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) return "absent";
    if (!S_ISLNK(st.st_mode)) return kind_of(st.st_mode);
    struct stat to {};
    if (::stat(path.c_str(), &to) != 0) return "a dangling symbolic link";
    return std::string("a symbolic link to ") + kind_of(to.st_mode);
}

void check_output_target(const std::string& path, bool replace, const std::string& what) {
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) {
        if (errno != ENOENT) throw RuntimeFailure(what + ": cannot be checked: " + std::strerror(errno));
        const std::string dir = parent_of(path);
        struct stat d {};
        if (::stat(dir.c_str(), &d) != 0 || !S_ISDIR(d.st_mode))
            throw RuntimeFailure(what + ": cannot be written: the directory " + dir + " does not exist");
        if (::access(dir.c_str(), W_OK) != 0)
            throw RuntimeFailure(what + ": cannot be written: the directory " + dir + " is not writable");
        return;
    }
    const std::string found = describe_path(path);
    // A name taken, as by an existing file (below): a usage error, whatever {force} says.
    if (found == "a dangling symbolic link")
        throw UsageError(what +
                         ": exists and is a dangling symbolic link (never replaced); remove it or choose "
                         "another name");
    const bool regular = S_ISREG(st.st_mode) || found == "a symbolic link to a regular file";
    if (!regular)
        throw RuntimeFailure(what + ": cannot be written: it exists and is " + found +
                             ", not a regular file (never replaced)");
    if (!replace) throw UsageError(what + ": exists; pass {force} to replace it");
}

}  // namespace attnscope
