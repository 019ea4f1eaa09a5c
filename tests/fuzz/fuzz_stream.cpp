// libFuzzer target: reading input that has no size up front — standard input (read_stream
// on a stream that hands out bytes in uneven pieces) and a pipe (map_file on /dev/fd/N,
// the non-mapped path that also serves devices and procfs files) — under a memory limit,
// then the bundle as load_bundle reads it (JSON, or .npz when it starts with "PK").
//
// Input layout: byte 0 picks the memory limit (kLimits), byte 1 the source (bit 0: 0 the
// stream, 1 a pipe) and the piece sizes the stream hands out (bits 1-7 seed them); the
// rest is what arrives on the source.
//
// Oracles, besides the sanitizers:
//  - input of at most the limit is read whole and exactly; more is refused with
//    MemoryLimitError naming the source, and the stream is not read past limit + 1 bytes;
//  - a bundle read from what arrived holds arrays with shape-product values (or strings),
//    and its text and values together fit the limit.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <istream>
#include <streambuf>
#include <string>

#include "fuzz_common.hpp"
#include "npz_mutator.hpp"

using namespace attnscope;

namespace {

constexpr std::size_t kLimits[8] = {0, 1, 7, 64, 100, 1000, 4096, 1 << 20};

// Hands out `data` in pieces of 1 to 64 bytes (a pseudo-random sequence from `seed`), as
// a pipe does; counts what was taken.
class Pieces : public std::streambuf {
   public:
    Pieces(std::string_view data, unsigned seed) : data_(data), state_(seed * 2654435761u + 1) {}
    std::size_t taken() const { return at_; }

   protected:
    int_type underflow() override {
        if (gptr() < egptr()) return traits_type::to_int_type(*gptr());
        if (at_ >= data_.size()) return traits_type::eof();
        state_ = state_ * 1103515245u + 12345u;
        const std::size_t n = std::min<std::size_t>(1 + (state_ >> 16) % 64, data_.size() - at_);
        char* p = const_cast<char*>(data_.data() + at_);
        setg(p, p, p + n);
        at_ += n;
        return traits_type::to_int_type(*p);
    }

   private:
    std::string_view data_;
    std::size_t at_ = 0;
    unsigned state_;
};

// The bytes through a pipe, read back with map_file("/dev/fd/N"). The pipe's buffer (64
// KiB) holds every input the fuzzer makes (-max_len), so no writer thread is needed.
FileBytes through_pipe(std::string_view data, std::size_t limit) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) __builtin_trap();
    struct Closer {
        int fd;
        ~Closer() {
            if (fd >= 0) ::close(fd);
        }
    } read_end{fds[0]}, write_end{fds[1]};
    for (std::size_t done = 0; done < data.size();) {
        const ssize_t n = ::write(fds[1], data.data() + done, data.size() - done);
        if (n <= 0) __builtin_trap();  // a full pipe: -max_len is above its buffer
        done += std::size_t(n);
    }
    ::close(fds[1]);
    write_end.fd = -1;
    return map_file("/dev/fd/" + std::to_string(fds[0]), limit);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 2) return 0;
    const std::size_t limit = kLimits[data[0] % 8];
    const bool pipe = data[1] & 1;
    const std::string_view input = fuzz::as_bytes(data + 2, size - 2);

    // 1. The source, bounded as it is read.
    FileBytes got;
    std::size_t taken = 0;
    const bool read = fuzz::accepts([&] {
        if (pipe) {
            got = through_pipe(input, limit);
        } else {
            Pieces pieces(input, data[1] >> 1);
            std::istream in(&pieces);
            try {
                got = read_stream(in, "<stdin>", limit);
            } catch (...) {
                taken = pieces.taken();
                throw;
            }
            taken = pieces.taken();
        }
    });
    ATTNSCOPE_FUZZ_CHECK(read == (input.size() <= limit));
    if (!read) {
        // Not read to its end: at most one byte past the limit, and one more piece.
        ATTNSCOPE_FUZZ_CHECK(pipe || taken <= limit + 1 + 64);
        return 0;
    }
    ATTNSCOPE_FUZZ_CHECK(got.bytes == input);

    // 2. The bundle, as load_bundle reads what arrived.
    Bundle b;
    const bool npz = got.bytes.substr(0, 2) == "PK";
    if (!fuzz::accepts([&] {
            b = npz ? parse_npz(got.bytes, "<stdin>", limit, got.keep) : parse_json_bundle(got.bytes, "<stdin>", limit);
        }))
        return 0;
    std::size_t held = npz ? 0 : got.bytes.size();
    for (const auto& [name, a] : b.arrays) {
        fuzz::check_array(a);
        held += a.count() * sizeof(double) + a.strings.size() * sizeof(std::string);
    }
    ATTNSCOPE_FUZZ_CHECK(npz || held <= limit);
    return 0;
}

// .npz inputs through the structure-aware mutator (after the two leading bytes), the rest
// byte by byte.
extern "C" std::size_t LLVMFuzzerCustomMutator(std::uint8_t* data, std::size_t size, std::size_t max_size,
                                               unsigned int seed) {
    if (size > 4 && max_size > 2 && data[2] == 'P' && data[3] == 'K' && seed % 2)
        return 2 + fuzz::mutate_npz(data + 2, size - 2, max_size - 2, seed);
    return LLVMFuzzerMutate(data, size, max_size);
}
