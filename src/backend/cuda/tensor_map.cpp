#include "backend/cuda/tensor_map.h"

#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <string>

#include "core/error.h"

namespace weir::cuda {
namespace {

// The driver's encoder, found through the runtime (no link to libcuda).
PFN_cuTensorMapEncodeTiled_v12000 encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess || !p) {
      cudaGetLastError();
      throw Error("CUDA: the driver has no cuTensorMapEncodeTiled");
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  return fn;
}

}  // namespace

bool can_map_rows(const void* base, int64_t row_bytes, size_t stride, uint32_t slice_bytes, uint32_t box_rows) {
  return reinterpret_cast<uintptr_t>(base) % 16 == 0 && row_bytes > 0 && row_bytes % 8 == 0 && stride % 16 == 0 &&
         stride < (size_t(1) << 40) && slice_bytes % 16 == 0 && slice_bytes > 0 && slice_bytes <= 2048 &&
         box_rows >= 1 && box_rows <= 256;
}

void map_rows(CUtensorMap* map, const void* base, int64_t row_bytes, int64_t rows, size_t stride, uint32_t slice_bytes,
              uint32_t box_rows) {
  if (!can_map_rows(base, row_bytes, stride, slice_bytes, box_rows) || rows < 1)
    throw Error("CUDA: rows that no tensor map can describe");
  const cuuint64_t dims[2] = {cuuint64_t(row_bytes / 8), cuuint64_t(rows)};
  const cuuint64_t strides[1] = {cuuint64_t(stride)};
  const cuuint32_t box[2] = {slice_bytes / 8, box_rows};
  const cuuint32_t elem[2] = {1, 1};
  // 256-byte L2 fetches: the rows are streamed once, whole.
  const CUresult r = encoder()(map, CU_TENSOR_MAP_DATA_TYPE_UINT64, 2, const_cast<void*>(base), dims, strides, box,
                               elem, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                               CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) throw Error("CUDA: cuTensorMapEncodeTiled failed (" + std::to_string(int(r)) + ")");
}

}  // namespace weir::cuda
