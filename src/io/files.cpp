// Reading whole files: checked, bounded by the memory limit, mapped where possible.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>

#include "attnscope/base/errors.hpp"
#include "attnscope/io/read.hpp"
#include "bytes.hpp"

namespace attnscope {

namespace {

struct Fd {
    int fd;
    ~Fd() { ::close(fd); }
};

// Opens `path` for reading and checks it: a file, not a directory; a regular file no
// larger than the memory limit.
struct stat open_checked(const std::string& path, std::size_t max_bytes, int& fd) {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw InputError(path + ": cannot open file: " + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        const int e = errno;
        ::close(fd);
        throw InputError(path + ": cannot read file: " + std::strerror(e));
    }
    if (S_ISDIR(st.st_mode)) {
        ::close(fd);
        throw InputError(path + ": is a directory, expected a file");
    }
    if (S_ISREG(st.st_mode) && std::size_t(st.st_size) > max_bytes) {
        ::close(fd);
        throw MemoryLimitError(path + ": the file holds " + format_bytes(std::size_t(st.st_size)) + ", over " +
                               io_detail::memory_limit_of(max_bytes));
    }
    return st;
}

// Reads an open file to its end: straight into a string of the file's size when it is a
// regular file, else (a pipe, a device) in growing steps up to the memory limit.
std::string read_all(int fd, const struct stat& st, const std::string& path, std::size_t max_bytes) {
    const bool sized = S_ISREG(st.st_mode);
    std::string bytes;
    std::size_t have = 0;
    bytes.resize(sized ? std::size_t(st.st_size) : std::size_t{1} << 16);
    for (;;) {
        if (have == bytes.size()) {
            if (sized) break;
            if (bytes.size() > max_bytes)
                throw MemoryLimitError(path + ": the file holds more than " + io_detail::memory_limit_of(max_bytes));
            bytes.resize(bytes.size() * 2);
        }
        const ssize_t n = ::read(fd, bytes.data() + have, bytes.size() - have);
        if (n < 0) {
            if (errno == EINTR) continue;
            throw InputError(path + ": cannot read file: " + std::strerror(errno));
        }
        if (n == 0) break;
        have += std::size_t(n);
    }
    bytes.resize(have);
    return bytes;
}

}  // namespace

std::string read_file(const std::string& path, std::size_t max_bytes) {
    // One open, one fstat, reads straight into a string of the file's size (a special
    // file whose size is unknown, e.g. a pipe, is read until its end).
    int fd = -1;
    const struct stat st = open_checked(path, max_bytes, fd);
    Fd closer{fd};
    return read_all(fd, st, path, max_bytes);
}

FileBytes map_file(const std::string& path, std::size_t max_bytes) {
    // Mapping hands the page cache's pages to the readers directly: no copy, and none of
    // the fresh zero-filled pages a buffer of the file's size would fault in. Every page
    // is mapped at once (MAP_POPULATE): the readers go through all of them anyway.
    int fd = -1;
    const struct stat st = open_checked(path, max_bytes, fd);
    Fd closer{fd};
    if (S_ISREG(st.st_mode) && st.st_size > 0) {
        const std::size_t size = std::size_t(st.st_size);
        void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
        if (p != MAP_FAILED) {
            std::shared_ptr<const void> keep(p, [size](const void* q) { ::munmap(const_cast<void*>(q), size); });
            return {std::string_view(static_cast<const char*>(p), size), std::move(keep)};
        }
    }
    auto bytes = std::make_shared<const std::string>(read_all(fd, st, path, max_bytes));
    return {std::string_view(*bytes), bytes};
}

}  // namespace attnscope
