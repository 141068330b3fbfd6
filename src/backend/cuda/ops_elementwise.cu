// Row-wise element kernels: rms_norm, add, mul (b broadcast over rows),
// scale, gelu_mul, silu_mul. Every operand is addressed through its own
// strides (rows contiguous), so views work. Numerics: float, as the CPU's
// exact mode (gelu by the tanh formula, not ggml's fp16 table).
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/cuda_util.cuh"

namespace weir::cuda {
namespace {

void check_rows_f32(const char* op, const Tensor& dst, const Tensor* a) {
  if (!a || a->dtype != DType::F32 || dst.dtype != DType::F32 || a->nb[0] != 4 || dst.nb[0] != 4)
    bad_operands(op, dst, "operands must be F32 with contiguous rows");
  if (a->ne[0] != dst.ne[0] || a->n_rows() != dst.n_rows())
    bad_operands(op, dst, "shape of " + shape_of(*a) + " does not match");
}

// One block per row: sum of squares, then y = x * (1 / sqrt(mean + eps)),
// times w (a row) when given.
__global__ void rms_norm_kernel(Rows x, Rows y, int64_t K, float eps, const float* __restrict__ w) {
  pdl_wait();
  const float* xr = reinterpret_cast<const float*>(x.row(blockIdx.x));
  float* yr = const_cast<float*>(reinterpret_cast<const float*>(y.row(blockIdx.x)));
  float s = 0.0f;
  for (int64_t k = threadIdx.x; k < K; k += blockDim.x) s += xr[k] * xr[k];
  __shared__ float part[32];
  s = warp_sum(s);
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = s;
  __syncthreads();
  if (threadIdx.x < 32) {
    s = threadIdx.x < (blockDim.x >> 5) ? part[threadIdx.x] : 0.0f;
    s = warp_sum(s);
    if (threadIdx.x == 0) part[0] = s;
  }
  __syncthreads();
  const float scale = 1.0f / sqrtf(part[0] / float(K) + eps);
  if (w)
    for (int64_t k = threadIdx.x; k < K; k += blockDim.x) yr[k] = (xr[k] * scale) * w[k];
  else
    for (int64_t k = threadIdx.x; k < K; k += blockDim.x) yr[k] = xr[k] * scale;
}

enum class Bin { Add, Mul };

template <Bin B>
__global__ void binary_kernel(Rows a, Rows b, Rows y, int64_t K, int64_t rows, bool broadcast) {
  pdl_wait();
  const int64_t per_row = (K + blockDim.x - 1) / blockDim.x * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < rows * per_row;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / per_row, k = i % per_row;
    if (k >= K) continue;
    const float av = reinterpret_cast<const float*>(a.row(r))[k];
    const float bv = reinterpret_cast<const float*>(b.row(broadcast ? 0 : r))[k];
    const_cast<float*>(reinterpret_cast<const float*>(y.row(r)))[k] = B == Bin::Add ? av + bv : av * bv;
  }
}

__global__ void scale_kernel(Rows a, Rows y, int64_t K, int64_t rows, float s) {
  pdl_wait();
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < rows * K; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / K, k = i % K;
    const_cast<float*>(reinterpret_cast<const float*>(y.row(r)))[k] = reinterpret_cast<const float*>(a.row(r))[k] * s;
  }
}

__device__ __forceinline__ float gelu_tanh(float x) {
  const float kSqrt2OverPi = 0.79788456080286535587989211986876f;
  const float kCoefA = 0.044715f;
  return 0.5f * x * (1.0f + tanhf(kSqrt2OverPi * x * (1.0f + kCoefA * x * x)));
}

template <bool Gelu>
__global__ void glu_kernel(Rows a, Rows b, Rows y, int64_t K, int64_t rows) {
  pdl_wait();
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < rows * K; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / K, k = i % K;
    const float x = reinterpret_cast<const float*>(a.row(r))[k];
    const float g = Gelu ? gelu_tanh(x) : x / (1.0f + expf(-x));
    const_cast<float*>(reinterpret_cast<const float*>(y.row(r)))[k] = g * reinterpret_cast<const float*>(b.row(r))[k];
  }
}

unsigned grid_for(int64_t n, const OpCtx& c) {
  return unsigned(std::min<int64_t>(blocks_for(n, 256), int64_t(c.sm_count) * 8));
}

}  // namespace

