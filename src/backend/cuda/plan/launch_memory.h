// Where a graph's activations go when the CUDA backend runs it as a launch
// plan, and the plan's promise about them. One function places memory for
// the backend and for the plan's tests.
#pragma once
#include "backend/activation_plan.h"
#include "backend/cuda/plan/launch_plan.h"
#include "core/graph.h"

namespace weir::cuda {

// Offsets in one arena for g's inputs and node outputs, each launch's nodes
// [first, memory_end) freed together (activation_plan.h says why).
ActivationPlan plan_launch_memory(const Graph& g, const LaunchPlan& p);

// Points g's inputs and node outputs into the arena at base (views and
// set_rows at their sources; weights and other leaves with data stay).
void place_activations(Graph& g, const ActivationPlan& a, void* base);

// The planner's promise, checked once memory is placed: no node of a launch
// writes memory that an input from outside the launch occupies (the blocks
// of a launch run in no set order). Throws Error naming the launch.
void check_launch_memory(const LaunchPlan& p);

}  // namespace weir::cuda
