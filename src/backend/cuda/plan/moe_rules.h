// The host side of the 8-bit expert kernels (ops_moe_q8.cu), shared by the
// rules (moe_rules.cpp: the planner's questions in kernel_rules.h) and the
// launchers: the scratch a launch needs. Plain C++: no CUDA header.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "backend/cuda/plan/kernel_limits.h"

namespace weir::cuda {

// The most tiles P (slot, token) pairs of E experts make, cut into tiles of
// up to `tile` pairs of one expert (each expert's last tile may be short):
// for the smaller tile by default.
int64_t expert_max_tiles(int64_t P, int64_t E, int tile = std::min(kExpertGluTile, kExpertProductTile));
// Scratch: x's 8-bit blocks (unless the GLU's) or, for the MMA tiles, x in
// fp16 (expert_x_bytes); then, for more than kExpertDirectPairs pairs, the
// sort's order, tiles and count.
size_t expert_x_bytes(int64_t K, int64_t x_rows);
size_t expert_scratch_bytes(int64_t K, int64_t x_rows, int64_t P, int64_t E);

}  // namespace weir::cuda
