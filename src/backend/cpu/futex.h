// The two futex calls the thread pool sleeps and wakes with (Linux). A
// thread sleeps on a 32-bit word only while it still holds the value it saw,
// which the kernel checks atomically, so a wake between the check and the
// sleep is never lost.
#pragma once
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <cstdint>

namespace weir::cpu {

inline void futex_wait(const std::atomic<uint32_t>& word, uint32_t old) {
  syscall(SYS_futex, reinterpret_cast<const uint32_t*>(&word), FUTEX_WAIT_PRIVATE, old, nullptr,
          nullptr, 0);
}

inline void futex_wake_all(const std::atomic<uint32_t>& word) {
  syscall(SYS_futex, reinterpret_cast<const uint32_t*>(&word), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr,
          nullptr, 0);
}

static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t) && std::atomic<uint32_t>::is_always_lock_free);

}  // namespace weir::cpu
