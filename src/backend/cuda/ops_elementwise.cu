// Row-wise element kernels: rms_norm, layer_norm, add, mul (b broadcast over
// rows), scale, gelu, gelu_mul, silu_mul. Every operand is addressed through its own
// strides (rows contiguous), so views work. Numerics: float, as the CPU's
// exact mode (gelu by the tanh formula, not ggml's fp16 table).
#include <cstdlib>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/cuda_util.cuh"
#include "backend/cuda/glu.cuh"
#include "backend/cuda/mul_mat_q8.h"
#include "backend/cuda/q8_act.cuh"

namespace weir::cuda {
namespace {

void check_rows_f32(const char* op, const Tensor& dst, const Tensor* a) {
  if (!a || a->dtype != DType::F32 || dst.dtype != DType::F32 || a->nb[0] != 4 || dst.nb[0] != 4)
    bad_operands(op, dst, "operands must be F32 with contiguous rows");
  if (a->ne[0] != dst.ne[0] || a->n_rows() != dst.n_rows())
    bad_operands(op, dst, "shape of " + shape_of(*a) + " does not match");
}

// The sum of s over the block (every thread gets it).
__device__ __forceinline__ float block_sum(float s) {
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
  return part[0];
}

// One block per row: sum of squares, then y = x * (1 / sqrt(mean + eps)),
// times w (a row) when given. With r (the residual), x = x + r first, and
// written back to xs. With q8.q, y is also quantized to 8 bits (K a
// multiple of 32: each warp's elements are one block).
__global__ void rms_norm_kernel(Rows x, Rows y, int64_t K, float eps, const float* __restrict__ w, Rows r, bool add,
                                Rows xs, Q8Act q8) {
  pdl_wait();
  const float* xr = reinterpret_cast<const float*>(x.row(blockIdx.x));
  float* yr = const_cast<float*>(reinterpret_cast<const float*>(y.row(blockIdx.x)));
  float s = 0.0f;
  if (add) {
    const float* rr = reinterpret_cast<const float*>(r.row(blockIdx.x));
    float* sum = const_cast<float*>(reinterpret_cast<const float*>(xs.row(blockIdx.x)));
    for (int64_t k = threadIdx.x; k < K; k += blockDim.x) {
      const float v = xr[k] + rr[k];
      sum[k] = v;
      s += v * v;
    }
    xr = sum;  // each thread rereads only what it wrote
  } else {
    for (int64_t k = threadIdx.x; k < K; k += blockDim.x) s += xr[k] * xr[k];
  }
  const float scale = 1.0f / sqrtf(block_sum(s) / float(K) + eps);
  for (int64_t k = threadIdx.x; k < K; k += blockDim.x) {
    const float v = w ? (xr[k] * scale) * w[k] : xr[k] * scale;
    yr[k] = v;
    if (q8.q) q8_store_block(q8, blockIdx.x, k / 32, v);
  }
}

// One block per row: the mean, then the mean of (x - mean)^2 (two block
// sums), y = (x - mean) / sqrt(variance + eps).
__global__ void layer_norm_kernel(Rows x, Rows y, int64_t K, float eps) {
  pdl_wait();
  const float* xr = reinterpret_cast<const float*>(x.row(blockIdx.x));
  float* yr = const_cast<float*>(reinterpret_cast<const float*>(y.row(blockIdx.x)));
  float s = 0.0f;
  for (int64_t k = threadIdx.x; k < K; k += blockDim.x) s += xr[k];
  const float mean = block_sum(s) / float(K);
  __syncthreads();  // every thread has read the first sum before block_sum's memory is reused
  float s2 = 0.0f;
  for (int64_t k = threadIdx.x; k < K; k += blockDim.x) {
    const float v = xr[k] - mean;
    s2 += v * v;
  }
  const float scale = 1.0f / sqrtf(block_sum(s2) / float(K) + eps);
  for (int64_t k = threadIdx.x; k < K; k += blockDim.x) yr[k] = (xr[k] - mean) * scale;
}

// The same with float4s held in registers (NV per thread; rows 16-byte
// aligned, K a multiple of 4): x is read once, and the quantization takes
// 4 elements a lane.
// With pre.w (add only): x is first normalized itself (eps pre.eps) and
// times pre.w, as a norm + mul launch before would have written it (the same
// sums in the same order): gemma3's post-attention and post-FFN norms.
struct PreNorm {
  const float* w = nullptr;
  float eps = 0.0f;
};
template <int NV>
__global__ void rms_norm_float4_kernel(Rows x, Rows y, int64_t K, float eps, const float* __restrict__ w, Rows r,
                                       bool add, Rows xs, Q8Act q8, PreNorm pre) {
  const int64_t row = blockIdx.x, n4 = K / 4;
  float4 v[NV], g[NV], g0[NV];
  // The norm weights first: no kernel writes them, so they are read before
  // pdl_wait(), while the kernel ahead finishes, not after the reduction.
#pragma unroll
  for (int j = 0; j < NV; ++j) {
    const int64_t i = threadIdx.x + int64_t(j) * blockDim.x;
    g[j] = w && i < n4 ? reinterpret_cast<const float4*>(w)[i] : make_float4(1, 1, 1, 1);
    g0[j] = pre.w && i < n4 ? reinterpret_cast<const float4*>(pre.w)[i] : make_float4(1, 1, 1, 1);
  }
  pdl_wait();
  const float4* xr = reinterpret_cast<const float4*>(x.row(row));
  const float4* rr = reinterpret_cast<const float4*>(r.row(row));
  // Every load first: a store to xs between them (it may alias x or r, as
  // far as the compiler knows) would hold each next load back a round trip
  // (NV = 4 was 12-15% slower per token than 1 for that reason).
  float4 b[NV];
#pragma unroll
  for (int j = 0; j < NV; ++j) {
    const int64_t i = threadIdx.x + int64_t(j) * blockDim.x;
    v[j] = i < n4 ? xr[i] : make_float4(0, 0, 0, 0);
    b[j] = add && i < n4 ? rr[i] : make_float4(0, 0, 0, 0);
  }
  if (pre.w) {
    float s0 = 0.0f;
#pragma unroll
    for (int j = 0; j < NV; ++j) s0 += v[j].x * v[j].x + v[j].y * v[j].y + v[j].z * v[j].z + v[j].w * v[j].w;
    const float sc = 1.0f / sqrtf(block_sum(s0) / float(K) + pre.eps);
    __syncthreads();  // block_sum's memory is used again below
#pragma unroll
    for (int j = 0; j < NV; ++j) {
      const float4 o = make_float4(v[j].x * sc, v[j].y * sc, v[j].z * sc, v[j].w * sc);
      v[j] = make_float4(o.x * g0[j].x, o.y * g0[j].y, o.z * g0[j].z, o.w * g0[j].w);
    }
  }
  float s = 0.0f;
#pragma unroll
  for (int j = 0; j < NV; ++j) {
    const int64_t i = threadIdx.x + int64_t(j) * blockDim.x;
    if (add) {
      v[j] = make_float4(v[j].x + b[j].x, v[j].y + b[j].y, v[j].z + b[j].z, v[j].w + b[j].w);
      if (i < n4) reinterpret_cast<float4*>(const_cast<char*>(xs.row(row)))[i] = v[j];
    }
    s += v[j].x * v[j].x + v[j].y * v[j].y + v[j].z * v[j].z + v[j].w * v[j].w;
  }
  const float scale = 1.0f / sqrtf(block_sum(s) / float(K) + eps);
  float4* yr = reinterpret_cast<float4*>(const_cast<char*>(y.row(row)));
#pragma unroll
  for (int j = 0; j < NV; ++j) {
    const int64_t i = threadIdx.x + int64_t(j) * blockDim.x;
    const bool live = i < n4;
    float4 o = make_float4(v[j].x * scale, v[j].y * scale, v[j].z * scale, v[j].w * scale);
    if (w) o = make_float4(o.x * g[j].x, o.y * g[j].y, o.z * g[j].z, o.w * g[j].w);
    if (live) yr[i] = o;
    if (q8.q) q8_store4(q8, row, i, o, live);
  }
}

// y = f(a, b) for a GLU, one thread per element, also quantized to 8 bits
// (K a multiple of 32; rows on the grid's y axis).
template <class F>
__global__ void glu_q8_kernel(Rows a, Rows b, Rows y, int64_t K, Q8Act q8, F f) {
  pdl_wait();
  const int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, r = blockIdx.y;
  if (k >= K) return;  // whole warps: K % 32 == 0
  const float v = f(reinterpret_cast<const float*>(a.row(r))[k], reinterpret_cast<const float*>(b.row(r))[k]);
  const_cast<float*>(reinterpret_cast<const float*>(y.row(r)))[k] = v;
  q8_store_block(q8, r, k / 32, v);
}
// The same on float4s (rows 16-byte aligned).
template <class F>
__global__ void glu_float4_q8_kernel(Rows a, Rows b, Rows y, int64_t K, Q8Act q8, F f) {
  pdl_wait();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, r = blockIdx.y;
  const bool live = i * 4 < K;  // whole groups of 8 lanes (K % 32 == 0); all lanes shuffle
  float4 v = make_float4(0, 0, 0, 0);
  if (live) {
    const float4 av = reinterpret_cast<const float4*>(a.row(r))[i], bv = reinterpret_cast<const float4*>(b.row(r))[i];
    v = make_float4(f(av.x, bv.x), f(av.y, bv.y), f(av.z, bv.z), f(av.w, bv.w));
    reinterpret_cast<float4*>(const_cast<char*>(y.row(r)))[i] = v;
  }
  q8_store4(q8, r, i, v, live);
}

// y = f(a, b) element by element, row by row (b broadcast when it has one
// row); V = 4 moves float4s where every operand's rows allow it. Rows go on
// the grid's y axis, so no thread divides its index.
template <int V, class F>
__global__ void map_kernel(Rows a, Rows b, Rows y, int64_t K, int64_t rows, bool has_b, bool bcast, F f) {
  pdl_wait();
  const int64_t n = K / V;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const float* ar = reinterpret_cast<const float*>(a.row(r));
    const float* br = has_b ? reinterpret_cast<const float*>(b.row(bcast ? 0 : r)) : nullptr;
    float* yr = const_cast<float*>(reinterpret_cast<const float*>(y.row(r)));
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
      if constexpr (V == 4) {
        const float4 av = reinterpret_cast<const float4*>(ar)[i];
        const float4 bv = br ? reinterpret_cast<const float4*>(br)[i] : make_float4(0, 0, 0, 0);
        reinterpret_cast<float4*>(yr)[i] = make_float4(f(av.x, bv.x), f(av.y, bv.y), f(av.z, bv.z), f(av.w, bv.w));
      } else {
        yr[i] = f(ar[i], br ? br[i] : 0.0f);
      }
    }
  }
}

