// make_backends: the placement a spec asks for (model/placement.h) turned
// into backends: the CPU alone, one GPU, or a scheduler over the CPU and
// GPUs (a layer split, -ot rules, op offload); tensor parallelism goes to
// tensor_parallel_ranks.cpp. The GPUs' weights are loaded here, through
// the loader's pinned ring, before the first graph is planned.
#include <algorithm>
#include <chrono>
#include <cstdio>

#include "backend/registry.h"
#include "core/error.h"
#include "core/units.h"
#include "core/warn.h"
#include "engine/runtime.h"
#include "engine/tensor_parallel_ranks.h"
#include "model/kv_cache.h"
#include "model/placement.h"
#include "sched/scheduler.h"

namespace weir {

namespace {

// The GPU number of a placement device name ("CUDA1" -> 1).
int gpu_number(const std::string& name) { return std::atoi(name.c_str() + 4); }

// Refuses a GPU share that cannot fit: weights, the KV cache of its layers
// and working memory (activations, cuBLAS) against the GPU's free memory.
void check_fits(const Model& m, const ModelPlacement& p, const RuntimeSpec& s, int dev) {
  int64_t layers = 0;
  for (int d : p.layer) layers += d == dev;
  const double weights = double(p.weight_bytes[size_t(dev)]);
  const double kv = KVCache::bytes_for(m.hparams(), s.kv_type, std::max<int64_t>(s.n_ctx, 1), layers);
  const double work = double(size_t(768) << 20);
  const double free = double(cuda_free_bytes(gpu_number(p.devices[size_t(dev)])));
  if (weights + kv + work <= free) return;
  throw Error("-ngl " + std::to_string(s.n_gpu_layers) + ": " + p.devices[size_t(dev)] + " needs " +
              gib(weights + kv + work) + " (weights " + gib(weights) + ", KV cache " + gib(kv) +
              ", ~0.75 GiB working memory) but has " + gib(free) +
              " free; lower -ngl (or --ctx-size), or keep tensors on the CPU with -ot");
}

void check_spec(const RuntimeSpec& s) {
  if (s.threads < 1 || s.threads > 1024)
    throw UsageError("--threads: expected 1 to 1024 threads, got " + std::to_string(s.threads));
  if (s.threads_batch != 0 && s.threads_batch != s.threads)
    throw UsageError("--threads-batch " + std::to_string(s.threads_batch) + ": weir runs prompts and generation on the same " +
                     std::to_string(s.threads) + " threads (--threads); give it equal to --threads or leave it out");
  if (s.n_gpu_layers < 0)
    throw UsageError("-ngl: expected 0 (CPU) or the number of layers to put on the GPU, got " +
                     std::to_string(s.n_gpu_layers));
  if (s.split_mode != "auto" && s.split_mode != "none" && s.split_mode != "layer" && s.split_mode != "tensor")
    throw UsageError("-sm: '" + s.split_mode + "' is not a split mode; expected none, layer or tensor");
  if (s.tp < 1) throw UsageError("--tp: expected 1 or more ranks, got " + std::to_string(s.tp));
  if (s.n_cpu_moe < 0) throw UsageError("--n-cpu-moe: expected 0 or more layers, got " + std::to_string(s.n_cpu_moe));
  if (s.main_gpu < 0) throw UsageError("-mg: expected a GPU number >= 0, got " + std::to_string(s.main_gpu));
  for (double x : s.tensor_split)
    if (!(x >= 0)) throw UsageError("-ts: expected shares >= 0");
}

}  // namespace

ModelBackends make_backends(const Model& m, const RuntimeSpec& spec) {
  if (spec.fit) {  // the placement chosen, then made as if given by hand
    FitPlan plan;
    std::string report;
    const RuntimeSpec fitted = fit_spec(m, spec, &plan, &report);
    if (spec.note) spec.note(report);
    ModelBackends c = make_backends(m, fitted);
    c.fit = plan;
    c.fit_report = report;
    return c;
  }
  check_spec(spec);
  PlacementRequest req;
  req.n_gpu_layers = spec.n_gpu_layers;
  req.split = spec.tensor_split;
  // Expert weights on the CPU as --cpu-moe / --n-cpu-moe ask, after the
  // user's -ot rules (the first rule that matches a tensor decides).
  for (const std::string& o : spec.overrides) req.overrides.push_back(parse_tensor_override(o));
  for (const std::string& o : cpu_expert_overrides(m, spec.cpu_moe, spec.n_cpu_moe))
    req.overrides.push_back(parse_tensor_override(o));
  std::string why;
  const auto gpus = cuda_devices(&why);
  // The GPUs asked for: --device's list, or -mg alone (every one from it on
  // for -sm layer and tensor).
  std::vector<int> devs = spec.devices;
  if (devs.empty()) {
    devs.push_back(spec.main_gpu);
    if ((spec.split_mode == "layer" || spec.split_mode == "tensor") && spec.tp <= 1)
      for (int d = spec.main_gpu + 1; d < int(gpus.size()); ++d) devs.push_back(d);
  }
  for (int d : devs)
    if (d < 0 || (!gpus.empty() && d >= int(gpus.size())))
      throw UsageError("--device " + std::to_string(d) + ": there " + (gpus.size() == 1 ? "is " : "are ") +
                       std::to_string(gpus.size()) + " GPU" + (gpus.size() == 1 ? "" : "s") +
                       (gpus.empty() ? "" : " (0.." + std::to_string(gpus.size() - 1) + ")"));
  bool wants_device = spec.n_gpu_layers > 0;
  for (const TensorOverride& o : req.overrides) {
    const bool cuda = o.device.size() > 4 && o.device.rfind("CUDA", 0) == 0 &&
                      o.device.find_first_not_of("0123456789", 4) == std::string::npos;
    if (o.device != "CPU" && !cuda)
      throw UsageError("-ot '" + o.pattern + "=" + o.device + "': no device named " + o.device +
                       " (CPU, or CUDA0, CUDA1 ... for the GPUs)");
    wants_device = wants_device || cuda;
  }
  if (wants_device && gpus.empty())
    throw Error((spec.n_gpu_layers > 0 ? "-ngl " + std::to_string(spec.n_gpu_layers) : std::string("-ot")) +
                ": no GPU to run on: " + why);
  if (spec.world) {  // under mpirun: the world is the group
    if (spec.tp != 1 && spec.tp != spec.world->size())
      throw UsageError("--tp " + std::to_string(spec.tp) + ": mpirun started " + std::to_string(spec.world->size()) +
                       " processes (each process is one rank)");
    RuntimeSpec g = spec;
    g.tp = spec.world->size();
    return make_tensor_parallel_ranks(m, g);
  }
  if (spec.split_mode == "tensor" || spec.tp > 1) {
    RuntimeSpec g = spec;
    if (g.tp <= 1) g.tp = int(devs.size());
    if (g.n_gpu_layers > 0 && int(devs.size()) < g.tp)
      for (int d = devs.back() + 1; int(devs.size()) < g.tp; ++d) devs.push_back(d);
    g.devices = devs;
    if (g.tp > 1) return make_tensor_parallel_ranks(m, g);
  }
  // A layer split over several GPUs: asked for, or the model does not fit
  // the one GPU and others are there (as llama.cpp splits by default).
  std::vector<std::string> devices = {"CPU"};
  if (!gpus.empty())
    for (int d : devs) devices.push_back("CUDA" + std::to_string(d));
  if (spec.split_mode == "auto" && devs.size() == 1 && spec.devices.empty() && gpus.size() > 1 &&
      spec.n_gpu_layers > 0) {
    const ModelPlacement one = place_model(m, devices, req);
    const double need = double(one.weight_bytes[1]) + double(size_t(1) << 30);
    if (need > double(cuda_free_bytes(devs[0]))) {
      for (int d = devs[0] + 1; d < int(gpus.size()); ++d) devices.push_back("CUDA" + std::to_string(d));
      warn("the model's GPU share does not fit GPU " + std::to_string(devs[0]) + ": layers split over " +
           std::to_string(devices.size() - 1) + " GPUs (-sm layer; -sm none to keep one)");
    }
  }
  const ModelPlacement p = place_model(m, devices, req);
  ModelBackends c;
  c.placement = p.summary();
  LoaderOptions lo = spec.load;
  lo.stop = spec.stop;
  const auto t0 = std::chrono::steady_clock::now();
  // --no-mmap: the weights the CPU reads into private memory, before any
  // backend looks at (or registers) that memory.
  if (spec.no_mmap) {
    std::vector<bool> skip(p.tensor_home.size());
    for (size_t i = 0; i < skip.size(); ++i) skip[i] = p.tensor_home[i] != 0;
    load_into_memory(m.file(), skip, lo, &c.load);
  }
  // backends[k] is placement device k (k > 0: GPUs); null where unused.
  auto done = [&](ModelBackends& ch, const std::vector<Backend*>& backends) {
    ch.load.start_seconds = seconds_since(t0) - ch.load.weights_seconds;
    // The GPUs' weights to them now, not inside the first plan.
    std::vector<LoadItem> items;
    for (size_t i = 0; i < p.tensor_home.size(); ++i) {
      const int k = p.tensor_home[i];
      if (k > 0 && size_t(k) < backends.size() && backends[size_t(k)])
        items.push_back(LoadItem{i, backends[size_t(k)], 0, 0});
    }
    if (!items.empty()) {
      ch.weights = load_weights(m.file(), items, lo);
      ch.load.add(ch.weights.report());
    }
    ch.load.seconds = seconds_since(t0);
    if (lo.direct_io && !ch.load.direct_io_note.empty())
      warn("--direct-io: " + ch.load.direct_io_note + "; reading through the page cache instead");
  };
  CpuOptions cpu = spec.cpu;
  cpu.stop = spec.stop_steps ? spec.stop : nullptr;
  auto cuda_backend = [&](int device) {
    CudaOptions o = spec.cuda;
    o.device = device;
    return make_cuda_backend(o);
  };
  // Op offload: where a GPU is present, the products of big batches of the
  // CPU's layers run there, their weights streamed (llama.cpp does it too).
  const bool offload = spec.op_offload && !gpus.empty();
  // With a GPU backend beside it, the GPU may read the host's weights in the
  // file's layout (op offload streams them): the CPU keeps their pages.
  cpu.release_file_pages = p.single_device() && p.layer.front() == 0 && !offload;
  if (p.single_device() && p.layer.front() == 0 && !offload) {
    c.backend = std::make_unique<CpuBackend>(spec.threads, cpu);
    done(c, {});
    return c;
  }
  for (size_t k = 1; k < devices.size(); ++k) check_fits(m, p, spec, int(k));
  if (p.single_device() && p.layer.front() == 1) {
    c.backend = cuda_backend(gpu_number(devices[1]));
    done(c, {nullptr, c.backend.get()});
    return c;
  }
  std::vector<std::unique_ptr<Backend>> owned;
  owned.push_back(std::make_unique<CpuBackend>(spec.threads, cpu));
  std::vector<int> gpu_numbers;
  for (size_t k = 1; k < devices.size(); ++k) {
    gpu_numbers.push_back(gpu_number(devices[k]));
    owned.push_back(cuda_backend(gpu_numbers.back()));
  }
  // Activations pass from GPU to GPU directly (peer copies) where they can.
  if (gpu_numbers.size() > 1) cuda_enable_peer_access(gpu_numbers);
  std::vector<Backend*> backends;
  for (auto& b : owned) backends.push_back(b.get());
  sched::SchedOptions so;
  so.host_backend = 0;
  so.offload_backend = offload ? 1 : -1;
  so.profile = spec.profile;
  if (offload) c.placement += "; op offload: prefill products of the CPU's weights on " + devices[1];
  auto s = std::make_unique<sched::Scheduler>(backends, p.for_scheduler(m), so);
  for (auto& b : owned) s->own(std::move(b));
  c.split = s.get();
  c.backend = std::move(s);
  done(c, backends);
  return c;
}

}  // namespace weir
