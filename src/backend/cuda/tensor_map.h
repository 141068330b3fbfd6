// Tensor maps for the copy unit's 2-D bulk copies (bulk_copy.cuh): a matrix
// of rows seen as a 2-D array of 8-byte elements, copied a box of rows x a
// slice of each row at a time.
#pragma once
#include <cuda.h>

#include <cstddef>
#include <cstdint>

namespace weir::cuda {

// Whether rows of row_bytes bytes, `stride` apart from base, can be cut
// into boxes of slice_bytes x box_rows (8-byte multiples, 16-byte aligned
// base and stride, slices of at most 2 KB and boxes of at most 256 rows).
bool can_map_rows(const void* base, int64_t row_bytes, size_t stride, uint32_t slice_bytes, uint32_t box_rows);
// Fills *map for those rows (throws on a driver error); the rows must be
// device memory that outlives every copy through the map.
void map_rows(CUtensorMap* map, const void* base, int64_t row_bytes, int64_t rows, size_t stride, uint32_t slice_bytes,
              uint32_t box_rows);

}  // namespace weir::cuda
