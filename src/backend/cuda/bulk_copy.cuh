// Hopper's bulk copies (the TMA unit) from global to shared memory, and the
// transaction barriers (mbarrier) that say when they have landed. A kernel
// asks for a whole box of rows with one instruction; the copies run on
// their own, so the bytes in flight do not depend on what the threads do
// meanwhile. sm_90 and later: on older GPUs these trap, and the host never
// launches the kernels that use them there (bulk_copy_supported()).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/mma_ptx.cuh"
#include "backend/cuda/pdl.h"

namespace weir::cuda {

// Whether the current device has bulk copies.
inline bool bulk_copy_supported() { return hopper_or_later(); }

// A barrier expecting `count` arrivals a phase.
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(count) : "memory");
#else
  __trap();
#endif
}

// After mbar_init, before the copy unit may signal the barriers (then a
// __syncthreads() so that every thread sees them initialized).
__device__ __forceinline__ void mbar_init_fence() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#else
  __trap();
#endif
}

// One arrival that also says `bytes` more are to land in this phase.
__device__ __forceinline__ void mbar_arrive_expect(uint64_t* bar, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
#else
  __trap();
#endif
}

// Waits until the phase of the given parity has completed (its arrivals
// made and its bytes landed); the landed bytes are then visible.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const uint32_t a = smem_u32(bar);
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n\t.reg .pred p;\n\t"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
        "selp.u32 %0, 1, 0, p;\n\t}"
        : "=r"(done)
        : "r"(a), "r"(parity)
        : "memory");
  } while (!done);
#else
  __trap();
#endif
}

// The box at element (c0, c1) of a 2-D tensor map (tensor_map.h) to dst
// (128-byte aligned, this block's shared memory), landing on bar as the
// box's whole size (parts past the tensor's edges arrive as zeros). One
// instruction however many rows: the copy unit took ~125 cycles a 1-D copy
// (H100: one 576-byte copy a row slice made the decode products 20-30%
// slower than loads from registers; boxes of 32 such rows, 6-12%).
__device__ __forceinline__ void tensor_copy_2d(void* dst, const void* map, int c0, int c1, uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(
          smem_u32(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(smem_u32(bar))
      : "memory");
#else
  __trap();
#endif
}

}  // namespace weir::cuda