struct AddF {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct MulF {
  __device__ float operator()(float a, float b) const { return a * b; }
};
struct GeluF {
  __device__ float operator()(float a, float) const { return gelu_tanh(a); }
};
struct ScaleF {
  float s;
  __device__ float operator()(float a, float) const { return a * s; }
};
struct SoftcapF {
  float cap;
  __device__ float operator()(float a, float) const { return cap * tanhf(a / cap); }
};

bool rows_aligned16(const Tensor& t) {
  return reinterpret_cast<uintptr_t>(t.data) % 16 == 0 && t.nb[1] % 16 == 0 && t.nb[2] % 16 == 0 && t.nb[3] % 16 == 0;
}

template <class F>
void map(const Tensor& dst, const Tensor& a, const Tensor* b, const OpCtx& c, F f) {
  const int64_t rows = dst.n_rows(), K = dst.ne[0];
  if (rows == 0 || K == 0) return;
  const bool bcast = b && b->n_rows() == 1 && rows != 1;
  const bool vec = K % 4 == 0 && rows_aligned16(dst) && rows_aligned16(a) && (!b || rows_aligned16(*b));
  const int64_t n = vec ? K / 4 : K;
  const dim3 grid(blocks_for(n, 256), unsigned(std::min<int64_t>(rows, 65535)));
  const Rows rb = b ? rows_of(*b) : rows_of(a);
  if (vec)
    launch_kernel(map_kernel<4, F>, grid, 256, 0, c.launch_stream(), rows_of(a), rb, rows_of(dst), K, rows,
                  b != nullptr, bcast, f);
  else
    launch_kernel(map_kernel<1, F>, grid, 256, 0, c.launch_stream(), rows_of(a), rb, rows_of(dst), K, rows,
                  b != nullptr, bcast, f);
}

// rms_norm_kernel's launch: the float4 kernel where rows allow it.
bool launch_norm(int64_t rows, int64_t K, const OpCtx& c, const Tensor& x, const Tensor& y, float eps, const float* w,
                 const Tensor* r, const Tensor* xs, Q8Act q8, PreNorm pre = {}) {
  const bool add = r != nullptr;
  const Rows rr = rows_of(add ? *r : y), rxs = rows_of(add ? *xs : y);
  const bool vec = K % 4 == 0 && K / 4 <= 4 * 1024 && rows_aligned16(x) && rows_aligned16(y) &&
                   (!add || (rows_aligned16(*r) && rows_aligned16(*xs))) && reinterpret_cast<uintptr_t>(w) % 16 == 0;
  if (!vec) {
    if (pre.w) return false;  // the float4 kernel alone takes a pre-norm
    const int threads = K >= 1024 ? 1024 : K >= 256 ? 256 : 128;
    launch_kernel(rms_norm_kernel, unsigned(rows), threads, 0, c.launch_stream(), rows_of(x), rows_of(y), K, eps, w, rr,
                  add, rxs, q8);
    return true;
  }
  const int64_t n4 = K / 4;
  const int want_nv = c.options().norm_float4s;  // float4s per thread at least (tuning)
  const int nv = want_nv >= 4 || n4 > 2048 ? 4 : want_nv == 2 || n4 > 1024 ? 2 : 1;
  const int threads = int(std::min<int64_t>(1024, ((n4 + nv - 1) / nv + 31) / 32 * 32));
  auto* k = nv == 1 ? rms_norm_float4_kernel<1> : nv == 2 ? rms_norm_float4_kernel<2> : rms_norm_float4_kernel<4>;
  launch_kernel(k, unsigned(rows), threads, 0, c.launch_stream(), rows_of(x), rows_of(y), K, eps, w, rr, add, rxs, q8,
                pre);
  return true;
}

// The 8-bit copy of out in scratch, when the plan asks for one.
Q8Act q8_out(const Tensor& out, const OpCtx& c) {
  if (!c.quantize_out) return {};
  const int64_t K = out.ne[0], T = out.n_rows();
  if (K % 32 || q8_act_bytes(K, T) > c.scratch_bytes) bad_operands("quantize", out, "cannot be quantized here");
  return Q8Act::in(c.scratch, K, T);
}

template <class F>
void glu(const Tensor& dst, const OpCtx& c, F f) {
  if (!c.quantize_out) return map(dst, *dst.src[0], dst.src[1], c, f);
  const int64_t K = dst.ne[0], rows = dst.n_rows();
  if (rows == 0) return;
  if (rows > 65535) bad_operands("glu", dst, "too many rows to quantize");
  if (rows_aligned16(dst) && rows_aligned16(*dst.src[0]) && rows_aligned16(*dst.src[1]))
    return launch_kernel(glu_float4_q8_kernel<F>, dim3(blocks_for(K / 4, 256), unsigned(rows)), 256, 0,
                         c.launch_stream(), rows_of(*dst.src[0]), rows_of(*dst.src[1]), rows_of(dst), K, q8_out(dst, c),
                         f);
  launch_kernel(glu_q8_kernel<F>, dim3(blocks_for(K, 256), unsigned(rows)), 256, 0, c.launch_stream(),
                rows_of(*dst.src[0]), rows_of(*dst.src[1]), rows_of(dst), K, q8_out(dst, c), f);
}

}  // namespace

