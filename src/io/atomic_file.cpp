// The atomic output file every writer goes through.
#include <fcntl.h>
#include <stdio.h>  // renameat2
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>
#include <type_traits>

#include "attnscope/base/errors.hpp"
#include "attnscope/io/write.hpp"

namespace attnscope {
namespace {

NoteSink& note_sink() {
    static NoteSink sink = [](const std::string& line) { std::fprintf(stderr, "attnscope: note: %s\n", line.c_str()); };
    return sink;
}

}  // namespace

void set_output_notes(NoteSink sink) { note_sink() = std::move(sink); }

AtomicFile::AtomicFile(std::string target, bool replace) : target_(std::move(target)), replace_(replace) {
    // The temporary is listed for the signal handlers before it is created (O_EXCL), so
    // no moment exists in which it is on disk but unknown to them. (A signal may reach any
    // thread, e.g. a BLAS worker, so blocking signals on this one would not close that gap.)
    static std::atomic<unsigned> counter{0};
    for (int attempt = 0;; ++attempt) {
        char suffix[32];
        std::snprintf(suffix, sizeof suffix, ".tmp-%06x",
                      (unsigned(::getpid()) * 2654435761u + counter++ * 40503u) & 0xffffffu);
        temp_ = target_ + suffix;
        slot_ = register_unfinished(temp_, false);
        fd_ = ::open(temp_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd_ >= 0) break;
        const int err = errno;
        unregister_unfinished(slot_);
        slot_ = -1;
        if (err != EEXIST || attempt == 100)
            throw RuntimeFailure(target_ + ": cannot create output file: " + std::strerror(err));
    }
}

AtomicFile::AtomicFile(AtomicFile&& o) noexcept
    : target_(std::move(o.target_)),
      temp_(std::move(o.temp_)),
      fd_(o.fd_),
      slot_(o.slot_),
      written_(o.written_),
      committed_(o.committed_),
      replace_(o.replace_) {
    o.fd_ = -1;
    o.slot_ = -1;
    o.committed_ = true;  // the moved-from object owns nothing
}

AtomicFile::~AtomicFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(temp_.c_str());
    unregister_unfinished(slot_);
}

void AtomicFile::write(const void* data, std::size_t n) {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
        ssize_t w = ::write(fd_, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            throw RuntimeFailure(target_ + ": cannot write: " + std::strerror(errno));
        }
        p += w;
        n -= std::size_t(w);
        written_ += std::uint64_t(w);
    }
}

void AtomicFile::close() {
    if (fd_ < 0) return;
    mode_t mask = ::umask(0);
    ::umask(mask);
    ::fchmod(fd_, 0666 & ~mask);
    int rc = ::close(fd_);
    fd_ = -1;
    if (rc != 0) throw RuntimeFailure(target_ + ": cannot write: " + std::strerror(errno));
}

void AtomicFile::commit() {
    close();
    if (!replace_) {
        // Claim the name: fails with EEXIST when anything is there, however it got there.
        if (::renameat2(AT_FDCWD, temp_.c_str(), AT_FDCWD, target_.c_str(), RENAME_NOREPLACE) != 0) {
            if (errno == EEXIST)
                throw RuntimeFailure(
                    target_ +
                    ": was created by someone else while this run wrote it; kept (pass {force} to replace it)");
            if (errno != EINVAL && errno != ENOSYS)  // a file system without RENAME_NOREPLACE: link() claims instead
                throw RuntimeFailure(target_ + ": cannot move output into place: " + std::strerror(errno));
            if (::link(temp_.c_str(), target_.c_str()) != 0)
                throw RuntimeFailure(
                    target_ +
                    (errno == EEXIST
                         ? ": was created by someone else while this run wrote it; kept (pass {force} to replace it)"
                         : ": cannot move output into place: " + std::string(std::strerror(errno))));
            ::unlink(temp_.c_str());
        }
    } else {
        const std::string found = describe_path(target_);
        if (found != "absent" && found != "a regular file" && found != "a symbolic link to a regular file")
            throw RuntimeFailure(target_ + ": cannot move output into place: it is " + found +
                                 ", not a regular file (never replaced)");
        if (found == "a symbolic link to a regular file")
            note_sink()(target_ +
                        " is a symbolic link; {force} replaces the link itself (the file it points to is "
                        "kept)");
        if (::rename(temp_.c_str(), target_.c_str()) != 0)
            throw RuntimeFailure(target_ + ": cannot move output into place: " + std::strerror(errno));
    }
    committed_ = true;
    unregister_unfinished(slot_);
    slot_ = -1;
}

AtomicTextFile::AtomicTextFile(std::string target, bool replace)
    : std::ostream(nullptr), file_(std::move(target), replace), buf_(file_) {
    rdbuf(&buf_);
}

AtomicTextFile::Buf::int_type AtomicTextFile::Buf::overflow(int_type c) {
    sync();
    if (c != traits_type::eof()) {
        *pptr() = char(c);
        pbump(1);
    }
    return traits_type::not_eof(c);
}

int AtomicTextFile::Buf::sync() {
    file.write(pbase(), std::size_t(pptr() - pbase()));  // throws RuntimeFailure on error
    setp(data, data + sizeof data);
    return 0;
}

void AtomicTextFile::commit() {
    flush();
    buf_.sync();
    file_.commit();
}

}  // namespace attnscope
