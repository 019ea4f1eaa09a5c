#include "attnscope/base/buffer.hpp"

#include <sys/mman.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>

namespace attnscope {

namespace {
constexpr std::size_t kHugePage = std::size_t{2} << 20;
constexpr std::size_t kLargeBuffer = std::size_t{4} << 20;

// Whether to ask for transparent huge pages. They save TLB misses on sweeps over large
// stages, but where the kernel compacts memory synchronously for an madvise()d region
// (transparent_hugepage/defrag "always" or "madvise", a common default), the first touch
// of each 2 MiB page can stall on compaction: a 1 GiB stage was measured faulting in in
// 5.1 s with the advice against 0.74 s without. Advise only where a fault never compacts:
// "defer" (kcompactd does it later) and "never" ("defer+madvise" compacts madvise()d
// regions at the fault, as "madvise" does).
bool huge_pages_cheap() {
    static const bool cheap = [] {
        std::FILE* f = std::fopen("/sys/kernel/mm/transparent_hugepage/defrag", "r");
        if (!f) return false;
        char buf[128] = {};
        const std::size_t n = std::fread(buf, 1, sizeof buf - 1, f);
        std::fclose(f);
        buf[n] = '\0';
        return std::strstr(buf, "[defer]") != nullptr || std::strstr(buf, "[never]") != nullptr;
    }();
    return cheap;
}

// The placement the next allocation of its size on this thread takes (PlaceNext).
thread_local std::shared_ptr<Placement> pending;

// Placed memory handed out and not yet released, by address: release_large must give
// these back to their owner rather than free() them.
struct Placed {
    std::mutex m;
    std::map<void*, std::shared_ptr<Placement>> by_address;
    std::atomic<std::size_t> count{0};
};
Placed& placed() {
    static Placed p;
    return p;
}
}  // namespace

PlaceNext::PlaceNext(std::shared_ptr<Placement> where) { pending = std::move(where); }
PlaceNext::~PlaceNext() { pending.reset(); }
bool PlaceNext::placing() const { return pending != nullptr; }

void* allocate_large(std::size_t bytes) {
    if (pending && pending->bytes() == bytes && bytes > 0) {
        void* p = pending->data();
        Placed& pl = placed();
        std::lock_guard<std::mutex> g(pl.m);
        pl.by_address[p] = std::move(pending);
        ++pl.count;
        return p;
    }
    if (bytes == 0) bytes = 1;
    void* p = nullptr;
    if (bytes >= kLargeBuffer) {
        std::size_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
        if (posix_memalign(&p, kHugePage, rounded) != 0) throw std::bad_alloc();
        if (huge_pages_cheap())
            ::madvise(p, rounded, MADV_HUGEPAGE);  // advice only: a refusal changes nothing but speed
    } else if (posix_memalign(&p, 64, bytes) != 0) {
        throw std::bad_alloc();
    }
    return p;
}

void release_large(void* p) noexcept {
    Placed& pl = placed();
    if (p && pl.count.load() > 0) {
        std::shared_ptr<Placement> owner;  // dropped outside the lock
        {
            std::lock_guard<std::mutex> g(pl.m);
            auto it = pl.by_address.find(p);
            if (it != pl.by_address.end()) {
                owner = std::move(it->second);
                pl.by_address.erase(it);
                --pl.count;
            }
        }
        if (owner) return;
    }
    std::free(p);
}

}  // namespace attnscope
