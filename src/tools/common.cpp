#include "tools/common.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <thread>

#include "backend/registry.h"
#include "core/error.h"
#include "core/warn.h"
#include "comm/gpu_comm.h"
#include "comm/mpi_comm.h"
#include "comm/thread_comm.h"
#include "model/placement.h"
#include "model/shard.h"
#include "sched/scheduler.h"
#include "tools/args.h"
#include "tools/env_options.h"
#include "tools/mpi_ranks.h"
#include "tools/signals.h"

namespace weir::tools {

int default_threads() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : int(n);
}

std::unique_ptr<Model> load_model(const std::string& path, double* seconds) {
  if (path.empty()) throw UsageError("no model given (-m MODEL.gguf)");
  const auto t0 = std::chrono::steady_clock::now();
  auto m = Model::load(path);
  if (seconds) *seconds = seconds_since(t0);
  return m;
}

cpu::NumaMode parse_numa_flag(const std::string& s) {
  cpu::NumaMode m;
  if (!cpu::parse_numa_mode(s, &m))
    throw UsageError("--numa: '" + s + "' is not a mode; expected off, distribute or isolate");
  return m;
}

void report_numa(const Backend& backend) {
  const auto* cpu = dynamic_cast<const CpuBackend*>(&backend);
  if (!cpu) return;
  const CpuBackend& b = *cpu;
  if (b.numa().mode == cpu::NumaMode::Off) return;
  std::fprintf(stderr, "weir: numa %s; %s\n", b.numa().describe().c_str(), b.numa_report().describe().c_str());
}

bool wants_gpu(const Model& m, int ngl) {
  if (ngl < 0) throw UsageError("-ngl: expected 0 (CPU) or the number of layers to put on the GPU, got " + std::to_string(ngl));
  (void)m;
  return ngl > 0;
}

namespace {

std::string gib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", bytes / double(1 << 30));
  return buf;
}

// Refuses a GPU share that cannot fit: weights, the KV cache of its layers
// and working memory (activations, cuBLAS) against the GPU's free memory.
// The GPU number of a placement device name ("CUDA1" -> 1).
int gpu_number(const std::string& name) { return std::atoi(name.c_str() + 4); }

void check_fits(const Model& m, const ModelPlacement& p, const BackendFlags& f, int dev) {
  const HParams& h = m.hparams();
  const double kv_layer =
      double(f.n_ctx) * double(row_bytes(f.kv_type, h.n_embd_k()) + row_bytes(f.kv_type, h.n_embd_v()));
  int64_t layers = 0;
  for (int d : p.layer) layers += d == dev;
  const double weights = double(p.weight_bytes[size_t(dev)]), kv = kv_layer * double(layers);
  const double work = double(size_t(768) << 20);
  const double free = double(cuda_free_bytes(gpu_number(p.devices[size_t(dev)])));
  if (weights + kv + work <= free) return;
  throw Error("-ngl " + std::to_string(f.n_gpu_layers) + ": " + p.devices[size_t(dev)] + " needs " +
              gib(weights + kv + work) + " (weights " + gib(weights) + ", KV cache " + gib(kv) +
              ", ~0.75 GiB working memory) but has " + gib(free) +
              " free; lower -ngl (or --ctx-size), or keep tensors on the CPU with -ot");
}

}  // namespace

void BackendChoice::join_group(SessionParams& p) const {
  Collective* c = world ? world : comms.empty() ? nullptr : comms[0].get();
  if (!c) return;
  p.tp = {c->rank(), c->size(), c};
  p.peers.clear();
  for (size_t r = 1; r < comms.size(); ++r) p.peers.push_back({peer_backends[r - 1].get(), comms[r].get()});
}

