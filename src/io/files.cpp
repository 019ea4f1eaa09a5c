// Reading whole files and streams: checked, bounded by the memory limit as they are read,
// mapped where possible.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <istream>
#include <memory>
#include <string>
#include <string_view>

#include "attnscope/base/errors.hpp"
#include "attnscope/io/read.hpp"
#include "attnscope/io/write.hpp"
#include "bytes.hpp"
#include "grow.hpp"

namespace attnscope {

namespace {

using io_detail::GrowBuffer;
using io_detail::shown_path;

struct Fd {
    int fd;
    ~Fd() { ::close(fd); }
};

// ---- mapped files, and the signal a truncated one raises ----------------------------------
//
// A page of a mapping past the end of its file (truncated by another process since it was
// mapped) raises SIGBUS when touched. Every mapping is listed here with the line that
// names its file, in a fixed table that a signal handler may read (no locks, no heap).

constexpr std::uintptr_t kFilling = 1;  // a slot being filled in (no mapping starts at 1)
struct Mapped {
    std::atomic<std::uintptr_t> begin{0};  // 0: a free slot; kFilling; the mapping's start
    std::size_t size = 0;
    const std::string* line = nullptr;  // "attnscope: error: FILE: ...\n"
};
constexpr std::size_t kMappedSlots = 256;  // a run maps a few files; a fuller table only loses the name
Mapped mapped[kMappedSlots];
static_assert(std::atomic<std::uintptr_t>::is_always_lock_free, "signal handlers need lock-free atomics");

// Maps fd's `size` bytes read-only (MAP_POPULATE: every page at once) and lists the
// mapping; MAP_FAILED gives empty bytes.
FileBytes map_listed(int fd, std::size_t size, const std::string& path, bool populate) {
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE | (populate ? MAP_POPULATE : 0), fd, 0);
    if (p == MAP_FAILED) return {};
    auto line = std::make_shared<const std::string>(
        "attnscope: error: " + escape_control(path) +
        ": the file changed while it was read (truncated by another process?); nothing more was read\n");
    Mapped* slot = nullptr;
    for (Mapped& m : mapped) {
        std::uintptr_t free = 0;
        if (!m.begin.compare_exchange_strong(free, kFilling)) continue;
        m.size = size;
        m.line = line.get();
        m.begin.store(reinterpret_cast<std::uintptr_t>(p), std::memory_order_release);
        slot = &m;
        break;
    }
    std::shared_ptr<const void> keep(p, [size, slot, line](const void* q) {
        if (slot) slot->begin.store(0, std::memory_order_release);
        ::munmap(const_cast<void*>(q), size);
    });
    return {std::string_view(static_cast<const char*>(p), size), std::move(keep), true};
}

extern "C" void on_sigbus(int, siginfo_t* info, void*) {
    static constexpr char kUnknown[] =
        "attnscope: error: an input file changed while it was read (truncated by another process?)\n";
    const char* text = kUnknown;
    std::size_t n = sizeof kUnknown - 1;
    const auto at = reinterpret_cast<std::uintptr_t>(info->si_addr);
    for (const Mapped& m : mapped) {
        const std::uintptr_t b = m.begin.load(std::memory_order_acquire);
        if (b > kFilling && at >= b && at - b < m.size && m.line) {
            text = m.line->data();
            n = m.line->size();
            break;
        }
    }
    remove_unfinished_outputs();
    while (n > 0) {
        const ssize_t w = ::write(2, text, n);
        if (w <= 0) break;
        text += w;
        n -= std::size_t(w);
    }
    ::_exit(2);
}

// Opens `path` for reading and checks it: a file, not a directory; a regular file no
// larger than the memory limit.
struct stat open_checked(const std::string& path, std::size_t max_bytes, int& fd) {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw InputError(shown_path(path) + ": cannot open file: " + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        const int e = errno;
        ::close(fd);
        throw InputError(shown_path(path) + ": cannot read file: " + std::strerror(e));
    }
    if (S_ISDIR(st.st_mode)) {
        ::close(fd);
        throw InputError(shown_path(path) + ": is a directory, expected a file");
    }
    try {
        io_detail::refuse_device(fd, st, path);
    } catch (...) {
        ::close(fd);
        throw;
    }
    if (S_ISREG(st.st_mode) && std::size_t(st.st_size) > max_bytes) {
        ::close(fd);
        throw MemoryLimitError(shown_path(path) + ": the file holds " + format_bytes(std::size_t(st.st_size)) +
                               ", over " + io_detail::memory_limit_of(max_bytes));
    }
    return st;
}

// Reads to the end with read_some(p, n) (the bytes read into p[0, n), 0 at the end) into
// a buffer that grows without copying, `expected` bytes reserved at first (0: unknown).
// The memory limit holds as the bytes arrive: at most max_bytes + 1 are ever read (and
// held), and one more than max_bytes is refused with `over_limit`'s message.
template <typename ReadSome>
FileBytes read_to_end(ReadSome read_some, std::size_t expected, std::size_t max_bytes, const std::string& over_limit) {
    const std::size_t cap = max_bytes == kNoLimit ? kNoLimit : max_bytes + 1;
    GrowBuffer buf;
    if (expected > 0) buf.reserve(std::min(expected + 1, cap));  // + 1: the end is seen without growing
    for (;;) {
        buf.make_room(1, cap);
        const std::size_t room = std::min(buf.capacity(), cap) - buf.size();
        const std::size_t n = read_some(buf.data() + buf.size(), std::min<std::size_t>(room, 1u << 30));
        if (n == 0) break;
        buf.grew(n);
        if (buf.size() > max_bytes) throw MemoryLimitError(over_limit);
    }
    const std::string_view bytes = buf.view();
    return {bytes, buf.release()};
}

// An open file read to its end: a regular file from its size on (a procfs file whose
// size says 0 until its end), anything else (a pipe, a device) in growing steps.
FileBytes read_fd(int fd, const struct stat& st, const std::string& path, std::size_t max_bytes) {
    const auto read_some = [&](char* p, std::size_t n) -> std::size_t {
        for (;;) {
            const ssize_t got = ::read(fd, p, n);
            if (got >= 0) return std::size_t(got);
            if (errno != EINTR) throw InputError(shown_path(path) + ": cannot read file: " + std::strerror(errno));
        }
    };
    const std::size_t expected = S_ISREG(st.st_mode) ? std::size_t(st.st_size) : 0;
    return read_to_end(read_some, expected, max_bytes,
                       shown_path(path) + ": the file holds more than " + io_detail::memory_limit_of(max_bytes) +
                           "; reading stopped there");
}

}  // namespace

