// Which backend runs each node of a graph: pure host logic, unit-tested
// without any device.
//
// The rules, in order:
//  1. A node that reads a weight runs where that weight lives (its home,
//     decided once at load: -ngl, -ot); one that reads or writes state (the
//     KV cache) runs where that state lives. Views follow what they view.
//  2. Op offload: a matrix product whose weight lives on the host but whose
//     batch has at least offload_min_batch columns runs on the offload
//     backend, its weight streamed there (prefill of CPU-resident layers on
//     the GPU); so does attention over a host KV cache (the cache's window
//     is copied), and a host layer's norm scales and biases do not hold
//     their nodes back; decode stays on the weights' home.
//  3. A node without a home runs where one of its inputs was computed,
//     preferring a device (a GPU) to the host;
//  4. ... or, when its inputs are all on the host, where all of its readers
//     run if they agree on one device and it has at most one source computed
//     on the host (a norm before a GPU layer's first product goes to the
//     GPU, so that only its input crosses; an add of two host results
//     stays, so that only its sum crosses);
//  5. ... or else on the host backend.
//  6. A backend that does not support a node gives it to the host backend.
// Graph inputs (leaves with no home: tokens, positions, masks) are host
// memory, copied to each device that reads them.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "core/graph.h"

namespace weir::sched {

// Where a tensor lives: a backend's index, or kHost for the inputs in host
// memory that every host-visible backend reads in place.
inline constexpr int kHost = -1;

struct AssignRules {
  // One entry a backend: whether the host reads its memory directly (the
  // CPU), and whether it has a kernel for a node.
  std::vector<bool> host_visible;
  std::function<bool(int backend, const Tensor& node)> supports;
  // The backend a weight leaf lives on when `node` reads it, or kHost when
  // the leaf is not a weight. (A tied embedding is read by the input
  // lookup and by the output head, which may live apart.)
  std::function<int(const Tensor& node, const Tensor& leaf)> weight_home;
  // The backend whose memory holds a leaf that is state (the KV cache), or
  // kHost.
  std::function<int(const Tensor& leaf)> state_home;
  // Rule 2 (-1: no op offload).
  int offload_backend = -1;
  int64_t offload_min_batch = 32;
  // Rule 5 and 6: the backend that takes what nothing else decides.
  int host_backend = 0;
};

struct Assignment {
  std::vector<int> backend;    // by tensor id: nodes and views; leaves: their home or kHost
  std::vector<bool> streamed;  // by tensor id: a product run by op offload (its weight streams)
  std::vector<bool> state;     // by tensor id: a leaf that is state (its home is where it lives)
};

Assignment assign_backends(const Graph& g, const AssignRules& rules);

// The weight a node pins to its home (rule 1), or null: a product's or a
// row lookup's matrix, a norm's scale, a bias.
const Tensor* pinning_weight(const Tensor& node, const AssignRules& rules);
// Whether a node's batch is big enough for op offload (rule 2).
bool offloads(const Tensor& node, const AssignRules& rules);

}  // namespace weir::sched