namespace {

// --tp N: N CPU ranks, each with its share of the threads, over the thread
// comm; under mpirun, this process's rank of the world, with all of -t;
// with every layer on the GPU (-ngl 99), N GPUs from --device on, each with
// its share of the weights loaded to it, over NVLink and NCCL.
BackendChoice make_tensor_parallel(const Model& m, const BackendFlags& f) {
  const HParams& h = m.hparams();
  const bool gpu = f.n_gpu_layers > h.n_layer;
  if ((f.n_gpu_layers > 0 && !gpu) || !f.overrides.empty())
    throw UsageError("--tp " + std::to_string(f.tp) + " runs the whole model on " + std::to_string(f.tp) +
                     " ranks: -ngl 0 (CPU ranks) or -ngl " + std::to_string(h.n_layer + 1) +
                     " and more (GPU ranks); not a split between CPU and GPU, nor -ot");
  Collective* world = mpi_world();
  const GGUFTensorInfo* down = m.file().find_tensor("blk.0.ffn_down.weight");
  const GGUFTensorInfo* wo = m.file().find_tensor("blk.0.attn_output.weight");
  check_tensor_parallel(h, wo ? wo->dtype : DType::F32, down ? down->dtype : DType::F32, f.tp);
  BackendChoice c;
  const auto t0 = std::chrono::steady_clock::now();
  LoaderOptions lo;
  lo.readers = std::max(1, f.load_threads);
  lo.buffer_bytes = f.load_buffer_bytes;
  lo.direct_io = f.direct_io;
  lo.stop = &stop_flag();
  lo.progress = load_progress_bar();
  apply_load_env(&lo);
  if (gpu && world) {  // this process's rank, on its GPU; NCCL started through MPI
    const auto gpus = cuda_devices();
    const int r = world->rank();
    const int device = f.devices.size() == size_t(world->size()) ? f.devices[size_t(r)]
                       : f.devices.size() > 1                    ? -1
                                                                 : f.device + mpi_local_rank();
    if (device < 0)
      throw UsageError("--device: " + std::to_string(f.devices.size()) + " GPUs for " + std::to_string(world->size()) +
                       " processes; give one a process, or none (each takes its local rank's)");
    if (device >= int(gpus.size()))
      throw Error("rank " + std::to_string(r) + ": GPU " + std::to_string(device) + " wanted, this host has " +
                  std::to_string(gpus.size()));
    c.backend = make_cuda_backend(cuda_options_from_env(device));
    c.comms.push_back(make_gpu_comm_rank(device, r, world->size(), mpi_broadcast, gpu_comm_options_from_env()));
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
    std::vector<int> devices = f.devices;
    if (devices.empty())
      for (int r = 0; r < f.tp; ++r) devices.push_back(f.device + r);
    if (int(devices.size()) != f.tp || devices.back() >= int(gpus.size()))
      throw Error("--tp " + std::to_string(f.tp) + ": " + std::to_string(f.tp) + " GPUs wanted, there " +
                  (gpus.size() == 1 ? "is " : "are ") + std::to_string(gpus.size()));
    std::vector<std::unique_ptr<Backend>> backends;
    for (int r = 0; r < f.tp; ++r) backends.push_back(make_cuda_backend(cuda_options_from_env(devices[size_t(r)])));
    // Never NVLink multicast (NVLS): on shared hosts it can take GPUs out of service.
    setenv("NCCL_NVLS_ENABLE", "0", 1);
    c.comms = make_gpu_comms(devices, gpu_comm_options_from_env());
    c.load.start_seconds = seconds_since(t0);
    std::vector<LoadItem> items;
    for (int r = 0; r < f.tp; ++r) {
      const std::vector<LoadItem> mine = rank_weight_items(m, {r, f.tp, c.comms[size_t(r)].get()}, backends[size_t(r)].get());
      uint64_t bytes = 0;
      for (const LoadItem& it : mine) bytes += it.rows ? it.rows * it.row_bytes : it.end - it.begin;
      const size_t free = cuda_free_bytes(devices[size_t(r)]);
      if (bytes + (size_t(256) << 20) > free)
        throw Error("--tp " + std::to_string(f.tp) + ": GPU " + std::to_string(devices[size_t(r)]) + " needs " +
                    std::to_string(bytes >> 20) + " MiB of weights, " + std::to_string(free >> 20) + " MiB are free");
      items.insert(items.end(), mine.begin(), mine.end());
    }
    c.weights = load_weights(m.file(), items, lo);
    const LoadReport& r = c.weights.report();
    c.load = r;
    c.load.start_seconds = seconds_since(t0) - r.weights_seconds;
    c.backend = std::move(backends[0]);
    for (int r2 = 1; r2 < f.tp; ++r2) c.peer_backends.push_back(std::move(backends[size_t(r2)]));
    c.load.seconds = seconds_since(t0);
    std::string list;
    for (int d : devices) list += (list.empty() ? "" : ",") + std::to_string(d);
    c.placement = "tensor parallel: " + std::to_string(f.tp) + " GPUs (" + list + "), each with 1/" + std::to_string(f.tp) +
                  " of the heads, FFN and vocab; collectives: " + c.comms[0]->kind();
    return c;
  }
  const int per_rank = world ? f.threads : std::max(1, f.threads / f.tp);
  CpuOptions cpu = f.cpu;
  cpu.stop = &stop_flag();
  apply_cpu_env(&cpu);
  if (f.no_mmap) load_into_memory(m.file(), {}, lo, &c.load);
  c.backend = std::make_unique<CpuBackend>(per_rank, cpu);
  if (world) {
    c.world = world;
  } else {
    for (int r = 1; r < f.tp; ++r) c.peer_backends.push_back(std::make_unique<CpuBackend>(per_rank, cpu));
    c.comms = make_thread_comms(f.tp);
  }
  c.load.seconds = seconds_since(t0);
  c.placement = "tensor parallel: " + std::to_string(f.tp) + " CPU ranks (" +
                (world ? "processes, MPI" : "threads") + ") of " + std::to_string(per_rank) + " thread" +
                (per_rank == 1 ? "" : "s") + ", each with 1/" + std::to_string(f.tp) + " of the heads, FFN and vocab";
  return c;
}

}  // namespace

