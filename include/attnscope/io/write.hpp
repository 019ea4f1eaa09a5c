// attnscope — io layer: .npy/.npz writers and outputs that are never half-written.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <ostream>
#include <streambuf>
#include <string>
#include <string_view>
#include <vector>

#include "attnscope/base/dtype.hpp"

namespace attnscope {

// A borrowed view of a contiguous C-order array to be written.
struct OutArray {
    std::string name;
    std::vector<std::size_t> shape;
    DType dtype;
    const void* data;  // shape-product elements of dtype (bool as one byte each)
    // > 0: an array of text instead, numpy's '<U{text_width}': each element text_width
    // UTF-32LE code points (NUL-padded); dtype is then not read.
    std::size_t text_width = 0;
};

std::size_t data_bytes(const OutArray& a);  // the bytes of a.data

// The complete .npy encoding (header + data) as numpy's np.save writes it.
// `align` (a multiple of 64) is where the data starts: 64 as np.save does, or the page
// size for a file whose data is mapped into memory and computed in place (numpy reads
// headers of any length up to 10000 bytes).
std::string npy_header(const OutArray& a, std::size_t align = 64);

// A file written under a temporary name beside its target and renamed into place by
// commit(); destroyed uncommitted, it removes the temporary. A failed run therefore
// never leaves a half-written output nor damages what was at the target before.
//
// `replace`: whether commit() may replace an existing file. Without it the rename claims
// the target atomically (renameat2 RENAME_NOREPLACE): of two runs writing one new path,
// exactly one wins and the other gets one clear error. With it, only a regular file (or
// a link to one: the link itself is replaced) is replaced, never a device, FIFO,
// directory or dangling link, even one that appeared after the run began.
class AtomicFile {
   public:
    explicit AtomicFile(std::string target, bool replace = true);
    ~AtomicFile();
    AtomicFile(const AtomicFile&) = delete;
    AtomicFile& operator=(const AtomicFile&) = delete;
    AtomicFile(AtomicFile&&) noexcept;

    void write(const void* data, std::size_t n);
    void write(std::string_view s) { write(s.data(), s.size()); }
    std::uint64_t written() const { return written_; }
    void close();   // flush and close; throws RuntimeFailure on a write error
    void commit();  // close, then rename over the target
    const std::string& target() const { return target_; }
    int fd() const { return fd_; }  // the open temporary (-1 once closed), e.g. to map it

   private:
    std::string target_, temp_;
    int fd_ = -1;
    int slot_ = -1;  // register_unfinished's, while the temporary exists
    std::uint64_t written_ = 0;
    bool committed_ = false;
    bool replace_ = true;
};

// Outputs not yet complete: AtomicFile temporaries and directories a dump created. They
// are listed so that a run killed by a signal (Ctrl-C, a closed pipe) can remove them:
// the CLI's handlers call remove_unfinished_outputs(), which is async-signal-safe and
// removes the listed files, then the listed directories that are empty.
int register_unfinished(const std::string& path, bool directory) noexcept;  // a slot, or -1
void unregister_unfinished(int slot) noexcept;
void remove_unfinished_outputs() noexcept;

// An std::ostream into an AtomicFile, for text outputs (HTML, SVG). Write errors surface
// as RuntimeFailure from commit().
class AtomicTextFile : public std::ostream {
   public:
    explicit AtomicTextFile(std::string target, bool replace = true);
    void commit();

   private:
    struct Buf : std::streambuf {
        explicit Buf(AtomicFile& f) : file(f) { setp(data, data + sizeof data); }
        int_type overflow(int_type c) override;
        int sync() override;
        AtomicFile& file;
        char data[1 << 16];
    };
    AtomicFile file_;
    Buf buf_;
};

// One .npy file; one .npz archive (stored members, zip64 where needed).
void write_npy(AtomicFile& file, const OutArray& a);
void write_npz(AtomicFile& file, const std::vector<OutArray>& arrays);

// ---- output targets ---------------------------------------------------------------------
// Whether `path` may be written as an output, checked before any work and again at
// commit: it may be absent, or, when `replace` is given, a regular file or a symbolic link
// to one (the link itself is then replaced; the file it points to is kept). A device, a
// FIFO, a directory, a socket or a dangling link is never replaced. The directory it would
// be created in must exist. The error names `what` ("{html} r.html") and what was found:
// UsageError for an existing file without `replace` and for a dangling link (a name taken
// either way), RuntimeFailure for a target that cannot be written at all.
void check_output_target(const std::string& path, bool replace, const std::string& what);

// The one note an output gives: a symbolic link to a regular file replaced under {force}
// (the link itself; the file it points to is kept), said by AtomicFile::commit as it
// renames over the link, so that every output says it alike (docs/outputs.md). A line
// with its fields in braces, as in errors; `set_output_notes` says where it goes (the CLI:
// "attnscope: note: LINE" with the fields spelled as flags); by default std::cerr as is.
using NoteSink = std::function<void(const std::string&)>;
void set_output_notes(NoteSink sink);

// What `path` is, in words, for messages: "absent", "a regular file", "a FIFO", "a
// character device", "a directory", "a symbolic link to a regular file", ...
std::string describe_path(const std::string& path);

}  // namespace attnscope