void op_rms_norm(const Tensor& dst, const OpCtx& c) {
  check_rows_f32("rms_norm", dst, dst.src[0]);
  const int64_t rows = dst.n_rows(), K = dst.ne[0];
  if (rows == 0) return;
  launch_norm(rows, K, c, *dst.src[0], dst, dst.fparams[0], nullptr, nullptr, nullptr, q8_out(dst, c));
}

void op_layer_norm(const Tensor& dst, const OpCtx& c) {
  check_rows_f32("layer_norm", dst, dst.src[0]);
  const int64_t rows = dst.n_rows(), K = dst.ne[0];
  if (rows == 0) return;
  const int threads = K >= 1024 ? 1024 : K >= 256 ? 256 : 128;
  launch_kernel(layer_norm_kernel, unsigned(rows), threads, 0, c.launch_stream(), rows_of(*dst.src[0]), rows_of(dst),
                K, dst.fparams[0]);
}

void op_gelu(const Tensor& dst, const OpCtx& c) {
  check_rows_f32("gelu", dst, dst.src[0]);
  map(dst, *dst.src[0], nullptr, c, GeluF{});
}

void op_rms_norm_mul(const Tensor& norm, const Tensor& mul, const OpCtx& c) {
  if (!can_fuse_rms_norm_mul(norm, mul)) bad_operands("rms_norm", norm, "cannot be fused with " + mul.name);
  const int64_t rows = norm.n_rows(), K = norm.ne[0];
  if (rows == 0) return;
  launch_norm(rows, K, c, *norm.src[0], mul, norm.fparams[0], static_cast<const float*>(mul.src[1]->data), nullptr,
              nullptr, q8_out(mul, c));
}