BackendChoice make_backend(const Model& m, const BackendFlags& f) {
  check_threads(f.threads);
  if (f.n_gpu_layers < 0)
    throw UsageError("-ngl: expected 0 (CPU) or the number of layers to put on the GPU, got " +
                     std::to_string(f.n_gpu_layers));
  if (f.split_mode != "auto" && f.split_mode != "none" && f.split_mode != "layer" && f.split_mode != "tensor")
    throw UsageError("-sm: '" + f.split_mode + "' is not a split mode; expected none, layer or tensor");
  PlacementRequest req;
  req.n_gpu_layers = f.n_gpu_layers;
  req.split = f.tensor_split;
  // Expert weights on the CPU as --cpu-moe / --n-cpu-moe ask, after the
  // user's -ot rules (the first rule that matches a tensor decides).
  for (const std::string& o : f.overrides) req.overrides.push_back(parse_tensor_override(o));
  for (const std::string& o : cpu_expert_overrides(m, f.cpu_moe, f.n_cpu_moe))
    req.overrides.push_back(parse_tensor_override(o));
  std::string why;
  const auto gpus = cuda_devices(&why);
  // The GPUs asked for: --device's list, or the first one from --device on
  // (every one from there for -sm layer and tensor).
  std::vector<int> devs = f.devices;
  if (devs.empty()) {
    devs.push_back(f.device);
    if ((f.split_mode == "layer" || f.split_mode == "tensor") && f.tp <= 1)
      for (int d = f.device + 1; d < int(gpus.size()); ++d) devs.push_back(d);
  }
  for (int d : devs)
    if (d < 0 || (!gpus.empty() && d >= int(gpus.size())))
      throw UsageError("--device " + std::to_string(d) + ": there " + (gpus.size() == 1 ? "is " : "are ") +
                       std::to_string(gpus.size()) + " GPU" + (gpus.size() == 1 ? "" : "s") +
                       (gpus.empty() ? "" : " (0.." + std::to_string(gpus.size() - 1) + ")"));
  bool wants_device = f.n_gpu_layers > 0;
  for (const TensorOverride& o : req.overrides) {
    const bool cuda = o.device.size() > 4 && o.device.rfind("CUDA", 0) == 0 &&
                      o.device.find_first_not_of("0123456789", 4) == std::string::npos;
    if (o.device != "CPU" && !cuda)
      throw UsageError("-ot '" + o.pattern + "=" + o.device + "': no device named " + o.device +
                       " (CPU, or CUDA0, CUDA1 ... for the GPUs)");
    wants_device = wants_device || cuda;
  }
  if (wants_device && gpus.empty())
    throw Error((f.n_gpu_layers > 0 ? "-ngl " + std::to_string(f.n_gpu_layers) : std::string("-ot")) +
                ": no GPU to run on: " + why);
  if (f.tp < 1) throw UsageError("--tp: expected 1 or more ranks, got " + std::to_string(f.tp));
  if (Collective* world = mpi_world()) {  // under mpirun: the world is the group
    if (f.tp != 1 && f.tp != world->size())
      throw UsageError("--tp " + std::to_string(f.tp) + ": mpirun started " + std::to_string(world->size()) +
                       " processes (each process is one rank)");
    BackendFlags g = f;
    g.tp = world->size();
    return make_tensor_parallel(m, g);
  }
  if (f.split_mode == "tensor" || f.tp > 1) {
    BackendFlags g = f;
    if (g.tp <= 1) g.tp = int(devs.size());
    if (g.n_gpu_layers > 0 && int(devs.size()) < g.tp)
      for (int d = devs.back() + 1; int(devs.size()) < g.tp; ++d) devs.push_back(d);
    g.devices = devs;
    if (g.tp > 1) return make_tensor_parallel(m, g);
  }
  // A layer split over several GPUs: asked for, or the model does not fit
  // the one GPU and others are there (as llama.cpp splits by default).
  std::vector<std::string> devices = {"CPU"};
  if (!gpus.empty())
    for (int d : devs) devices.push_back("CUDA" + std::to_string(d));
  if (f.split_mode == "auto" && devs.size() == 1 && f.devices.empty() && gpus.size() > 1 && f.n_gpu_layers > 0) {
    const ModelPlacement one = place_model(m, devices, req);
    const double need = double(one.weight_bytes[1]) + double(size_t(1) << 30);
    if (need > double(cuda_free_bytes(devs[0]))) {
      for (int d = devs[0] + 1; d < int(gpus.size()); ++d) devices.push_back("CUDA" + std::to_string(d));
      warn("the model's GPU share does not fit GPU " + std::to_string(devs[0]) + ": layers split over " +
           std::to_string(devices.size() - 1) + " GPUs (-sm layer; -sm none to keep one)");
    }
  }
  const ModelPlacement p = place_model(m, devices, req);
  BackendChoice c;
  c.placement = p.summary();
  LoaderOptions lo;
  lo.readers = std::max(1, f.load_threads);
  lo.buffer_bytes = f.load_buffer_bytes;
  apply_load_env(&lo);
  lo.direct_io = f.direct_io;
  lo.stop = &stop_flag();
  lo.progress = load_progress_bar();
  const auto t0 = std::chrono::steady_clock::now();
  // --no-mmap: the weights the CPU reads into private memory, before any
  // backend looks at (or registers) that memory.
  if (f.no_mmap) {
    std::vector<bool> skip(p.tensor_home.size());
    for (size_t i = 0; i < skip.size(); ++i) skip[i] = p.tensor_home[i] != 0;
    load_into_memory(m.file(), skip, lo, &c.load);
  }
  // backends[k] is placement device k (k > 0: GPUs); null where unused.
  auto done = [&](BackendChoice& ch, const std::vector<Backend*>& backends) {
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
      const LoadReport& r = ch.weights.report();
      ch.load.bytes += r.bytes;
      ch.load.device_bytes += r.device_bytes;
      ch.load.items += r.items;
      ch.load.weights_seconds += r.weights_seconds;
      ch.load.alloc_seconds += r.alloc_seconds;
      ch.load.read_seconds += r.read_seconds;
      ch.load.wait_seconds += r.wait_seconds;
      ch.load.copy_tail_seconds += r.copy_tail_seconds;
      ch.load.readers = std::max(ch.load.readers, r.readers);
      ch.load.direct_io = r.direct_io;
      if (!r.direct_io_note.empty()) ch.load.direct_io_note = r.direct_io_note;
    }
    ch.load.seconds = seconds_since(t0);
    if (f.direct_io && !ch.load.direct_io_note.empty())
      warn("--direct-io: " + ch.load.direct_io_note + "; reading through the page cache instead");
  };
  CpuOptions cpu = f.cpu;
  cpu.stop = &stop_flag();
  apply_cpu_env(&cpu);
  // Op offload: where a GPU is present, the products of big batches of the
  // CPU's layers run there, their weights streamed (llama.cpp does it too).
  const bool offload = f.op_offload && !gpus.empty();
  if (p.single_device() && p.layer.front() == 0 && !offload) {
    c.backend = std::make_unique<CpuBackend>(f.threads, cpu);
    done(c, {});
    return c;
  }
  for (size_t k = 1; k < devices.size(); ++k) check_fits(m, p, f, int(k));
  if (p.single_device() && p.layer.front() == 1) {
    c.backend = make_cuda_backend(cuda_options_from_env(gpu_number(devices[1])));
    done(c, {nullptr, c.backend.get()});
    return c;
  }
  std::vector<std::unique_ptr<Backend>> owned;
  owned.push_back(std::make_unique<CpuBackend>(f.threads, cpu));
  std::vector<int> gpu_numbers;
  for (size_t k = 1; k < devices.size(); ++k) {
    gpu_numbers.push_back(gpu_number(devices[k]));
    owned.push_back(make_cuda_backend(cuda_options_from_env(gpu_numbers.back())));
  }
  // Activations pass from GPU to GPU directly (peer copies) where they can.
  if (gpu_numbers.size() > 1) cuda_enable_peer_access(gpu_numbers);
  std::vector<Backend*> backends;
  for (auto& b : owned) backends.push_back(b.get());
  sched::SchedOptions so;
  so.host_backend = 0;
  so.offload_backend = offload ? 1 : -1;
  so.profile = f.profile;
  if (offload) c.placement += "; op offload: prefill products of the CPU's weights on " + devices[1];
  auto s = std::make_unique<sched::Scheduler>(backends, p.for_scheduler(m), so);
  for (auto& b : owned) s->own(std::move(b));
  c.split = s.get();
  c.backend = std::move(s);
  done(c, backends);
  return c;
}

