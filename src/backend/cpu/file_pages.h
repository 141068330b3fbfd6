// Giving back the pages of a weight the CPU backend no longer reads in the
// file's layout (it repacked it, repack.h): where the bytes lie in a
// read-only mapping of a file, madvise(MADV_DONTNEED) drops them from this
// process (the page cache keeps them; a later read faults them back in from
// there), so that a repacked model does not hold its weights twice. Memory
// that is not such a mapping (anonymous, writable: a copy the loader made)
// is left alone: there, dropping pages would lose the data.
#pragma once
#include <cstddef>

namespace weir::cpu {

// Drops the whole pages inside [p, p + n) when all of them lie in read-only
// file mappings; returns the bytes dropped (0 when not such a mapping).
size_t release_file_pages(const void* p, size_t n);

// Whether [p, p + n) lies wholly in read-only file mappings of this process
// (/proc/self/maps).
bool in_read_only_file_mapping(const void* p, size_t n);

}  // namespace weir::cpu