void op_add_rms_norm_mul(const Tensor& add, const Tensor& norm, const Tensor& mul, const OpCtx& c) {
  if (!can_fuse_add_rms_norm_mul(add, norm, mul)) bad_operands("add", add, "cannot be fused with " + norm.name);
  const int64_t rows = norm.n_rows(), K = norm.ne[0];
  if (rows == 0) return;
  launch_norm(rows, K, c, *add.src[0], mul, norm.fparams[0], static_cast<const float*>(mul.src[1]->data), add.src[1],
              &add, q8_out(mul, c));
}

void op_norm_add_norm(const Tensor& norm0, const Tensor& mul0, const Tensor& add, const Tensor& norm,
                      const Tensor& mul, const OpCtx& c) {
  if (!can_fuse_norm_add_norm(norm0, mul0, add, norm, mul)) bad_operands("rms_norm", norm0, "cannot be fused");
  const int64_t rows = norm.n_rows(), K = norm.ne[0];
  if (rows == 0) return;
  const Tensor& other = add.src[0] == &mul0 ? *add.src[1] : *add.src[0];
  const PreNorm pre{static_cast<const float*>(mul0.src[1]->data), norm0.fparams[0]};
  if (launch_norm(rows, K, c, *norm0.src[0], mul, norm.fparams[0], static_cast<const float*>(mul.src[1]->data), &other,
                  &add, q8_out(mul, c), pre))
    return;
  // Rows the float4 kernel does not take: the two launches.
  OpCtx plain = c;
  plain.quantize_out = false;
  op_rms_norm_mul(norm0, mul0, plain);
  op_add_rms_norm_mul(add, norm, mul, c);
}

