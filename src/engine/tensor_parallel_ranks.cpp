#include "engine/tensor_parallel_ranks.h"

#include <algorithm>
#include <chrono>

#include "backend/registry.h"
#include "comm/gpu_comm.h"
#include "comm/mpi_comm.h"
#include "comm/thread_comm.h"
#include "core/error.h"
#include "core/units.h"
#include "model/shard.h"

namespace weir {

ModelBackends make_tensor_parallel_ranks(const Model& m, const RuntimeSpec& spec) {
  const HParams& h = m.hparams();
  const int tp = spec.tp;
  const bool gpu = spec.n_gpu_layers > h.n_layer;
  if ((spec.n_gpu_layers > 0 && !gpu) || !spec.overrides.empty())
    throw UsageError("--tp " + std::to_string(tp) + " runs the whole model on " + std::to_string(tp) +
                     " ranks: -ngl 0 (CPU ranks) or -ngl " + std::to_string(h.n_layer + 1) +
                     " and more (GPU ranks); not a split between CPU and GPU, nor -ot");
  Collective* world = spec.world;
  const GGUFTensorInfo* down = m.file().find_tensor("blk.0.ffn_down.weight");
  const GGUFTensorInfo* wo = m.file().find_tensor("blk.0.attn_output.weight");
  // CPU ranks make whole rows: the same numbers as one rank (the GPUs keep
  // partial sums and their all-reduce, the faster form there).
  const RowParallel form = gpu ? RowParallel::PartialSums : RowParallel::WholeRows;
  check_tensor_parallel(h, wo ? wo->dtype : DType::F32, down ? down->dtype : DType::F32, tp, form);
  ModelBackends c;
  const auto t0 = std::chrono::steady_clock::now();
  LoaderOptions lo = spec.load;
  lo.stop = spec.stop;
  auto cuda_backend = [&](int device) {
    CudaOptions o = spec.cuda;
    o.device = device;
    return make_cuda_backend(o);
  };
  if (gpu && world) {  // this process's rank, on its GPU; NCCL started through MPI
    const auto gpus = cuda_devices();
    const int r = world->rank();
    const int device = spec.devices.size() == size_t(world->size()) ? spec.devices[size_t(r)]
                       : spec.devices.size() > 1                    ? -1
                                                                    : spec.main_gpu + spec.local_rank;
    if (device < 0)
      throw UsageError("--device: " + std::to_string(spec.devices.size()) + " GPUs for " + std::to_string(world->size()) +
                       " processes; give one a process, or none (each takes its local rank's)");
    if (device >= int(gpus.size()))
      throw Error("rank " + std::to_string(r) + ": GPU " + std::to_string(device) + " wanted, this host has " +
                  std::to_string(gpus.size()));
    c.backend = cuda_backend(device);
    c.comms.push_back(make_gpu_comm_rank(device, r, world->size(), mpi_broadcast, spec.gpu_comm));
    c.load.start_seconds = seconds_since(t0);
    const std::vector<LoadItem> mine = rank_weight_items(m, {r, world->size(), c.comms[0].get()}, c.backend.get());
    c.weights = load_weights(m.file(), mine, lo);
    c.load = c.weights.report();
    c.load.start_seconds = seconds_since(t0) - c.load.weights_seconds;
    c.load.seconds = seconds_since(t0);
    c.placement = "tensor parallel: " + std::to_string(world->size()) + " processes (MPI), this one on GPU " +
                  std::to_string(device) + " with 1/" + std::to_string(world->size()) +
                  " of the heads, FFN and vocab; collectives: " + c.comms[0]->kind();
    return c;
  }
  if (gpu) {
    const auto gpus = cuda_devices();
    std::vector<int> devices = spec.devices;
    if (devices.empty())
      for (int r = 0; r < tp; ++r) devices.push_back(spec.main_gpu + r);
    if (int(devices.size()) != tp || devices.back() >= int(gpus.size()))
      throw Error("--tp " + std::to_string(tp) + ": " + std::to_string(tp) + " GPUs wanted, there " +
                  (gpus.size() == 1 ? "is " : "are ") + std::to_string(gpus.size()));
    std::vector<std::unique_ptr<Backend>> backends;
    for (int r = 0; r < tp; ++r) backends.push_back(cuda_backend(devices[size_t(r)]));
    c.comms = make_gpu_comms(devices, spec.gpu_comm);
    c.load.start_seconds = seconds_since(t0);
    std::vector<LoadItem> items;
    for (int r = 0; r < tp; ++r) {
      const std::vector<LoadItem> mine = rank_weight_items(m, {r, tp, c.comms[size_t(r)].get()}, backends[size_t(r)].get());
      uint64_t bytes = 0;
      for (const LoadItem& it : mine) bytes += it.rows ? it.rows * it.row_bytes : it.end - it.begin;
      const size_t free = cuda_free_bytes(devices[size_t(r)]);
      if (bytes + (size_t(256) << 20) > free)
        throw Error("--tp " + std::to_string(tp) + ": GPU " + std::to_string(devices[size_t(r)]) + " needs " +
                    std::to_string(bytes >> 20) + " MiB of weights, " + std::to_string(free >> 20) + " MiB are free");
      items.insert(items.end(), mine.begin(), mine.end());
    }
    c.weights = load_weights(m.file(), items, lo);
    c.load = c.weights.report();
    c.load.start_seconds = seconds_since(t0) - c.load.weights_seconds;
    c.backend = std::move(backends[0]);
    for (int r = 1; r < tp; ++r) c.peer_backends.push_back(std::move(backends[size_t(r)]));
    c.load.seconds = seconds_since(t0);
    std::string list;
    for (int d : devices) list += (list.empty() ? "" : ",") + std::to_string(d);
    c.placement = "tensor parallel: " + std::to_string(tp) + " GPUs (" + list + "), each with 1/" + std::to_string(tp) +
                  " of the heads, FFN and vocab; collectives: " + c.comms[0]->kind();
    return c;
  }
  const int per_rank = world ? spec.threads : std::max(1, spec.threads / tp);
  CpuOptions cpu = spec.cpu;
  cpu.stop = spec.stop_steps ? spec.stop : nullptr;
  if (spec.no_mmap) load_into_memory(m.file(), {}, lo, &c.load);
  c.backend = std::make_unique<CpuBackend>(per_rank, cpu);
  c.row_parallel = form;
  if (world) {
    c.world = world;
  } else {
    for (int r = 1; r < tp; ++r) c.peer_backends.push_back(std::make_unique<CpuBackend>(per_rank, cpu));
    c.comms = make_thread_comms(tp);
  }
  c.load.seconds = seconds_since(t0);
  c.placement = "tensor parallel: " + std::to_string(tp) + " CPU ranks (" + (world ? "processes, MPI" : "threads") +
                ") of " + std::to_string(per_rank) + " thread" + (per_rank == 1 ? "" : "s") + ", each with 1/" +
                std::to_string(tp) + " of the heads, FFN and vocab";
  return c;
}

}  // namespace weir
