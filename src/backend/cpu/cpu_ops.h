// CPU kernels, one function per op. Each computes its share of dst as
// thread ith of nth (a static slice, or chunks claimed through
// for_each_chunk in ops_common.h); the executor calls every thread for every
// node and puts a barrier between nodes. Kernels read tensor shapes and
// strides from dst and dst.src[] and never allocate per call except through
// the per-thread scratch.
#pragma once
#include <cstddef>
#include <vector>

#include "backend/cpu/chunk_counter.h"
#include "core/tensor.h"

namespace weir::cpu {

struct NumaPlan;

// Per-thread scratch memory, grown on demand and kept between calls.
struct Scratch {
  std::vector<float> f;
  float* floats(size_t n) {
    if (f.size() < n) f.resize(n);
    return f.data();
  }
};

struct OpContext {
  int ith = 0;
  int nth = 1;
  Scratch* scratch = nullptr;
  // No llama.cpp rounding emulation (CpuOptions::llama_rounding off): e.g.
  // gelu_mul computes the float formula instead of ggml's fp16 table.
  bool exact = false;
  // This thread's handle on the pool's shared loop counter (for_each_chunk in
  // ops_common.h); null when threads are run one by one, as in tests.
  ChunkCursor* chunks = nullptr;
  // Set when threads run on several NUMA nodes: matrix products then compute
  // only the weight rows placed on this thread's node (numa_plan.h).
  const NumaPlan* numa = nullptr;
};

void op_get_rows(const Tensor& dst, const OpContext& c);
void op_mul_mat(const Tensor& dst, const OpContext& c);
struct RepackedWeight;
// mul_mat whose weight the backend repacked (repack.h), x quantized.
void op_mul_mat_repacked(const Tensor& dst, const RepackedWeight& rw, const OpContext& c);
// mul_mat on AMX tiles (amx_product.h), x packed by amx_pack_token.
void op_mul_mat_amx(const Tensor& dst, const OpContext& c);
void op_rms_norm(const Tensor& dst, const OpContext& c);
void op_layer_norm(const Tensor& dst, const OpContext& c);
void op_gelu(const Tensor& dst, const OpContext& c);
void op_mul(const Tensor& dst, const OpContext& c);
void op_add(const Tensor& dst, const OpContext& c);
void op_scale(const Tensor& dst, const OpContext& c);
void op_softcap(const Tensor& dst, const OpContext& c);
void op_rope(const Tensor& dst, const OpContext& c);
void op_gelu_mul(const Tensor& dst, const OpContext& c);
void op_silu_mul(const Tensor& dst, const OpContext& c);
void op_swiglu_oai(const Tensor& dst, const OpContext& c);
void op_attention(const Tensor& dst, const OpContext& c);
void op_set_rows(const Tensor& dst, const OpContext& c);
void op_sample(const Tensor& dst, const OpContext& c);
void op_allow_tokens(const Tensor& dst, const OpContext& c);
// The group's collective (t.comm), called by thread 0 alone.
void op_all_reduce(const Tensor& t, const OpContext& ctx);
void op_all_gather(const Tensor& t, const OpContext& ctx);
// Mixture of experts (ops_moe.cpp).
void op_top_k(const Tensor& dst, const OpContext& c);
void op_moe_weights(const Tensor& dst, const OpContext& c);
void op_mul_mat_id(const Tensor& dst, const OpContext& c);
void op_moe_sum(const Tensor& dst, const OpContext& c);

// rms_norm followed by a mul of its output with a weight (one row, or one
// per row): both nodes' outputs, bit-identical to running them apart, in one
// pass over the rows with no barrier between them.
bool can_fuse_rms_norm_mul(const Tensor& norm, const Tensor& mul);
void op_rms_norm_mul(const Tensor& norm, const Tensor& mul, const OpContext& c);

// Plain single-threaded references for the optimized kernels, kept for tests.
void ref_mul_mat(const Tensor& dst);
void ref_mul_mat_id(const Tensor& dst);  // float x: a float64 dot per (slot, token, row)
void ref_silu_mul(const Tensor& dst);  // a / (1 + expf(-a)) * b

}  // namespace weir::cpu