namespace io_detail {

void refuse_device(int fd, const struct stat& st, const std::string& path) {
    if (!S_ISCHR(st.st_mode) && !S_ISBLK(st.st_mode)) return;
    if (S_ISCHR(st.st_mode) && ::isatty(fd)) return;  // a terminal: typed text ends
    throw InputError(shown_path(path) + ": is " + describe_path(path) + ", expected a file");
}

}  // namespace io_detail

std::string read_file(const std::string& path, std::size_t max_bytes) {
    const FileBytes file = map_file(path, max_bytes);
    return std::string(file.bytes);
}

FileBytes map_file(const std::string& path, std::size_t max_bytes) {
    // Mapping hands the page cache's pages to the readers directly: no copy, and none of
    // the fresh zero-filled pages a buffer of the file's size would fault in. Every page
    // is mapped at once (MAP_POPULATE): the readers go through all of them anyway.
    int fd = -1;
    const struct stat st = open_checked(path, max_bytes, fd);
    Fd closer{fd};
    if (S_ISREG(st.st_mode) && st.st_size > 0)
        if (FileBytes f = map_listed(fd, std::size_t(st.st_size), path, true); f.keep) return f;
    return read_fd(fd, st, path, max_bytes);
}

FileBytes map_file_lazily(const std::string& path, std::size_t max_bytes, bool regular_only) {
    // O_NONBLOCK: opening a FIFO does not wait for a writer (it is refused or read below).
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (regular_only ? O_NONBLOCK : 0));
    if (fd < 0) throw InputError(shown_path(path) + ": cannot open file: " + std::strerror(errno));
    Fd closer{fd};
    struct stat st {};
    const bool regular = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
    if (!regular && regular_only)
        throw InputError(shown_path(path) + ": is " + describe_path(path) + ", expected a regular file");
    if (!regular) io_detail::refuse_device(fd, st, path);
    if (regular && st.st_size > 0)
        if (FileBytes f = map_listed(fd, std::size_t(st.st_size), path, false); f.keep) return f;
    return map_file(path, max_bytes);
}

void drop_mapped_pages(std::string_view bytes) {
    static const auto page = std::uintptr_t(::sysconf(_SC_PAGESIZE));
    const auto begin = (reinterpret_cast<std::uintptr_t>(bytes.data()) + page - 1) / page * page;
    const auto end = (reinterpret_cast<std::uintptr_t>(bytes.data()) + bytes.size()) / page * page;
    // MADV_DONTNEED on a private mapping never written (PROT_READ) only unmaps the pages:
    // a later touch faults the file's page back in. A failure only leaves them resident.
    if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

std::shared_ptr<const void> keep_until_dropped(std::shared_ptr<const void> keep, std::string_view bytes) {
    const void* p = keep.get();
    return std::shared_ptr<const void>(p, [keep = std::move(keep), bytes](const void*) { drop_mapped_pages(bytes); });
}

void exit_on_changed_mappings() {
    struct sigaction on {};
    on.sa_sigaction = on_sigbus;
    on.sa_flags = SA_SIGINFO;
    sigemptyset(&on.sa_mask);
    ::sigaction(SIGBUS, &on, nullptr);
}

FileBytes read_stream(std::istream& in, const std::string& name, std::size_t max_bytes) {
    const auto read_some = [&](char* p, std::size_t n) -> std::size_t {
        in.read(p, std::streamsize(n));
        if (in.bad()) throw InputError(shown_path(name) + ": cannot read the input");
        return std::size_t(in.gcount());
    };
    return read_to_end(read_some, 0, max_bytes,
                       shown_path(name) + ": the input is larger than " + io_detail::memory_limit_of(max_bytes) +
                           "; reading stopped there");
}

}  // namespace attnscope
