// The backend interface and its synchronization contract.
//
// Contract (every backend obeys it; tests/backend checks the CPU one):
//  1. A backend exposes queues. Commands submitted to one queue (running a
//     graph, copies) execute in submission order.
//  2. An Event is recorded on a queue and completes when everything submitted
//     to that queue before it has completed. Another queue may wait on it
//     (ordering on the device, no host involvement) and the host may wait on
//     it. These are the only ways to order work across queues or with the
//     host.
//  3. copy_to_device from host memory: the source must stay alive and
//     unchanged until an event recorded after the copy completes.
//  4. The host sees results (graph outputs, copies to host) only after
//     waiting on an event recorded after them, or on the queue.
//  5. Every host wait goes through Queue::synchronize or Event::wait, so a
//     backend can count them (stats().host_waits): decode aims for one per
//     token.
//  6. Events cross backends: any queue may wait on an event recorded on any
//     queue of any backend. Where it can, it waits on the device (a CUDA
//     stream on a CUDA event of any GPU); an event that completes when it is
//     recorded (is_host_event: the CPU's inline queue) needs no wait at all;
//     otherwise the queue waits on the host, and that wait is counted.
//  7. A backend has a compute queue and a copy queue. Commands on the two
//     are ordered only by events (rule 2); the copy queue takes copies only,
//     so a copy can overlap the compute before it. Backends with one engine
//     (the CPU) return the same queue for both.
// The CPU backend's queue runs each command inline on submit, which satisfies
// the contract trivially; it is the reference for every other backend.
//
// Memory: tensors that a graph creates (inputs, intermediates) live where
// the backend's plan() put them; external tensors (weights) may point at
// host memory, which a device backend copies to its own memory once, at
// plan(), keyed by the host address; state such as the KV cache is
// allocated from the backend (alloc) and used in place. Callers fill inputs
// and read outputs only through the queue's copies (a CPU copy is memcpy).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include "core/error.h"

namespace weir {

class Graph;
struct Tensor;

// Which device a backend computes on: what shared code asks (with
// supports() and host_visible_memory()) instead of a backend's name.
struct Device {
  enum class Kind : uint8_t { Cpu, Cuda, Test };
  Kind kind = Kind::Cpu;
  int index = 0;  // the GPU's number (CUDA0, CUDA1 ...)
  bool operator==(const Device&) const = default;
  // As -ot and reports spell it: "CPU", "CUDA0", "TEST0".
  std::string name() const {
    switch (kind) {
      case Kind::Cpu: return "CPU";
      case Kind::Cuda: return "CUDA" + std::to_string(index);
      case Kind::Test: return "TEST" + std::to_string(index);
    }
    return "?";
  }
};

struct BackendStats {
  uint64_t host_waits = 0;
  uint64_t graphs_run = 0;
  uint64_t graphs_captured = 0;  // graphs recorded once for replay (CUDA graphs)
  uint64_t graphs_replayed = 0;  // runs that replayed a recording
  // Launches one run of the last planned graph makes, after fusing nodes
  // (CUDA: kernels or fused groups); 0 where a backend does not count.
  uint64_t planned_launches = 0;
  // Nodes (kernels) in the last recording of a graph for replay; 0 where a
  // backend does not record.
  uint64_t recorded_nodes = 0;
  // Weights this backend copied for itself inside plan() (a weight not
  // loaded ahead), and weights a loader gave it (adopt_weight): with a
  // loader, the first stays 0 however many graphs are planned.
  uint64_t weights_copied_in_plan = 0;
  uint64_t weights_adopted = 0;
};

// A block of memory a backend allocated: device memory (Backend::alloc) or
// host memory it copies to and from fastest (Backend::alloc_host: pinned for
// a GPU). Zero-filled; freed with the object.
class Buffer {
 public:
  virtual ~Buffer() = default;
  void* data() const { return data_; }
  size_t size() const { return size_; }

