// rope (core/graph.h): one thread per rotated pair, the angles as
// rope_angle (rope_job.cuh) builds them.
#include <cuda_fp16.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/cuda_util.cuh"
#include "backend/cuda/plan/kernel_limits.h"
#include "backend/cuda/rope_job.cuh"

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
    float s, co;
    rope_angle(pos[t], p, theta_scale, freq_scale, ff, &s, &co);
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
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < rows * tail;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / tail, k = n_rot + i % tail;
    const_cast<float*>(reinterpret_cast<const float*>(y.row(r)))[k] = reinterpret_cast<const float*>(x.row(r))[k];
  }
}

// Up to kMaxJobs (plan/kernel_limits.h) ropes and row copies (set_rows) in
// one launch; each job has its own range of blocks.
struct Jobs {
  RopeJob j[kMaxJobs];
  unsigned first_block[kMaxJobs + 1];
  int n;
};

// A job's blocks are whole warps of items, so a normalized rope's warp
// takes 32 pairs of one row; so does a rope into an 8-bit cache (its pairs
// a multiple of 32: can_rope_into), whose warp then holds whole blocks:
// two (elements 2p, 2p + 1 of pairs p: lanes 0-15 one block, 16-31 the
// next) in the normal mode, two (the pairs' first elements, their second
// ones, D / 2 on) in the neox mode; a copy into an 8-bit cache (rows of
// whole blocks) one block a warp.
__global__ void rope_store_kernel(Jobs jobs) {
  pdl_wait();
  int ji = 0;
  while (ji + 1 < jobs.n && blockIdx.x >= jobs.first_block[ji + 1]) ++ji;
  const RopeJob& J = jobs.j[ji];
  const int64_t stride = int64_t(jobs.first_block[ji + 1] - jobs.first_block[ji]) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x - jobs.first_block[ji]) * blockDim.x + threadIdx.x; i < J.items; i += stride) {
    if (J.rope) {
      const int half = J.n_rot / 2;
      const int64_t r = i / half, h = r % J.H, t = (r / J.H) % J.T;
      const int p = int(i % half);
      float s, co;
      rope_angle(J.pos[t], p, J.theta_scale, J.freq_scale, J.ff, &s, &co);
      const float* src = reinterpret_cast<const float*>(J.x.row(r));
      const int a = p * J.step, b = a + J.other;
      float x0 = src[a], x1 = src[b];
      if (J.bias) x0 += J.bias[h * J.D + a], x1 += J.bias[h * J.D + b];
      if (J.nw) {  // the row's norm: its half pairs are whole warps (half % 32 == 0, can_rope_norm)
        float ss = 0.0f;
        for (int64_t k = threadIdx.x & 31; k < J.D; k += 32) ss += src[k] * src[k];
        const float scale = 1.0f / sqrtf(warp_sum(ss) / float(J.D) + J.neps);
        x0 = (x0 * scale) * J.nw[a];
        x1 = (x1 * scale) * J.nw[b];
      }
      const float ya = x0 * co - x1 * s, yb = x0 * s + x1 * co;  // then scaled, as a scale node after the rope
      if (J.q8) {
        if (J.step == 2) {
          put_q8<2>(J, t, h, a, {ya * J.oscale, yb * J.oscale});
        } else {
          put_q8<1>(J, t, h, a, {ya * J.oscale});
          put_q8<1>(J, t, h, b, {yb * J.oscale});
        }
        continue;
      }
      put(J, t, h, a, ya * J.oscale);
      put(J, t, h, b, yb * J.oscale);
    } else {
      const int64_t t = i / J.D, a = i % J.D;
      float v = reinterpret_cast<const float*>(J.x.row(t))[a];
      if (J.bias) v += J.bias[a];
      if (J.q8)
        put_q8<1>(J, t, 0, a, {v});
      else
        put(J, t, 0, a, v);
    }
  }
}

void check_rope(const Tensor& dst) {
  const Tensor* x = dst.src[0];
  const Tensor* pos = dst.src[1];
  const Tensor* ff = dst.src[2];
  if (!x || !pos || x->dtype != DType::F32 || x->nb[0] != 4 || dst.dtype != DType::F32 || dst.nb[0] != 4)
    bad_operands("rope", dst, "x must be F32 with contiguous rows");
  if (pos->dtype != DType::I32 || pos->ne[0] != x->ne[2])
    bad_operands("rope", dst, "positions must be I32 [" + std::to_string(x->ne[2]) + "]");
  const int n_rot = dst.iparams[0];
  const auto mode = RopeMode(dst.iparams[1]);
  if (n_rot <= 0 || n_rot % 2 || n_rot > x->ne[0]) bad_operands("rope", dst, "bad n_rot " + std::to_string(n_rot));
  if (mode != RopeMode::Neox && mode != RopeMode::Normal) bad_operands("rope", dst, "unknown mode");
  if (ff && (ff->dtype != DType::F32 || ff->ne[0] < n_rot / 2)) bad_operands("rope", dst, "bad frequency factors");
}

// set_rows s's table as a job's output (its rows by s's indices).
void cache_out(RopeJob& J, const Tensor& s) {
  J.out = static_cast<char*>(s.data);
  J.out_t = int64_t(s.nb[1]);
  J.idx = static_cast<const int32_t*>(s.src[2]->data);
  J.n_out_rows = s.ne[1];
  J.f16 = s.src[0]->dtype == DType::F16;
  J.q8 = s.src[0]->dtype == DType::Q8_0;
}

