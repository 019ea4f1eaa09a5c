// attnscope — memory for large stage tensors.
//
// Touching fresh memory costs a page fault per 4 KiB page on this kind of machine
// (~12 µs each); a 1 GiB weights tensor would spend seconds there. Buffers of 4 MiB
// and more are therefore 2 MiB-aligned and asked to be backed by transparent huge
// pages (madvise), as numpy does for its large arrays. Nothing is touched on
// allocation: a buffer costs only what is written into it.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>
#include <xtensor/xtensor.hpp>

namespace attnscope {

void* allocate_large(std::size_t bytes);  // throws std::bad_alloc
void release_large(void* p) noexcept;

// Memory a large tensor can live in instead of fresh anonymous pages: e.g. the data
// region of the .npy file a stage is dumped to, mapped shared, so that computing the
// stage writes the file (no second copy of it in memory, no write() afterwards).
class Placement {
   public:
    virtual ~Placement() = default;
    virtual void* data() const = 0;
    virtual std::size_t bytes() const = 0;
};

// While a PlaceNext lives, the next allocation on this thread of exactly
// where->bytes() bytes by a HugePageAllocator (i.e. the next Tensor or Buffer of that
// size) takes `where`'s memory instead of fresh pages; that container then shares
// ownership of the placement until it frees its storage. Any other allocation is
// unaffected. A null `where` places nothing.
class PlaceNext {
   public:
    explicit PlaceNext(std::shared_ptr<Placement> where);
    ~PlaceNext();
    bool placing() const;  // a placement is given and not yet taken
    PlaceNext(const PlaceNext&) = delete;
    PlaceNext& operator=(const PlaceNext&) = delete;
};

template <typename T>
struct HugePageAllocator {
    using value_type = T;
    HugePageAllocator() = default;
    template <typename U>
    HugePageAllocator(const HugePageAllocator<U>&) noexcept {}
    T* allocate(std::size_t n) { return static_cast<T*>(allocate_large(n * sizeof(T))); }
    void deallocate(T* p, std::size_t) noexcept { release_large(p); }
    // Default-initialise (no zero fill): a buffer costs only the pages later written.
    template <typename U>
    void construct(U* p) noexcept(std::is_nothrow_default_constructible_v<U>) {
        ::new (static_cast<void*>(p)) U;
    }
    template <typename U, typename... Args>
    void construct(U* p, Args&&... args) {
        ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
    }
    template <typename U>
    bool operator==(const HugePageAllocator<U>&) const noexcept {
        return true;
    }
    template <typename U>
    bool operator!=(const HugePageAllocator<U>&) const noexcept {
        return false;
    }
};

// A flat working buffer, huge-page backed when large.
template <typename T>
using Buffer = std::vector<T, HugePageAllocator<T>>;

// The tensors of a Problem and a Trace: fixed rank, row-major, huge-page backed when large.
template <typename T, std::size_t N>
using Tensor = xt::xtensor<T, N, xt::layout_type::row_major, HugePageAllocator<T>>;

}  // namespace attnscope
