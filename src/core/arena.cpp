// Core: the Arena (arena.hpp), one touched block that attend() takes its memory from.
#include "attnscope/core/arena.hpp"

#include <mutex>

#include "run.hpp"

#if defined(__SANITIZE_ADDRESS__)
#define ATTNSCOPE_ARENA_OFF 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ATTNSCOPE_ARENA_OFF 1
#endif
#endif

namespace attnscope {

namespace {
constexpr std::size_t kAlign = 64;
constexpr std::size_t kChunk = std::size_t{2} << 20;  // a huge page: the unit of the parallel touch
// A smaller run keeps its ordinary allocations: rounding it up to a touched 2 MiB block
// would cost more than its faults (a classroom example computes in 0.05 ms). Unused where
// ASan builds turn the arena off.
[[maybe_unused]] constexpr std::size_t kMinBlock = std::size_t{4} << 20;
}  // namespace

// The allocation, and what has been taken from it. Slices share its ownership: it is
// freed when the Arena and every stage placed in it are gone.
struct Arena::Block {
    // `bytes` rounded up to 2 MiB, of which the first `bytes` are touched.
    Block(std::size_t bytes, std::size_t threads)
        : base(static_cast<char*>(allocate_large((bytes + kChunk - 1) / kChunk * kChunk))),
          size((bytes + kChunk - 1) / kChunk * kChunk) {
        // First touch, one 2 MiB chunk at a time, on the threads that will compute: the
        // faults (the kernel zeroing each page) are shared among them, and no later write
        // faults.
        run::parallel_for((bytes + kChunk - 1) / kChunk, threads, [&](std::size_t c, std::size_t) {
            volatile char* p = base + c * kChunk;
            const std::size_t n = std::min(kChunk, bytes - c * kChunk);
            for (std::size_t k = 0; k < n; k += 4096) p[k] = 0;
        });
    }
    ~Block() { release_large(base); }
    Block(const Block&) = delete;
    Block& operator=(const Block&) = delete;

    char* const base;
    const std::size_t size;
    std::mutex m;
    std::size_t offset = 0;  // the next free byte
    std::size_t live = 0;    // slices not yet released
};

namespace {

class Slice final : public Placement {
   public:
    Slice(std::shared_ptr<Arena::Block> block, char* p, std::size_t n) : block_(std::move(block)), p_(p), n_(n) {}
    ~Slice() override {
        std::lock_guard<std::mutex> g(block_->m);
        --block_->live;
    }
    void* data() const override { return p_; }
    std::size_t bytes() const override { return n_; }

   private:
    std::shared_ptr<Arena::Block> block_;
    char* p_;
    std::size_t n_;
};

}  // namespace

Arena::Arena() = default;
Arena::~Arena() = default;

std::size_t Arena::footprint(std::size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

void Arena::reserve(std::size_t bytes, std::size_t threads) {
#ifdef ATTNSCOPE_ARENA_OFF
    (void)bytes, (void)threads;
#else
    if (bytes < kMinBlock) return;
    if (block_) {
        std::lock_guard<std::mutex> g(block_->m);
        if (block_->live > 0 || block_->size >= bytes) return;
    }
    block_.reset();  // before the new one: the two are never held at once
    block_ = std::make_shared<Block>(bytes, threads);
#endif
}

std::shared_ptr<Placement> Arena::take(std::size_t bytes) {
    if (!block_ || bytes == 0) return nullptr;
    std::lock_guard<std::mutex> g(block_->m);
    if (block_->live == 0) block_->offset = 0;  // everything taken before is released
    if (bytes > block_->size - block_->offset) return nullptr;
    char* p = block_->base + block_->offset;
    block_->offset += std::min(footprint(bytes), block_->size - block_->offset);
    ++block_->live;
    return std::make_shared<Slice>(block_, p, bytes);
}

std::size_t Arena::capacity() const { return block_ ? block_->size : 0; }

std::size_t Arena::used() const {
    if (!block_) return 0;
    std::lock_guard<std::mutex> g(block_->m);
    return block_->live ? block_->offset : 0;
}

}  // namespace attnscope
