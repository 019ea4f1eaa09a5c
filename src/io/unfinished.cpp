// The outputs being written, listed where a fatal signal's handler can find them.
//
// A fixed table of paths, so that remove_unfinished_outputs() needs neither locks nor
// the heap and may run inside a signal handler (it only reads the table and calls
// unlink/rmdir, both async-signal-safe).
#include <unistd.h>

#include <atomic>
#include <climits>
#include <cstring>

#include "attnscope/io/write.hpp"

namespace attnscope {
namespace {

enum : int { kFree = 0, kFilling = 1, kFile = 2, kDirectory = 3 };

struct Slot {
    std::atomic<int> state{kFree};
    char path[PATH_MAX];
};

constexpr int kSlots = 64;  // far more than one run's outputs (a dump has nine files)
Slot slots[kSlots];

static_assert(std::atomic<int>::is_always_lock_free, "signal handlers need lock-free atomics");

}  // namespace

int register_unfinished(const std::string& path, bool directory) noexcept {
    if (path.size() >= PATH_MAX) return -1;
    for (int k = 0; k < kSlots; ++k) {
        int expected = kFree;
        if (!slots[k].state.compare_exchange_strong(expected, kFilling)) continue;
        std::memcpy(slots[k].path, path.c_str(), path.size() + 1);
        slots[k].state.store(directory ? kDirectory : kFile, std::memory_order_release);
        return k;
    }
    return -1;  // a full table only means that path is not cleaned up after a signal
}

void unregister_unfinished(int slot) noexcept {
    if (slot >= 0 && slot < kSlots) slots[slot].state.store(kFree, std::memory_order_release);
}

void remove_unfinished_outputs() noexcept {
    for (int kind : {kFile, kDirectory})  // files first: a directory goes only once empty
        for (Slot& s : slots)
            if (s.state.load(std::memory_order_acquire) == kind) {
                if (kind == kFile)
                    ::unlink(s.path);
                else
                    ::rmdir(s.path);  // never removes anything but an empty directory
            }                         // the slots stay taken: their owners free them (removing twice is harmless)
}

}  // namespace attnscope
