// attnscope — core: one block of memory for the stages and working buffers of attend().
//
// A fresh page costs a page fault at its first touch, and on a virtual machine whose
// host has taken free memory back, a fault on the host too: 0.3–0.5 GB/s were measured
// on such a machine, against ~10 GB/s for writing memory already touched. An Arena is one
// allocation (allocate_large: 2 MiB-aligned, huge pages where they pay) that attend()
// takes its kept stages and working buffers from, first touched in parallel by the
// threads that then compute on it. When everything taken from it has been released it
// is reused from its start: a caller running attend() layer after layer, or step after
// step, with one Arena (Compute::arena) touches its pages once.
//
// In AddressSanitizer builds an Arena holds nothing and take() returns null: every stage
// keeps an allocation of its own, so an access past any of them is still reported.
#pragma once

#include <cstddef>
#include <memory>

#include "attnscope/base/buffer.hpp"

namespace attnscope {

class Arena {
   public:
    Arena();
    ~Arena();
    Arena(const Arena&) = delete;
    Arena& operator=(const Arena&) = delete;

    // Makes room for `bytes`: when nothing taken is alive and the block is smaller,
    // replaces it with one of `bytes` (rounded up to 2 MiB) whose first `bytes` are
    // touched on `threads` threads. A block still in use is kept (what does not fit is
    // then allocated as usual), and under 4 MiB nothing is reserved (not worth a block).
    // std::bad_alloc when memory is out.
    void reserve(std::size_t bytes, std::size_t threads);
    // `bytes` of the block at its next 64-byte boundary, as a Placement (PlaceNext puts
    // the next Tensor or Buffer of that size there), or null when they do not fit.
    std::shared_ptr<Placement> take(std::size_t bytes);
    std::size_t capacity() const;  // bytes of the block (0 before the first reserve)
    std::size_t used() const;      // bytes taken since the block was last rewound

    // Bytes take(a) then take(b)... use at most: each request rounded up to 64 bytes.
    static std::size_t footprint(std::size_t bytes);

    struct Block;

   private:
    std::shared_ptr<Block> block_;
};

}  // namespace attnscope