void op_rms_norm(const Tensor& dst, const OpCtx& c) {
  check_rows_f32("rms_norm", dst, dst.src[0]);
  const int64_t rows = dst.n_rows(), K = dst.ne[0];
  if (rows == 0) return;
  const int threads = K >= 1024 ? 1024 : K >= 256 ? 256 : 128;
  launch_kernel(rms_norm_kernel, unsigned(rows), threads, 0, c.stream, rows_of(*dst.src[0]), rows_of(dst), K, dst.fparams[0],
                                                             nullptr);
  WEIR_CUDA_CHECK_LAUNCH();
}

bool can_fuse_rms_norm_mul(const Tensor& norm, const Tensor& mul) {
  const Tensor* w = mul.src[1];
  return norm.op == Op::RmsNorm && mul.op == Op::Mul && mul.src[0] == &norm && w && w != &norm &&
         w->dtype == DType::F32 && w->nb[0] == 4 && w->n_rows() == 1 && w->ne[0] == norm.ne[0] && norm.src[0] &&
         norm.src[0]->dtype == DType::F32 && norm.src[0]->nb[0] == 4 && mul.dtype == DType::F32 && mul.nb[0] == 4 &&
         mul.ne[0] == norm.ne[0] && mul.n_rows() == norm.n_rows();
}

void op_rms_norm_mul(const Tensor& norm, const Tensor& mul, const OpCtx& c) {
  if (!can_fuse_rms_norm_mul(norm, mul)) bad_operands("rms_norm", norm, "cannot be fused with " + mul.name);
  const int64_t rows = norm.n_rows(), K = norm.ne[0];
  if (rows == 0) return;
  const int threads = K >= 1024 ? 1024 : K >= 256 ? 256 : 128;
  launch_kernel(rms_norm_kernel, unsigned(rows), threads, 0, c.stream, rows_of(*norm.src[0]), rows_of(mul), K, norm.fparams[0],
                                                             static_cast<const float*>(mul.src[1]->data));
  WEIR_CUDA_CHECK_LAUNCH();
}

void op_binary(const Tensor& dst, const OpCtx& c) {
  const char* name = dst.op == Op::Add ? "add" : "mul";
  check_rows_f32(name, dst, dst.src[0]);
  const Tensor* b = dst.src[1];
  if (!b || b->dtype != DType::F32 || b->nb[0] != 4 || b->ne[0] != dst.ne[0] ||
      (b->n_rows() != 1 && b->n_rows() != dst.n_rows()))
    bad_operands(name, dst, "b " + (b ? shape_of(*b) : std::string("(none)")) + " must be F32 [K] or of a's shape");
  const int64_t rows = dst.n_rows(), K = dst.ne[0];
  if (rows == 0) return;
  const bool bc = b->n_rows() == 1 && rows != 1;
  const int64_t per_row = (K + 255) / 256 * 256;
  if (dst.op == Op::Add)
    launch_kernel(binary_kernel<Bin::Add>, grid_for(rows * per_row, c), 256, 0, c.stream, rows_of(*dst.src[0]), rows_of(*b),
                                                                              rows_of(dst), K, rows, bc);
  else
    launch_kernel(binary_kernel<Bin::Mul>, grid_for(rows * per_row, c), 256, 0, c.stream, rows_of(*dst.src[0]), rows_of(*b),
                                                                              rows_of(dst), K, rows, bc);
  WEIR_CUDA_CHECK_LAUNCH();
}

void op_scale(const Tensor& dst, const OpCtx& c) {
  check_rows_f32("scale", dst, dst.src[0]);
  const int64_t rows = dst.n_rows(), K = dst.ne[0];
  if (rows == 0) return;
  launch_kernel(scale_kernel, grid_for(rows * K, c), 256, 0, c.stream, rows_of(*dst.src[0]), rows_of(dst), K, rows,
                                                             dst.fparams[0]);
  WEIR_CUDA_CHECK_LAUNCH();
}

void op_glu(const Tensor& dst, const OpCtx& c) {
  const char* name = dst.op == Op::GeluMul ? "gelu_mul" : "silu_mul";
  check_rows_f32(name, dst, dst.src[0]);
  check_rows_f32(name, dst, dst.src[1]);
  const int64_t rows = dst.n_rows(), K = dst.ne[0];
  if (rows == 0) return;
  if (dst.op == Op::GeluMul)
    launch_kernel(glu_kernel<true>, grid_for(rows * K, c), 256, 0, c.stream, rows_of(*dst.src[0]), rows_of(*dst.src[1]),
                                                                   rows_of(dst), K, rows);
  else
    launch_kernel(glu_kernel<false>, grid_for(rows * K, c), 256, 0, c.stream, rows_of(*dst.src[0]), rows_of(*dst.src[1]),
                                                                    rows_of(dst), K, rows);
  WEIR_CUDA_CHECK_LAUNCH();
}

}  // namespace weir::cuda
