#include "backend/cpu/file_pages.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

namespace weir::cpu {

bool in_read_only_file_mapping(const void* p, size_t n) {
  if (n == 0) return false;
  uintptr_t lo = reinterpret_cast<uintptr_t>(p);
  const uintptr_t hi = lo + n;
  std::ifstream maps("/proc/self/maps");
  // Lines are sorted by address: walk them, covering [lo, hi) with adjacent
  // read-only file mappings.
  for (std::string line; std::getline(maps, line);) {
    std::istringstream in(line);
    std::string range, perms, offset, dev;
    unsigned long inode = 0;
    in >> range >> perms >> offset >> dev >> inode;
    unsigned long long a = 0, b = 0;
    if (std::sscanf(range.c_str(), "%llx-%llx", &a, &b) != 2) continue;
    if (b <= lo) continue;
    if (a > lo) return false;  // a hole before lo is covered
    if (inode == 0 || perms.size() < 2 || perms[1] == 'w') return false;
    lo = uintptr_t(b);
    if (lo >= hi) return true;
  }
  return false;
}

size_t release_file_pages(const void* p, size_t n) {
  const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
  const uintptr_t a = (reinterpret_cast<uintptr_t>(p) + page - 1) & ~(page - 1);
  const uintptr_t b = (reinterpret_cast<uintptr_t>(p) + n) & ~(page - 1);
  if (b <= a || !in_read_only_file_mapping(reinterpret_cast<const void*>(a), b - a)) return 0;
  if (madvise(reinterpret_cast<void*>(a), b - a, MADV_DONTNEED) != 0) return 0;
  return b - a;
}

}  // namespace weir::cpu
