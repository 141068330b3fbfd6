#include "core/partial_files.h"

#include <unistd.h>

#include <atomic>
#include <cstring>

namespace weir {
namespace {

// A fixed table: no allocation, so a signal handler can walk it. A slot's
// state goes free -> writing -> set -> free; the handler reads only set ones.
constexpr int kSlots = 16;
constexpr size_t kPathMax = 4096;
enum : int { kFree = 0, kWriting = 1, kSet = 2 };
struct Slot {
  std::atomic<int> state{kFree};
  char path[kPathMax];
};
Slot g_slots[kSlots];

}  // namespace

int track_partial_file(const std::string& path) {
  if (path.size() >= kPathMax) return -1;
  for (int i = 0; i < kSlots; ++i) {
    int expected = kFree;
    if (!g_slots[i].state.compare_exchange_strong(expected, kWriting)) continue;
    std::memcpy(g_slots[i].path, path.c_str(), path.size() + 1);
    g_slots[i].state.store(kSet, std::memory_order_release);
    return i;
  }
  return -1;
}

void forget_partial_file(int slot) {
  if (slot >= 0 && slot < kSlots) g_slots[slot].state.store(kFree, std::memory_order_release);
}

void remove_partial_files() noexcept {
  for (Slot& s : g_slots)
    if (s.state.load(std::memory_order_acquire) == kSet) ::unlink(s.path);
}

}  // namespace weir
