// attnscope — io layer, private: a buffer that grows without copying, for input whose
// size is not known in advance (a pipe, standard input, a procfs file, the numbers of a
// JSON list). Not installed; src/io/ only.
//
// A std::string or std::vector grows by allocating twice its size and copying: for a
// moment it holds three times what it had, and the doubled capacity lets a reader run up
// to twice past a limit before it looks again. This buffer is an anonymous mapping that
// mremap() enlarges in place or moves by its page tables (no copy), and pages cost memory
// only once written: what it holds in memory is size() rounded up to a page, whatever its
// capacity.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstring>
#include <memory>
#include <new>
#include <string_view>

namespace attnscope::io_detail {

class GrowBuffer {
   public:
    GrowBuffer() = default;
    ~GrowBuffer() {
        if (data_) ::munmap(data_, capacity_);
    }
    GrowBuffer(const GrowBuffer&) = delete;
    GrowBuffer& operator=(const GrowBuffer&) = delete;

    char* data() const { return data_; }
    std::size_t size() const { return size_; }
    std::size_t capacity() const { return capacity_; }

    // Room for at least n bytes in all (rounded up to pages); std::bad_alloc when the
    // address space cannot be had. The bytes held stay where data() now points.
    void reserve(std::size_t n) {
        if (n <= capacity_) return;
        const std::size_t page = 4096;
        if (n > std::size_t(-1) - page) throw std::bad_alloc();
        n = (n + page - 1) / page * page;
        void* p = data_ ? ::mremap(data_, capacity_, n, MREMAP_MAYMOVE)
                        : ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) throw std::bad_alloc();
        data_ = static_cast<char*>(p);
        capacity_ = n;
    }
    // Room for `more` bytes after size(): capacity doubled (at least), but never past `cap`
    // bytes in all unless that is needed for them.
    void make_room(std::size_t more, std::size_t cap = std::size_t(-1)) {
        if (capacity_ - size_ >= more) return;
        std::size_t want = capacity_ ? capacity_ * 2 : 4096;
        if (want > cap) want = cap;
        if (want < size_ + more) want = size_ + more;
        reserve(want);
    }
    // The bytes at data() + size() that a reader wrote count as held.
    void grew(std::size_t n) { size_ += n; }
    void append(const void* p, std::size_t n) {
        make_room(n);
        std::memcpy(data_ + size_, p, n);
        size_ += n;
    }

    // The bytes held, and an owner that unmaps them when the last copy goes; the buffer
    // is empty afterwards.
    std::string_view view() const { return {data_, size_}; }
    std::shared_ptr<const void> release() {
        if (!data_) return {};
        const std::size_t capacity = capacity_;
        std::shared_ptr<const void> keep(data_,
                                         [capacity](const void* q) { ::munmap(const_cast<void*>(q), capacity); });
        data_ = nullptr;
        size_ = capacity_ = 0;
        return keep;
    }

   private:
    char* data_ = nullptr;
    std::size_t size_ = 0, capacity_ = 0;
};

}  // namespace attnscope::io_detail
