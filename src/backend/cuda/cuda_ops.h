// The CUDA backend's kernels, one launcher per op (the op set and its
// semantics: core/graph.h; the CPU kernels in backend/cpu are the reference
// and the tests compare against them). A launcher checks the operands,
// enqueues its kernels on c.stream and returns; it never synchronizes and
// never allocates (temporary memory is c.scratch, sized by the op's
// *_scratch_bytes at plan time), so the backend can record it into a CUDA
// graph. Tensor data pointers are device pointers; shapes and strides are
// the graph's.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/pdl.h"
#include "backend/cuda/plan/kernel_rules.h"
#include "backend/cuda_options.h"
#include "core/tensor.h"

namespace weir::cuda {

struct OpCtx {
  // The backend's options (its kernel choices); null: the defaults.
  const CudaOptions* opts = nullptr;
  const CudaOptions& options() const {
    static const CudaOptions defaults;
    return opts ? *opts : defaults;
  }
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  void* scratch = nullptr;  // device memory for this node alone, 256-byte aligned
  size_t scratch_bytes = 0;
  int sm_count = 1;
  // Kernels launch with programmatic dependent launch (Hopper and later):
  // set by the backend for each launch (CudaOptions::pdl, pdl_off_ops,
  // pdl_nodes and the device's support); off in a kernel test's direct call.
  bool pdl = false;
  // The stream and PDL choice this node's kernels launch with (launch_kernel).
  LaunchStream launch_stream() const { return {stream, pdl}; }
  // Products: where x comes from (plan/kernel_rules.h).
  ActivationSource x_from = ActivationSource::Rows;
  // rms_norm(+mul), add+rms_norm+mul, GLUs, attention: also write the
  // result to scratch as 8-bit blocks (q8_act.cuh) for the product launched
  // next.
  bool quantize_out = false;
  // mul_mat: no kernel of the graph writes the weights (src[0], every
  // product of a group), so a kernel may read them before pdl_wait();
  // attention: the same of its mask.
  bool weights_constant = false;
  // A deferred norm (glossary: docs/architecture.md): a product launch ran
  // the residual add and the rms norm's sum of squares after it and wrote
  // the norm's input times its weights, not yet divided by the rms, into
  // deferred_norm (device memory). A product with x_from DeferredNorm reads
  // its x from there (8-bit blocks for the 8-bit kernels, else floats) and
  // divides its results by the rms (the norm's eps: deferred_norm_eps).
  void* deferred_norm = nullptr;
  size_t deferred_norm_capacity = 0;
  float deferred_norm_eps = 0.0f;
  const Tensor* deferred_norm_writer = nullptr;  // the product whose launch wrote it
  // mul_mat group: product k's result goes to row_jobs[k] (a rope or
  // set_rows of it: can_run_row_jobs) instead of its own output.
  const RopeStoreNode* row_jobs = nullptr;
  // Device memory where the gate/up launch writes the GLU's result as
  // 8-bit blocks for the next product launch (op_mul_mat_glu,
  // op_expert_glu); a product with x_from GluQ8 reads its x from there.
  void* glu_q8 = nullptr;
  size_t glu_q8_capacity = 0;
};

// One launcher per op, and one per fused launch: a fused launcher runs the
// nodes its rule in plan/kernel_rules.h accepts (op_rms_norm_mul:
// can_fuse_rms_norm_mul, op_mul_mat_add_norm: can_defer_norm, ...) and
// throws on others.
void op_get_rows(const Tensor& dst, const OpCtx& c);
void op_set_rows(const Tensor& dst, const OpCtx& c);
void check_set_rows(const Tensor& dst);  // throws unless set_rows' operands are ones the kernels take
void op_mul_mat(const Tensor& dst, const OpCtx& c);
void op_mul_mat_group(const Tensor* const* dsts, int n, const OpCtx& c);
void op_mul_mat_add_norm(const Tensor& product, const Tensor& add, const Tensor& norm, const Tensor& mul,
                          const OpCtx& c);
void op_mul_mat_glu(const Tensor& a, const Tensor& b, const Tensor& glu, const OpCtx& c);
void op_rms_norm(const Tensor& dst, const OpCtx& c);
void op_layer_norm(const Tensor& dst, const OpCtx& c);
void op_gelu(const Tensor& dst, const OpCtx& c);
void op_rms_norm_mul(const Tensor& norm, const Tensor& mul, const OpCtx& c);
void op_add_rms_norm_mul(const Tensor& add, const Tensor& norm, const Tensor& mul, const OpCtx& c);
void op_norm_add_norm(const Tensor& norm0, const Tensor& mul0, const Tensor& add, const Tensor& norm,
                      const Tensor& mul, const OpCtx& c);
void op_binary(const Tensor& dst, const OpCtx& c);  // add, mul
void op_scale(const Tensor& dst, const OpCtx& c);
void op_softcap(const Tensor& dst, const OpCtx& c);
void op_glu(const Tensor& dst, const OpCtx& c);  // gelu_mul, silu_mul, swiglu_oai
void op_rope(const Tensor& dst, const OpCtx& c);
void op_rope_store(const RopeStoreNode* nodes, int n, const OpCtx& c);
void op_attention(const Tensor& dst, const OpCtx& c);
void op_sample(const Tensor& dst, const OpCtx& c);
void op_allow_tokens(const Tensor& dst, const OpCtx& c);

}  // namespace weir::cuda
