// get_rows (rows of a table of any dtype, as F32) and set_rows (F32 rows
// into an F32, F16 or Q8_0 table, e.g. the KV cache).
#include <cuda_fp16.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/cuda_util.cuh"
#include "backend/cuda/dequant.cuh"
#include "backend/cuda/rope_job.cuh"

namespace weir::cuda {
namespace {

// One block per output row; threads take groups of 8 elements.
template <DType T>
__global__ void get_rows_kernel(const uint8_t* table, size_t table_stride, int64_t n_table, const int32_t* ids,
                                int64_t K, float* y, Rows out) {
  pdl_wait();
  const int64_t t = blockIdx.x;
  const int32_t id = ids[t];
  float* yr = const_cast<float*>(reinterpret_cast<const float*>(out.row(t)));
  if (id < 0 || id >= n_table) {  // never read outside the table
    for (int64_t k = threadIdx.x; k < K; k += blockDim.x) yr[k] = __int_as_float(0x7fc00000);
    return;
  }
  const uint8_t* row = table + size_t(id) * table_stride;
  constexpr int G = Q<T>::QK / 8;
  for (int64_t gi = threadIdx.x; gi < K / 8; gi += blockDim.x) {
    float v[8];
    Q<T>::dq8(row + (gi / G) * Q<T>::BYTES, int(gi % G), v);
#pragma unroll
    for (int i = 0; i < 8; ++i) yr[8 * gi + i] = v[i];
  }
}

template <class Dst>
__global__ void set_rows_kernel(char* dst, size_t dst_stride, int64_t n_dst, Rows src, const int32_t* idx, int64_t K) {
  pdl_wait();
  const int64_t t = blockIdx.x;
  const int32_t r = idx[t];
  if (r < 0 || r >= n_dst) return;
  const float* s = reinterpret_cast<const float*>(src.row(t));
  Dst* d = reinterpret_cast<Dst*>(dst + size_t(r) * dst_stride);
  for (int64_t k = threadIdx.x; k < K; k += blockDim.x) {
    if constexpr (sizeof(Dst) == 2)
      d[k] = __float2half_rn(s[k]);
    else
      d[k] = s[k];
  }
}

// Q8_0 tables: rows of whole blocks (K % 32 == 0), a warp a block, as a
// set_rows job writes them (put_q8).
__global__ void set_rows_q8_kernel(RopeJob J) {
  pdl_wait();
  const int64_t t = blockIdx.x;
  const float* s = reinterpret_cast<const float*>(J.x.row(t));
  for (int64_t k = threadIdx.x; k < J.D; k += blockDim.x) put_q8<1>(J, t, 0, k, {s[k]});
}

}  // namespace

void op_get_rows(const Tensor& dst, const OpCtx& c) {
  const Tensor* table = dst.src[0];
  const Tensor* ids = dst.src[1];
  if (!table || !ids || ids->dtype != DType::I32 || dst.dtype != DType::F32 || dst.nb[0] != 4)
    bad_operands("get_rows", dst, "needs a table, I32 ids and an F32 result");
  const int64_t K = table->ne[0], T = ids->ne[0];
  if (K % 8 || K % traits(table->dtype).block_size)
    bad_operands("get_rows", dst, "row length " + std::to_string(K) + " is not a multiple of the block size");
  if (T == 0) return;
  const int threads = int(std::min<int64_t>(256, std::max<int64_t>(32, K / 8)));
  const bool ok = dispatch_dtype(table->dtype, [&]<DType TT>() {
    launch_kernel(get_rows_kernel<TT>, unsigned(T), threads, 0, c.launch_stream(),
                  static_cast<const uint8_t*>(table->data), table->nb[1], table->ne[1],
                  static_cast<const int32_t*>(ids->data), K, static_cast<float*>(dst.data), rows_of(dst));
  });
  if (!ok) bad_operands("get_rows", dst, std::string("no GPU kernel for table type ") + dtype_name(table->dtype));
  WEIR_CUDA_CHECK_LAUNCH();
}

void check_set_rows(const Tensor& dst) {
  const Tensor* table = dst.src[0];
  const Tensor* src = dst.src[1];
  const Tensor* idx = dst.src[2];
  if (!table || !src || !idx || src->dtype != DType::F32 || src->nb[0] != 4 || idx->dtype != DType::I32 ||
      (table->dtype != DType::F32 && table->dtype != DType::F16 && table->dtype != DType::Q8_0) ||
      table->ne[0] != src->ne[0] || (table->dtype == DType::Q8_0 && table->ne[0] % 32))
    bad_operands("set_rows", dst, "needs an F32, F16 or Q8_0 table, F32 rows of its width and I32 indices");
}

void op_set_rows(const Tensor& dst, const OpCtx& c) {
  check_set_rows(dst);
  const Tensor* table = dst.src[0];
  const Tensor* src = dst.src[1];
  const Tensor* idx = dst.src[2];
  const int64_t T = src->n_rows(), K = src->ne[0];
  if (T == 0) return;
  const int threads = int(std::min<int64_t>(256, std::max<int64_t>(32, K)));
  char* d = static_cast<char*>(dst.data);  // the table itself (set_rows' result views it)
  if (table->dtype == DType::Q8_0) {
    const RopeJob J = make_rope_job({&dst, nullptr});
    launch_kernel(set_rows_q8_kernel, unsigned(T), threads, 0, c.launch_stream(), J);
  } else if (table->dtype == DType::F16)
    launch_kernel(set_rows_kernel<__half>, unsigned(T), threads, 0, c.launch_stream(), d, dst.nb[1], dst.ne[1],
                  rows_of(*src), static_cast<const int32_t*>(idx->data), K);
  else
    launch_kernel(set_rows_kernel<float>, unsigned(T), threads, 0, c.launch_stream(), d, dst.nb[1], dst.ne[1],
                  rows_of(*src), static_cast<const int32_t*>(idx->data), K);
  WEIR_CUDA_CHECK_LAUNCH();
}

}  // namespace weir::cuda
