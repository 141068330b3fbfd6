// Launching a plan: one visit over its launches, each handed to the
// launcher of its kind (cuda_ops.h, moe_ops.h).
#pragma once
#include <cstddef>

#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/plan/launch_plan.h"

namespace weir::cuda {

// Enqueues launches [begin, end) of p on ctx.stream with ctx's memory; the
// per-launch fields of ctx (x_from, quantize_out, pdl, ...) are set from
// each launch.
void run_launches(const LaunchPlan& p, size_t begin, size_t end, const OpCtx& ctx);

}  // namespace weir::cuda