 protected:
  void* data_ = nullptr;
  size_t size_ = 0;
};

class Event {
 public:
  virtual ~Event() = default;
  virtual void wait() = 0;  // host waits
  virtual bool is_done() const = 0;
  // True for events complete when recorded (an inline queue's): no queue
  // ever needs to wait on them (rule 6).
  virtual bool is_host_event() const { return false; }
};

class Queue {
 public:
  virtual ~Queue() = default;
  // Runs the graph's nodes (inputs must have been filled or copied first).
  virtual void run(Graph& g) = 0;
  // Host -> backend memory and back. dst/src are backend-visible pointers.
  virtual void copy_to_device(void* dst, const void* src, size_t n) = 0;
  virtual void copy_to_host(void* dst, const void* src, size_t n) = 0;
  // Host -> backend, `rows` rows of `width` bytes: row i from src + i *
  // src_pitch to dst + i * dst_pitch (a column block of a weight).
  virtual void copy_to_device_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
                                 size_t rows) {
    for (size_t i = 0; i < rows; ++i)
      copy_to_device(static_cast<char*>(dst) + i * dst_pitch, static_cast<const char*>(src) + i * src_pitch, width);
  }
  // Backend memory to backend memory, in queue order (a sampled token id
  // into the next step's input without passing through the host).
  virtual void copy_on_device(void* dst, const void* src, size_t n) = 0;
  virtual std::unique_ptr<Event> record() = 0;
  // Later commands on this queue wait for e, recorded on any queue of any
  // backend: on the device where this backend can, else on the host (rule 6).
  virtual void wait_event(Event& e) = 0;
  virtual void synchronize() = 0;  // host waits for everything queued
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual Device device() const = 0;
  // Whether this backend has a kernel for node (its op with these operand
  // dtypes and shapes).
  virtual bool supports(const Tensor& node) const = 0;
  // Whether the host can read and write this backend's buffers directly.
  virtual bool host_visible_memory() const = 0;
  // The compute queue (graphs and copies) and the copy queue (copies only;
  // rule 7).
  virtual Queue& queue() = 0;
  virtual Queue& copy_queue() = 0;
  // Whether p points into memory this backend holds: alloc() buffers,
  // planned graphs' arenas, weights it copied.
  virtual bool owns(const void* p) const = 0;
  // Prepares a graph for repeated runs: allocates its intermediate tensors
  // and inputs (with lifetimes planned so buffers are reused). Must be
  // called after the graph is built and before the first run.
  virtual void plan(Graph& g) = 0;
  // Does now the host work that the next run of a planned graph would do
  // before queuing anything (a CUDA graph recording and its instantiation),
  // so that queue().run(g) then only queues. A tensor-parallel step calls it
  // before its ranks meet (Collective::before_launch).
  virtual void prepare_run(Graph& g) { (void)g; }
  // Bytes of memory plan() set aside for a graph's activations and inputs.
  virtual size_t planned_bytes(const Graph& g) const = 0;
  // Frees what plan() made for g; call before destroying a planned graph
  // (another graph may later be built at the same address).
  virtual void release(const Graph& g) = 0;
  virtual const BackendStats& stats() const = 0;
  // Memory for state that graphs read and write across runs (the KV cache):
  // a graph's external tensors may point into it.
  virtual std::unique_ptr<Buffer> alloc(size_t bytes) = 0;
  // State that belongs to layer `layer` (its KV cache): a backend made of
  // several (sched/) puts it where that layer's attention runs.
  virtual std::unique_ptr<Buffer> alloc_state(int64_t layer, size_t bytes) {
    (void)layer;
    return alloc(bytes);
  }
  // Host memory for the sources and destinations of this backend's copies.
  virtual std::unique_ptr<Buffer> alloc_host(size_t bytes) = 0;
  // Makes host memory [p, p + n) that this backend's copies read (weights
  // in a file mapping) quick to copy from: pinned, read only. False where
  // the backend cannot; copies from it then stay correct, only slower.
  virtual bool register_host_memory(const void* p, size_t n) {
    (void)p;
    (void)n;
    return false;
  }
  // Weights loaded ahead of planning (model/loader.h). alloc_weight: memory
  // for `bytes` of a weight, with whatever slack the kernels read past it
  // (zero-filled). adopt_weight: the `bytes` of weight at host address
  // `host` (packed, when the graphs' leaf is strided) now live in w, filled by copies on this backend's copy queue
  // that the loader has waited for; plan() points leaves that read `host`
  // at it instead of copying, and the backend keeps it as long as it lives.
  // Host-visible backends read weights in place and never adopt (the
  // default refuses).
  virtual std::unique_ptr<Buffer> alloc_weight(size_t bytes) { return alloc(bytes); }
  virtual void adopt_weight(const void* host, size_t bytes, std::unique_ptr<Buffer> w) {
    (void)host;
    (void)bytes;
    (void)w;
    throw Error(name() + ": this backend reads weights where they are");
  }
  // Forgets the adopted weights whose host address is in [begin, begin + n):
  // their model is closing, and its addresses may be mapped again for
  // another (model/loader.h's LoadedWeights calls it).
  virtual void forget_weights(const void* begin, size_t n) {
    (void)begin;
    (void)n;
  }
};

}  // namespace weir