// A job's input rows x (the add's result, or a view of it) read from the
// add's first operand, and the bias it adds (can_rope_bias).
void take_bias(RopeJob& J, const Tensor& t, const Tensor& x, const Tensor& add) {
  if (!can_rope_bias(x, add)) bad_operands(op_name(t.op), t, "cannot add " + add.name + " itself");
  J.x.base = static_cast<const char*>(add.src[0]->data);
  J.bias = static_cast<const float*>(add.src[1]->data);
}
}  // namespace

RopeJob make_rope_job(const RopeStoreNode& n) {
  const Tensor& t = *n.node;
  RopeJob J{};
  if (t.op == Op::Rope) {
    check_rope(t);
    const Tensor& x = *t.src[0];
    if (t.iparams[0] != x.ne[0] || t.ne[3] != 1) bad_operands("rope", t, "partial rope cannot be fused");
    J.rope = true;
    J.x = rows_of(x);
    if (n.norm) {
      if (!can_rope_norm(t, *n.norm, x)) bad_operands("rope", t, "cannot normalize its rows itself");
      J.x = rows_of(*n.norm->src[0]);
      J.nw = static_cast<const float*>(x.src[1]->data);
      J.neps = n.norm->fparams[0];
    }
    if (n.bias) {
      if (n.norm) bad_operands("rope", t, "cannot both normalize its rows and add a bias");
      take_bias(J, t, x, *n.bias);
    }
    J.D = x.ne[0], J.H = x.ne[1], J.T = x.ne[2];
    J.pos = static_cast<const int32_t*>(t.src[1]->data);
    J.ff = t.src[2] ? static_cast<const float*>(t.src[2]->data) : nullptr;
    J.n_rot = t.iparams[0];
    const auto mode = RopeMode(t.iparams[1]);
    J.step = mode == RopeMode::Neox ? 1 : 2;
    J.other = mode == RopeMode::Neox ? J.n_rot / 2 : 1;
    J.theta_scale = powf(t.fparams[0], -2.0f / float(J.n_rot));
    J.freq_scale = t.fparams[1];
    J.items = J.H * J.T * (J.n_rot / 2);
    J.oscale = 1.0f;
    if (n.scale && (n.into || !can_rope_scale(t, *n.scale))) bad_operands("rope", t, "cannot apply " + n.scale->name);
    if (n.into) {
      if (!can_rope_into(t, *n.into)) bad_operands("rope", t, "cannot be written into " + n.into->name);
      check_set_rows(*n.into);
      cache_out(J, *n.into);
      J.out_h = J.q8 ? J.D / 32 * kQ8Bytes : J.D * (J.f16 ? 2 : 4);
    } else {
      const Tensor& out = n.scale ? *n.scale : t;
      J.out = static_cast<char*>(out.data);
      J.out_t = int64_t(out.nb[2]);
      J.out_h = int64_t(out.nb[1]);
      if (n.scale) J.oscale = n.scale->fparams[0];
    }
  } else if (t.op == Op::SetRows) {
    check_set_rows(t);
    const Tensor& src = *t.src[1];
    J.x = rows_of(src);
    J.D = src.ne[0], J.H = 1, J.T = src.n_rows();
    J.items = J.D * J.T;
    cache_out(J, t);
    if (n.bias) take_bias(J, t, src, *n.bias);
  } else {
    bad_operands("rope_store", t, "is neither rope nor set_rows");
  }
  return J;
}

void op_rope_store(const RopeStoreNode* nodes, int n, const OpCtx& c) {
  if (n < 1 || n > kMaxJobs) throw Error("cuda rope_store: bad job count");
  Jobs jobs{};
  jobs.n = n;
  unsigned blocks = 0;
  const unsigned cap = unsigned(c.sm_count) * 4;
  for (int i = 0; i < n; ++i) {
    jobs.j[i] = make_rope_job(nodes[i]);
    jobs.first_block[i] = blocks;
    blocks += std::max(1u, std::min(cap, blocks_for(jobs.j[i].items, 256)));
  }
  jobs.first_block[n] = blocks;
  launch_kernel(rope_store_kernel, blocks, 256, 0, c.launch_stream(), jobs);
  WEIR_CUDA_CHECK_LAUNCH();
}

void op_rope(const Tensor& dst, const OpCtx& c) {
  check_rope(dst);
  const Tensor* x = dst.src[0];
  const Tensor* pos = dst.src[1];
  const Tensor* ff = dst.src[2];
  const int64_t D = x->ne[0], H = x->ne[1], T = x->ne[2];
  const int n_rot = dst.iparams[0];
  const auto mode = RopeMode(dst.iparams[1]);
  const int64_t rows = dst.n_rows();
  if (rows == 0) return;
  const float theta_scale = powf(dst.fparams[0], -2.0f / float(n_rot));
  const int step = mode == RopeMode::Neox ? 1 : 2;
  const int other = mode == RopeMode::Neox ? n_rot / 2 : 1;
  const int64_t n = rows * (n_rot / 2);
  const unsigned grid = unsigned(std::min<int64_t>(blocks_for(n, 256), int64_t(c.sm_count) * 8));
  launch_kernel(rope_kernel, grid, 256, 0, c.launch_stream(), rows_of(*x), rows_of(dst),
                static_cast<const int32_t*>(pos->data), ff ? static_cast<const float*>(ff->data) : nullptr, D, H, T,
                rows, n_rot, step, other, theta_scale, dst.fparams[1]);
  WEIR_CUDA_CHECK_LAUNCH();
  if (n_rot < D) {
    launch_kernel(copy_tail_kernel, grid, 256, 0, c.launch_stream(), rows_of(*x), rows_of(dst), D, rows, n_rot);
    WEIR_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace weir::cuda
