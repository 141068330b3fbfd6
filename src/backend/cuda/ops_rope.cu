// rope (core/graph.h): one thread per rotated pair. theta is built as the
// CPU reference builds it (backend/cpu/ops_rope.cpp): float(pos) times
// theta_scale = powf(base, -2/n_rot) once per pair index, divided by the
// pair's frequency factor, times freq_scale; the repeated products make the
// angles agree with the CPU's to the last bits.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/cuda_util.cuh"

namespace weir::cuda {
namespace {

__global__ void rope_kernel(Rows x, Rows y, const int32_t* pos, const float* ff, int64_t D, int64_t H, int64_t T,
                            int64_t rows, int n_rot, int step, int other, float theta_scale, float freq_scale) {
  pdl_wait();
  const int half = n_rot / 2;
  const int64_t n_pairs = rows * half;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n_pairs; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / half;
    const int p = int(i % half);
    const int64_t t = (r / H) % T;
    float theta = float(pos[t]);
    for (int k = 0; k < p; ++k) theta *= theta_scale;
    const float th = freq_scale * (ff ? theta / ff[p] : theta);
    float s, co;
    sincosf(th, &s, &co);
    const float* src = reinterpret_cast<const float*>(x.row(r));
    float* dst = const_cast<float*>(reinterpret_cast<const float*>(y.row(r)));
    const int a = p * step, b = a + other;
    const float x0 = src[a], x1 = src[b];
    dst[a] = x0 * co - x1 * s;
    dst[b] = x0 * s + x1 * co;
  }
}

// Dims past n_rot are copied.
__global__ void copy_tail_kernel(Rows x, Rows y, int64_t D, int64_t rows, int n_rot) {
  pdl_wait();
  const int64_t tail = D - n_rot;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < rows * tail; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / tail, k = n_rot + i % tail;
    const_cast<float*>(reinterpret_cast<const float*>(y.row(r)))[k] = reinterpret_cast<const float*>(x.row(r))[k];
  }
}

}  // namespace

void op_rope(const Tensor& dst, const OpCtx& c) {
  const Tensor* x = dst.src[0];
  const Tensor* pos = dst.src[1];
  const Tensor* ff = dst.src[2];
  if (!x || !pos || x->dtype != DType::F32 || x->nb[0] != 4 || dst.dtype != DType::F32 || dst.nb[0] != 4)
    bad_operands("rope", dst, "x must be F32 with contiguous rows");
  if (pos->dtype != DType::I32 || pos->ne[0] != x->ne[2])
    bad_operands("rope", dst, "positions must be I32 [" + std::to_string(x->ne[2]) + "]");
  const int64_t D = x->ne[0], H = x->ne[1], T = x->ne[2];
  const int n_rot = dst.iparams[0];
  const auto mode = RopeMode(dst.iparams[1]);
  if (n_rot <= 0 || n_rot % 2 || n_rot > D) bad_operands("rope", dst, "bad n_rot " + std::to_string(n_rot));
  if (mode != RopeMode::Neox && mode != RopeMode::Normal) bad_operands("rope", dst, "unknown mode");
  if (ff && (ff->dtype != DType::F32 || ff->ne[0] < n_rot / 2)) bad_operands("rope", dst, "bad frequency factors");
  const int64_t rows = dst.n_rows();
  if (rows == 0) return;
  const float theta_scale = powf(dst.fparams[0], -2.0f / float(n_rot));
  const int step = mode == RopeMode::Neox ? 1 : 2;
  const int other = mode == RopeMode::Neox ? n_rot / 2 : 1;
  const int64_t n = rows * (n_rot / 2);
  const unsigned grid = unsigned(std::min<int64_t>(blocks_for(n, 256), int64_t(c.sm_count) * 8));
  launch_kernel(rope_kernel, grid, 256, 0, c.stream, rows_of(*x), rows_of(dst), static_cast<const int32_t*>(pos->data),
                                          ff ? static_cast<const float*>(ff->data) : nullptr, D, H, T, rows, n_rot,
                                          step, other, theta_scale, dst.fparams[1]);
  WEIR_CUDA_CHECK_LAUNCH();
  if (n_rot < D) {
    launch_kernel(copy_tail_kernel, grid, 256, 0, c.stream, rows_of(*x), rows_of(dst), D, rows, n_rot);
    WEIR_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace weir::cuda