namespace {
DType parse_kv_type(const std::string& flag, const std::string& s) {
  if (s == "f16") return DType::F16;
  if (s == "f32") return DType::F32;
  if (s == "q8_0") return DType::Q8_0;
  throw UsageError(flag + ": weir's KV cache is f32, f16 or q8_0, got '" + s + "'");
}
}  // namespace

void KvFlags::add_to(Args& a, const std::string& default_type) {
  a.opt("-ctk,--cache-type-k", &k, "T", "KV cache type: f32, f16 or q8_0 (about half of f16's memory); default " + default_type)
      .opt("-ctv,--cache-type-v", &v, "T", "must equal -ctk (weir's cache has one type)");
}

DType KvFlags::resolve(DType fallback) const {
  const DType tk = k.empty() ? fallback : parse_kv_type("-ctk", k);
  if (!v.empty() && parse_kv_type("-ctv", v) != tk)
    throw UsageError("-ctk and -ctv differ; weir's KV cache has one type (give -ctk alone)");
  return tk;
}

DType serving_kv_type(int n_gpu_layers) { return n_gpu_layers > 0 ? DType::F16 : DType::F32; }

std::vector<std::string> cpu_expert_overrides(const Model& m, bool cpu_moe, int n_cpu_moe) {
  if (m.hparams().n_expert == 0) return {};
  if (cpu_moe) return {"\\.ffn_(gate|up|down)_exps\\.=CPU"};
  const int64_t n = std::min<int64_t>(n_cpu_moe, m.hparams().n_layer);
  if (n <= 0) return {};
  std::string layers;
  for (int64_t i = 0; i < n; ++i) layers += (i ? "|" : "") + std::to_string(i);
  return {"^blk\\.(" + layers + ")\\.ffn_(gate|up|down)_exps\\.=CPU"};
}

