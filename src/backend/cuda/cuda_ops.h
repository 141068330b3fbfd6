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

#include "backend/cuda_options.h"
#include "core/tensor.h"

namespace weir::cuda {

// A rope or set_rows node run as a job (rope_job.cuh); a rope with `into`
// writes its result straight into that set_rows' cache rows; a rope with
// `norm` (the rms_norm whose result, times a row of weights, the rope
// reads: qwen3's q and k norms) normalizes its rows itself, from the norm's
// input.
struct RopeStoreNode {
  const Tensor* node;
  const Tensor* into = nullptr;
  const Tensor* norm = nullptr;
  const Tensor* scale = nullptr;  // a rope's only reader, a scale: the job writes the scaled rows in its place
  const Tensor* bias = nullptr;   // the job's input is this add's (rows plus a bias vector): the job adds it
};

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
  // mul_mat: x is already in scratch as 8-bit blocks, made by the product
  // just before on the same x (q, k and v; gate and up).
  bool x_quantized = false;
  // rms_norm(+mul), add+rms_norm+mul, GLUs, attention: also write the
  // result to scratch as 8-bit blocks (q8_act.cuh) for the product launched
  // next.
  bool quantize_out = false;
  // mul_mat: no kernel of the graph writes the weights (src[0], every
  // product of a group), so a kernel may read them before pdl_wait();
  // attention: the same of its mask.
  bool w_fixed = false;
  // The residual norm folded into the products around it (mul_mat_q8.h):
  // fold is device memory a folding product writes; a product with
  // x_folded reads its x from there (with x_quantized) and scales its
  // results by 1 / rms (the norm's eps: fold_eps).
  void* fold = nullptr;
  size_t fold_bytes = 0;
  bool x_folded = false;
  float fold_eps = 0.0f;
  const Tensor* fold_product = nullptr;  // x_folded: the product that folded it
  // mul_mat group: product k's result goes to row_jobs[k] (a rope or
  // set_rows of it: can_run_row_jobs) instead of its own output.
  const RopeStoreNode* row_jobs = nullptr;
  // Device memory where a launch hands its result as 8-bit blocks to the
  // next product launch (the GLU in the gate/up launch: op_mul_mat_glu);
  // a product with x_handed reads its x from there.
  void* hand = nullptr;
  size_t hand_bytes = 0;
  bool x_handed = false;
};

void op_get_rows(const Tensor& dst, const OpCtx& c);
void op_set_rows(const Tensor& dst, const OpCtx& c);
void check_set_rows(const Tensor& dst);  // throws unless set_rows' operands are ones the kernels take
void op_mul_mat(const Tensor& dst, const OpCtx& c);
size_t mul_mat_scratch_bytes(const Tensor& dst, const CudaOptions& o = {});
// Whether mul_mat quantizes x to 8 bits in scratch (decode products of
// integer-kernel types): consecutive such products on the same x share it.
bool mul_mat_quantizes_x(const Tensor& dst);
// Products that can run as one launch (up to mul_mat_max_group()): decode
// products on the same x with weights of one type and width.
bool can_group_mul_mat(const Tensor& a, const Tensor& b, const CudaOptions& o);
int mul_mat_max_group();
void op_mul_mat_group(const Tensor* const* dsts, int n, const OpCtx& c);
// product -> add -> rms_norm -> mul as one launch, the norm folded into the
// products around it (mul_mat_q8.h says how); fold_norm_bytes: the memory
// (OpCtx::fold) it needs.
// Whether the decode products dsts[0..n) can hand their results to jobs
// (jobs[k] reads product k's result: q and k roped in the normal mode, k
// into the KV cache, v written into its cache), so that no rope_store launch
// runs after them.
bool can_run_row_jobs(const Tensor* const* dsts, int n, const RopeStoreNode* jobs);
bool can_fold_norm(const Tensor& product, const Tensor& add, const Tensor& norm, const Tensor& mul);
// Whether taker (a product launched after the fold, reading mul's result)
// can read it as the producer's kernel writes it: 8-bit blocks for the
// 8-bit kernels (with OpCtx::x_quantized), F32 rows of s * w for the float
// kernel (F16, BF16, F32).
bool mul_mat_takes_fold(const Tensor& producer, const Tensor& taker);
size_t fold_norm_bytes(const Tensor& product);
void op_mul_mat_fold_norm(const Tensor& product, const Tensor& add, const Tensor& norm, const Tensor& mul,
                          const OpCtx& c);
