#include "attnscope/buffer.hpp"

#include <sys/mman.h>

namespace attnscope {

namespace {
constexpr std::size_t kHugePage = std::size_t{2} << 20;
constexpr std::size_t kLargeBuffer = std::size_t{4} << 20;
}  // namespace

void* allocate_large(std::size_t bytes) {
    if (bytes == 0) bytes = 1;
    void* p = nullptr;
    if (bytes >= kLargeBuffer) {
        std::size_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
        if (posix_memalign(&p, kHugePage, rounded) != 0) throw std::bad_alloc();
        ::madvise(p, rounded, MADV_HUGEPAGE);  // advice only: a refusal changes nothing but speed
    } else if (posix_memalign(&p, 64, bytes) != 0) {
        throw std::bad_alloc();
    }
    return p;
}

void release_large(void* p) noexcept { std::free(p); }

}  // namespace attnscope