void GpuFlags::add_to(Args& a) {
  a.opt_list("--device", &devices, "N[,M...]",
             "the GPU(s) to use with -ngl (default 0); several: a layer split (-sm layer) or --tp over them")
      .opt("-sm,--split-mode", &split_mode, "MODE",
           "several GPUs: layer (consecutive layers on each), tensor (= --tp over --device's GPUs) or none; "
           "default: layer when the model does not fit one GPU")
      .opt("-ts,--tensor-split", &tensor_split, "A,B...", "a layer split's shares of the layers per GPU, e.g. 3,1")
      .flag("--cpu-moe", &cpu_moe, "mixture of experts: every layer's expert weights in CPU memory, their products on the CPU")
      .opt("--n-cpu-moe", &n_cpu_moe, "N", "mixture of experts: the expert weights of the first N layers on the CPU");
}

void GpuFlags::apply(BackendFlags& f) const {
  if (devices.empty()) throw UsageError("--device: expected a GPU number");
  for (int d : devices)
    if (d < 0) throw UsageError("--device: expected GPU numbers >= 0, got " + std::to_string(d));
  f.device = devices[0];
  if (devices.size() > 1) f.devices = devices;
  f.split_mode = split_mode;
  if (n_cpu_moe < 0) throw UsageError("--n-cpu-moe: expected 0 or more layers, got " + std::to_string(n_cpu_moe));
  f.cpu_moe = cpu_moe;
  f.n_cpu_moe = n_cpu_moe;
  f.tensor_split.clear();
  for (size_t at = 0; !tensor_split.empty() && at <= tensor_split.size();) {
    const size_t end = tensor_split.find(',', at);
    const std::string v = tensor_split.substr(at, end == std::string::npos ? std::string::npos : end - at);
    char* stop = nullptr;
    const double x = std::strtod(v.c_str(), &stop);
    if (v.empty() || *stop || !(x >= 0))
      throw UsageError("-ts: '" + tensor_split + "': expected shares like 3,1 (numbers >= 0)");
    f.tensor_split.push_back(x);
    if (end == std::string::npos) break;
    at = end + 1;
  }
}