void op_binary(const Tensor& dst, const OpCtx& c) {
  const char* name = dst.op == Op::Add ? "add" : "mul";
  check_rows_f32(name, dst, dst.src[0]);
  const Tensor* b = dst.src[1];
  if (!b || b->dtype != DType::F32 || b->nb[0] != 4 || b->ne[0] != dst.ne[0] ||
      (b->n_rows() != 1 && b->n_rows() != dst.n_rows()))
    bad_operands(name, dst, "b " + (b ? shape_of(*b) : std::string("(none)")) + " must be F32 [K] or of a's shape");
  if (dst.op == Op::Add)
    map(dst, *dst.src[0], b, c, AddF{});
  else
    map(dst, *dst.src[0], b, c, MulF{});
}

void op_scale(const Tensor& dst, const OpCtx& c) {
  check_rows_f32("scale", dst, dst.src[0]);
  map(dst, *dst.src[0], nullptr, c, ScaleF{dst.fparams[0]});
}

void op_softcap(const Tensor& dst, const OpCtx& c) {
  check_rows_f32("softcap", dst, dst.src[0]);
  map(dst, *dst.src[0], nullptr, c, SoftcapF{dst.fparams[0]});
}

void op_glu(const Tensor& dst, const OpCtx& c) {
  const char* name = dst.op == Op::GeluMul ? "gelu_mul" : dst.op == Op::SiluMul ? "silu_mul" : "swiglu_oai";
  check_rows_f32(name, dst, dst.src[0]);
  check_rows_f32(name, dst, dst.src[1]);
  if (dst.op == Op::SwigluOai)
    glu(dst, c, SwigluOaiF{dst.fparams[0], dst.fparams[1]});
  else if (dst.op == Op::GeluMul)
    glu(dst, c, GeluMulF{});
  else
    glu(dst, c, SiluMulF{});
}

}  // namespace weir::cuda
