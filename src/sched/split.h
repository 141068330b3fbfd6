// A graph cut into runs, one backend each, and the copies and waits between
// them (the sync plan): pure host logic, unit-tested without any device.
//
// A run is a maximal stretch of consecutive nodes on one backend (a product
// run by op offload is a run of its own). State (a KV cache) read on
// another backend than its home is copied too: the window its views reach.
// Before a
// run, every tensor it reads that lives elsewhere is copied to its backend:
//  - from a device to the host (a GPU result a CPU run reads): a copy on the
//    device's queue, an event, and a host wait, once per device before the
//    run however many tensors come from it;
//  - from the host to a device (a CPU result, or a graph input): a copy on
//    the device's queue, no wait (host work is done when it is issued);
//  - from one device to another: the reader's queue waits on an event of
//    the writer's queue (on the device), then copies.
// The host waits only where a host-visible run reads a device's result, and
// once at the end of a step (Queue::synchronize): per step,
// 1 + host_waits() of the plan.
#pragma once
#include <vector>

#include "sched/assign.h"

namespace weir::sched {

struct Transfer {
  const Tensor* tensor;  // storage tensor (what views look at)
  int from;              // backend index, or kHost (a graph input)
  size_t bytes = 0;      // from its start: all that the run's views reach (0: the whole tensor)
};

struct Run {
  int backend = 0;
  // A product run by op offload, alone in its run: its weight is streamed
  // to the backend before it (Scheduler).
  bool streamed = false;
  std::vector<const Tensor*> nodes;  // in order; no leaves or views
  std::vector<Transfer> copies_in;   // before the run, in this order
  // Devices whose results this (host-visible) run reads: the host waits on
  // each one's event after its copies.
  std::vector<int> host_waits_on;
  // Devices this (device) run reads from: it waits on their events on the
  // device before its copies.
  std::vector<int> device_waits_on;
  // Tensors computed here that later runs or the caller read: kept alive
  // (outputs of the run's graph).
  std::vector<const Tensor*> outputs;
};

struct SplitPlan {
  std::vector<Run> runs;
  int host_waits() const;  // host waits between runs, per step
};

// host_visible: per backend, as AssignRules::host_visible.
SplitPlan split_graph(const Graph& g, const Assignment& a, const std::vector<bool>& host_visible);

}  // namespace weir::sched