int default_load_threads() {
  const unsigned n = std::thread::hardware_concurrency();
  return int(std::clamp(n, 1u, 8u));
}

std::function<void(const LoadProgress&)> load_progress_bar() {
  if (!isatty(STDERR_FILENO)) return {};
  auto drawn = std::make_shared<bool>(false);
  return [drawn](const LoadProgress& p) {
    const bool last = p.done >= p.total;
    if (last) {
      if (*drawn) std::fputs("\r\x1b[K", stderr);
      *drawn = false;
      return;
    }
    if (p.seconds < 1.0) return;  // short loads draw nothing
    const double rate = p.seconds > 0 ? double(p.done) / p.seconds : 0;
    const double left = rate > 0 ? double(p.total - p.done) / rate : 0;
    std::fprintf(stderr, "\rweir: loading weights %.2f / %.2f GB (%3.0f%%) %5.1f GB/s, %.0f s left\x1b[K",
                 double(p.done) / 1e9, double(p.total) / 1e9, 100.0 * double(p.done) / double(p.total ? p.total : 1),
                 rate / 1e9, left);
    std::fflush(stderr);
    *drawn = true;
  };
}

std::unique_ptr<Session> make_session(const Model& m, Backend& b, SessionParams p, const std::string& ctx_flags) {
  p.stop = &stop_flag();
  const HParams& h = m.hparams();
  const double gib = double(h.n_layer) * double(p.n_ctx) *
                     double(row_bytes(p.kv_type, h.n_embd_k()) + row_bytes(p.kv_type, h.n_embd_v())) / double(1 << 30);
  char need[64];
  std::snprintf(need, sizeof need, "%.2f GiB", gib);
  try {
    auto s = std::make_unique<Session>(m, b, p);
    if (h.n_ctx_train > 0 && p.n_ctx > h.n_ctx_train)
      warn("a context of " + std::to_string(p.n_ctx) + " tokens (" + ctx_flags + ") is more than the " +
           std::to_string(h.n_ctx_train) + " tokens the model was trained for (" + h.arch +
           ".context_length); expect degraded output past it");
    return s;
  } catch (const std::bad_alloc&) {
    throw Error("a context of " + std::to_string(p.n_ctx) + " tokens (" + ctx_flags + "): the KV cache needs " + need +
                ", more memory than there is; lower " + ctx_flags);
  } catch (const Error& e) {
    if (std::string(e.what()).rfind("kv cache:", 0) != 0) throw;
    throw Error("a context of " + std::to_string(p.n_ctx) + " tokens (" + ctx_flags + "): the KV cache needs " + need +
                " (" + e.what() + "); lower " + ctx_flags);
  }
}

int64_t first_non_finite(const float* logits, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(logits[i])) return i;
  return -1;
}

std::string gpu_name(int device) {
  const auto gpus = cuda_devices();
  return device >= 0 && device < int(gpus.size()) ? gpus[size_t(device)].name : std::string();
}