// gate and up (the decode products a and b, either order) and the GLU
// glu = act(gate) * up that alone reads them, in one launch: each block
// takes 32 rows of gate and the same of up, applies the GLU to its 32
// outputs and writes them only as 8-bit blocks into c.hand (glu_hand_bytes)
// for the product after it (OpCtx::x_handed). No GLU kernel runs; gate, up
// and glu are not written.
bool can_fuse_glu(const Tensor& a, const Tensor& b, const Tensor& glu);
// The same for the float decode kernel (F16, BF16, ...; up to 4 tokens): the
// launch writes glu's result (F32) as the GLU kernel would.
bool can_fuse_vec_glu(const Tensor& a, const Tensor& b, const Tensor& glu);
size_t glu_hand_bytes(const Tensor& glu);
void op_mul_mat_glu(const Tensor& a, const Tensor& b, const Tensor& glu, const OpCtx& c);
void op_rms_norm(const Tensor& dst, const OpCtx& c);
// rms_norm followed by a mul of its output by a row vector, in one kernel
// (mul's result; the norm's own output is not written).
bool can_fuse_rms_norm_mul(const Tensor& norm, const Tensor& mul);
void op_rms_norm_mul(const Tensor& norm, const Tensor& mul, const OpCtx& c);
// add (same shapes) whose result is then normalized and scaled as above: one
// kernel writes the sum (other nodes read it: the residual stream) and the
// scaled norm.
bool can_fuse_add_rms_norm_mul(const Tensor& add, const Tensor& norm, const Tensor& mul);
void op_add_rms_norm_mul(const Tensor& add, const Tensor& norm, const Tensor& mul, const OpCtx& c);
// rms_norm + mul of a tensor, added to another, then rms_norm + mul of the
// sum (gemma3's post-attention and post-FFN norms before the residual add
// and the next norm) in one kernel: the sum and the last mul's result are
// written, the first mul's is not.
bool can_fuse_norm_add_norm(const Tensor& norm0, const Tensor& mul0, const Tensor& add, const Tensor& norm,
                            const Tensor& mul);
void op_norm_add_norm(const Tensor& norm0, const Tensor& mul0, const Tensor& add, const Tensor& norm,
                      const Tensor& mul, const OpCtx& c);
// Whether out (a norm's or GLU's result) can be handed to product as 8-bit
// blocks in scratch (OpCtx::quantize_out), the product then skipping its own
// quantization of x.
bool can_quantize_for(const Tensor& out, const Tensor& product);
void op_binary(const Tensor& dst, const OpCtx& c);  // add, mul
void op_scale(const Tensor& dst, const OpCtx& c);
void op_glu(const Tensor& dst, const OpCtx& c);  // gelu_mul, silu_mul
void op_rope(const Tensor& dst, const OpCtx& c);
// Ropes and set_rows in one launch (those of one attention block: q's rope,
// k's rope, the KV-cache writes). A rope with `into` writes its result
// straight into that set_rows' cache rows (set_rows is then not run; the
// rope's own result is not written): can_rope_into says when it may.
bool can_rope_into(const Tensor& rope, const Tensor& set_rows);
bool can_rope_store(const Tensor& t);  // a rope or set_rows this launch takes
// Whether rope's job can take the rms_norm + mul before it (rope reads the
// mul; RopeStoreNode::norm).
bool can_rope_norm(const Tensor& rope, const Tensor& norm, const Tensor& mul);
// Whether a rope_store job whose input is x (an add's result, or a view of
// it at its start) can add the add's bias itself: add = y + b, y as add's
// shape, b one F32 row broadcast over add's rows, all contiguous.
bool can_rope_bias(const Tensor& x, const Tensor& add);
bool can_rope_scale(const Tensor& rope, const Tensor& scale);
int rope_store_max_jobs();
void op_rope_store(const RopeStoreNode* nodes, int n, const OpCtx& c);
void op_attention(const Tensor& dst, const OpCtx& c);
size_t attention_scratch_bytes(const Tensor& dst, const CudaOptions& o = {});
void op_sample(const Tensor& dst, const OpCtx& c);
size_t sample_scratch_bytes(const Tensor& dst);

}  // namespace weir::cuda
