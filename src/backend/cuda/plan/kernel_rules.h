// What the CUDA kernels take, asked on the host: whether nodes can run as
// one launch (the fusion rules), which kernel a product gets, and the
// temporary memory a launch needs. Plain C++ with no CUDA header, so the
// launch planner and its tests build and run without nvcc (tests/cuda_plan);
// the launchers (cuda_ops.h) check the same rules before they launch. The
// terms (deferred norm, 8-bit activation blocks, row jobs) are defined in
// docs/architecture.md's glossary.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "backend/cuda_options.h"
#include "core/tensor.h"

namespace weir::cuda {

// Where a product launch reads its activations (x) from.
enum class ActivationSource : unsigned char {
  Rows,          // x's rows as the graph holds them (an 8-bit kernel quantizes them into scratch first)
  Q8InScratch,   // x as 8-bit blocks already in scratch: written by the launch before (a norm, a GLU,
                 // attention: Launch::quantize_out) or by the product launch before on the same x
  DeferredNorm,  // the add+norm product launch before wrote the norm's input times its weights, not yet
                 // divided by the rms (OpCtx::deferred_norm); the products divide their results by it
  GluQ8,         // the gate/up launch before wrote the GLU's result as 8-bit blocks (OpCtx::glu_q8)
};

// A rope or set_rows node run as a job of a rope/store launch or of the
// product launch before it (row jobs). A rope with `into` writes its
// result straight into that set_rows' cache rows; with `norm` (the
// rms_norm whose result, times a row of weights, the rope reads: qwen3's q
// and k norms) it normalizes its rows itself, from the norm's input.
struct RopeStoreNode {
  const Tensor* node;
  const Tensor* into = nullptr;
  const Tensor* norm = nullptr;
  const Tensor* scale = nullptr;  // a rope's only reader, a scale: the job writes the scaled rows in its place
  const Tensor* bias = nullptr;   // the job's input is this add's (rows plus a bias vector): the job adds it
};

// ---- Products (mul_mat) ----
size_t mul_mat_scratch_bytes(const Tensor& dst, const CudaOptions& o = {});
// Whether mul_mat quantizes x to 8 bits in scratch (decode products of
// integer-kernel types): consecutive such products on the same x share it.
bool mul_mat_quantizes_x(const Tensor& dst, const CudaOptions& o);
// Products that can run as one launch (up to mul_mat_max_group()): decode
// products on the same x with weights of one type and width.
bool can_group_mul_mat(const Tensor& a, const Tensor& b, const CudaOptions& o);
int mul_mat_max_group();
// Whether the decode products dsts[0..n) can give their results to jobs
// (jobs[k] reads product k's result: q and k roped in the normal mode, k
// into the KV cache, v written into its cache), so that no rope/store
// launch runs after them.
bool can_run_row_jobs(const Tensor* const* dsts, int n, const RopeStoreNode* jobs);
// product -> add -> rms_norm -> mul as one launch whose norm is deferred to
// the products that read mul's result (mul_mat_q8.h says how);
// deferred_norm_bytes: the memory (OpCtx::deferred_norm) it needs.
bool can_defer_norm(const Tensor& product, const Tensor& add, const Tensor& norm, const Tensor& mul);
// Whether taker (a product launched after the add+norm launch, reading
// mul's result) can read the deferred norm as the writer's kernel writes it
// (OpCtx::x_from DeferredNorm): 8-bit blocks for the 8-bit kernels, F32
// rows of s * w for the float kernel (F16, BF16, F32).
bool mul_mat_takes_deferred_norm(const Tensor& producer, const Tensor& taker);
size_t deferred_norm_bytes(const Tensor& product);
// gate and up (the decode products a and b, either order) and the GLU
// glu = act(gate) * up that alone reads them, in one launch: each block
// takes 32 rows of gate and the same of up, applies the GLU to its 32
// outputs and writes them only as 8-bit blocks into OpCtx::glu_q8
// (glu_q8_bytes) for the product after it (OpCtx::x_from GluQ8). No GLU
// kernel runs; gate, up and glu are not written.
bool can_fuse_glu(const Tensor& a, const Tensor& b, const Tensor& glu);
// The same for the float decode kernel (F16, BF16, ...; up to 4 tokens): the
// launch writes glu's result (F32) as the GLU kernel would.
bool can_fuse_vec_glu(const Tensor& a, const Tensor& b, const Tensor& glu);
size_t glu_q8_bytes(const Tensor& glu);

// ---- Norms ----
// rms_norm followed by a mul of its output by a row vector, in one kernel
// (mul's result; the norm's own output is not written).
bool can_fuse_rms_norm_mul(const Tensor& norm, const Tensor& mul);
// add (same shapes) whose result is then normalized and scaled as above: one
// kernel writes the sum (other nodes read it: the residual stream) and the
// scaled norm.
bool can_fuse_add_rms_norm_mul(const Tensor& add, const Tensor& norm, const Tensor& mul);
// rms_norm + mul of a tensor, added to another, then rms_norm + mul of the
// sum (gemma3's post-attention and post-FFN norms before the residual add
// and the next norm) in one kernel: the sum and the last mul's result are
// written, the first mul's is not.
bool can_fuse_norm_add_norm(const Tensor& norm0, const Tensor& mul0, const Tensor& add, const Tensor& norm,
                            const Tensor& mul);
// Whether out (a norm's, GLU's or attention's result) can also be written
// as 8-bit blocks in scratch for product (OpCtx::quantize_out; the product's
// OpCtx::x_from Q8InScratch), the product then skipping its own
// quantization of x.
bool can_quantize_for(const Tensor& out, const Tensor& product, const CudaOptions& o);

// ---- Ropes and KV-cache writes ----
// Ropes and set_rows in one launch (those of one attention block: q's rope,
// k's rope, the KV-cache writes). A rope with `into` writes its result
// straight into that set_rows' cache rows (set_rows is then not run; the
// rope's own result is not written): can_rope_into says when it may.
bool can_rope_into(const Tensor& rope, const Tensor& set_rows);
bool can_rope_store(const Tensor& t);  // a rope or set_rows this launch takes
// Whether rope's job can take the rms_norm + mul before it (rope reads the
// mul; RopeStoreNode::norm).
bool can_rope_norm(const Tensor& rope, const Tensor& norm, const Tensor& mul);
// Whether a rope/store job whose input is x (an add's result, or a view of
// it at its start) can add the add's bias itself: add = y + b, y as add's
// shape, b one F32 row broadcast over add's rows, all contiguous.
bool can_rope_bias(const Tensor& x, const Tensor& add);
bool can_rope_scale(const Tensor& rope, const Tensor& scale);
int rope_store_max_jobs();

// ---- Attention, sampling ----
size_t attention_scratch_bytes(const Tensor& dst, const CudaOptions& o = {});
size_t sample_scratch_bytes(const Tensor& dst);

// ---- Mixture of experts (moe_ops.h) ----
// top_k and the moe_weights of its picks (same logits) in one launch, the
// same results as the two launches.
bool can_fuse_route(const Tensor& top_k, const Tensor& weights);
// Whether op_mul_mat_id has a kernel for t's weights.
bool mul_mat_id_supported(const Tensor& t);
// The 8-bit expert kernels (the integer weight types; K and N multiples of
// 32): whether mul_mat_id runs on them.
bool has_expert_q8(const Tensor& mul_mat_id);
// Whether mul_mat_id (more pairs than decode's, a type with the MMA tile
// kernel) runs on the tensor cores: x in fp16, the pairs sorted into tiles
// of 64 of one expert (mul_mat_tile.h: MmaExperts). The plan then does not
// fuse the GLU into gate/up (that launch's tiles are the 8-bit kernel's).
bool expert_mma(const Tensor& mul_mat_id, const CudaOptions& o);
size_t expert_scratch_bytes(const Tensor& mul_mat_id);  // 0 where !has_expert_q8
// gate and up (mul_mat_id nodes a and b, either order, same x and ids) and
// the GLU that alone reads them in one launch, the GLU's result written
// only as 8-bit blocks into OpCtx::glu_q8 for the down product
// (OpCtx::x_from GluQ8).
bool can_fuse_expert_glu(const Tensor& a, const Tensor& b, const Tensor& glu);
size_t expert_glu_q8_bytes(const Tensor& glu);
// down and the moe_sum that alone reads it (decode: up to 64 pairs) in one
// launch: a block takes rows of one token through all its experts and sums
// them weighted, in slot order; down's own result is not written.
bool can_fuse_expert_down_sum(const Tensor& down, const Tensor& sum);

// ---- Programmatic dependent launch (OpCtx::pdl) ----
// CudaOptions::pdl_off_ops ("op,op"): whether op is listed, so its launches
// take no PDL (bisecting by op found the launch whose timing exposed a race:
// a fused norm over its own input, docs/perf.md).
bool pdl_off_for(Op op, const std::string& list);
// CudaOptions::pdl_nodes ("LO-HI,..."): only those plan nodes launch with
// PDL; whether node i is off (an empty spec: none).
bool pdl_off_for_node(size_t i, const std::string& spec);

}  // namespace weir::cuda