void check_threads(int threads, const std::string& flag) {
  if (threads < 1 || threads > kMaxThreads)
    throw UsageError(flag + ": expected 1 to " + std::to_string(kMaxThreads) + " threads, got " +
                     std::to_string(threads));
}

void check_device_flag(bool device_given, int ngl) {
  if (device_given && ngl == 0)
    throw UsageError("--device chooses the GPU for -ngl; without -ngl (or with -ngl 0) the model runs on the CPU");
}

std::string read_text_file(const std::string& path, const std::string& flag) {
  if (path.empty()) throw UsageError(flag + ": expected a file name");
  // O_NONBLOCK for the open alone: a FIFO without a writer must not hang it.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw Error(flag + " " + path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || S_ISDIR(st.st_mode)) {
    ::close(fd);
    throw Error(flag + " " + path + ": is a directory, not a text file");
  }
  if (!S_ISREG(st.st_mode) && !S_ISFIFO(st.st_mode) && !S_ISCHR(st.st_mode)) {
    ::close(fd);
    throw Error(flag + " " + path + ": not a regular file, pipe or terminal");
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  std::string text;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) {
      if (stop_requested()) break;
      continue;
    }
    if (n < 0) {
      const int e = errno;
      ::close(fd);
      throw Error(flag + " " + path + ": cannot read: " + std::strerror(e));
    }
    if (n == 0) break;
    if (text.size() + size_t(n) > kMaxTextBytes) {
      ::close(fd);
      throw Error(flag + " " + path + ": more than " + std::to_string(kMaxTextBytes >> 20) + " MiB of text");
    }
    text.append(buf, size_t(n));
  }
  ::close(fd);
  return text;
}

void write_stdout(const void* data, size_t n) {
  if (n > 0 && std::fwrite(data, 1, n, stdout) != n)
    throw Error(std::string("cannot write to standard output: ") + std::strerror(errno));
  if (std::fflush(stdout) != 0)
    throw Error(std::string("cannot write to standard output: ") + std::strerror(errno));
}

void add_sampling_flags(Args& a, SamplerParams* sp) {
  a.opt("--temp", &sp->temperature, "T", "temperature; 0 is greedy and deterministic (default 0.8)")
      .opt("--top-k", &sp->top_k, "K", "keep the K most likely tokens (default 40; 0: off)")
      .opt("--top-p", &sp->top_p, "P", "nucleus sampling threshold (default 0.95; 1: off)")
      .opt("--min-p", &sp->min_p, "P", "drop tokens below P x the top probability (default 0.05; 0: off)");
}

void check_sampling(const SamplerParams& sp) {
  if (sp.temperature < 0) throw UsageError("--temp: expected 0 (greedy) or more, got " + std::to_string(sp.temperature));
  if (sp.top_k < 0) throw UsageError("--top-k: expected 0 (off) or more, got " + std::to_string(sp.top_k));
  if (!(sp.top_p > 0 && sp.top_p <= 1)) throw UsageError("--top-p: expected a value in (0, 1], got " + std::to_string(sp.top_p));
  if (!(sp.min_p >= 0 && sp.min_p <= 1)) throw UsageError("--min-p: expected a value in [0, 1], got " + std::to_string(sp.min_p));
  if (!(sp.repeat_penalty > 0))
    throw UsageError("--repeat-penalty: expected a positive value (1: off), got " + std::to_string(sp.repeat_penalty));
  if (sp.repeat_last_n < 0) throw UsageError("--repeat-last-n: expected 0 (off) or more, got " + std::to_string(sp.repeat_last_n));
}

BackendSampling backend_sampling(const SamplerParams& sp, uint64_t seed) {
  BackendSampling bs;
  bs.temperature = sp.temperature;
  bs.top_k = sp.top_k;
  bs.top_p = sp.top_p;
  bs.min_p = sp.min_p;
  bs.seed = seed;
  return bs;
}

ChatTemplate chat_template_for(const Model& m, const std::string& template_file) {
  const Vocab& v = m.tokenizer().vocab();
  if (template_file.empty()) return ChatTemplate::for_model(m.file(), v);
  return ChatTemplate(read_text_file(template_file, "--chat-template-file"), template_file, v);
}

}  // namespace weir::tools
