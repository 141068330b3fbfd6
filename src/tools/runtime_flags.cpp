#include "tools/runtime_flags.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "tools/common.h"
#include "tools/env_options.h"
#include "tools/mpi_ranks.h"
#include "tools/signals.h"

namespace weir::tools {

namespace {

// Each flag's names: what add_to registers and runtime_flag_names lists.
constexpr const char* kNgl = "-ngl,--n-gpu-layers,--gpu-layers";
constexpr const char* kFit = "--fit";
constexpr const char* kFitVram = "--fit-vram";
constexpr const char* kOt = "-ot,--override-tensor";
constexpr const char* kDevice = "--device";
constexpr const char* kMg = "-mg,--main-gpu";
constexpr const char* kSm = "-sm,--split-mode";
constexpr const char* kTs = "-ts,--tensor-split";
constexpr const char* kCpuMoe = "-cmoe,--cpu-moe";
constexpr const char* kNCpuMoe = "-ncmoe,--n-cpu-moe";
constexpr const char* kTp = "--tp";
constexpr const char* kNoOpOffload = "-nopo,--no-op-offload";
constexpr const char* kCtx = "-c,--ctx-size";
constexpr const char* kBatch = "-b,--batch-size";
constexpr const char* kUbatch = "-ub,--ubatch-size";
constexpr const char* kCtk = "-ctk,--cache-type-k";
constexpr const char* kCtv = "-ctv,--cache-type-v";
constexpr const char* kFa = "-fa,--flash-attn";
constexpr const char* kThreads = "-t,--threads";
constexpr const char* kThreadsBatch = "-tb,--threads-batch";
constexpr const char* kNuma = "--numa";
constexpr const char* kNoMmap = "--no-mmap";
constexpr const char* kDirectIo = "-dio,--direct-io";

int one(const std::vector<int>& v, const char* flag) {
  if (v.size() != 1)
    throw UsageError(std::string(flag) + ": expected one value (lists of values are for weir bench), got " +
                     std::to_string(v.size()));
  return v[0];
}

std::vector<double> parse_shares(const std::string& s) {
  std::vector<double> out;
  for (size_t at = 0; !s.empty() && at <= s.size();) {
    const size_t end = s.find(',', at);
    const std::string v = s.substr(at, end == std::string::npos ? std::string::npos : end - at);
    char* stop = nullptr;
    const double x = std::strtod(v.c_str(), &stop);
    if (v.empty() || *stop || !(x >= 0)) throw UsageError("-ts: '" + s + "': expected shares like 3,1 (numbers >= 0)");
    out.push_back(x);
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return out;
}

}  // namespace

std::vector<std::string> runtime_flag_names() {
  std::vector<std::string> names;
  for (const char* f : {kNgl, kFit, kFitVram, kOt, kDevice, kMg, kSm, kTs, kCpuMoe, kNCpuMoe, kTp, kNoOpOffload, kCtx, kBatch, kUbatch,
                        kCtk, kCtv, kFa, kThreads, kThreadsBatch, kNuma, kNoMmap, kDirectIo}) {
    const std::string s = f;
    for (size_t at = 0; at <= s.size();) {
      const size_t end = s.find(',', at);
      names.push_back(s.substr(at, end == std::string::npos ? std::string::npos : end - at));
      if (end == std::string::npos) break;
      at = end + 1;
    }
  }
  return names;
}

DType parse_kv_type(const std::string& flag, const std::string& s) {
  if (s == "f16") return DType::F16;
  if (s == "f32") return DType::F32;
  if (s == "q8_0") return DType::Q8_0;
  throw UsageError(flag + ": weir's KV cache is f32, f16 or q8_0, got '" + s + "'");
}

RuntimeFlags::RuntimeFlags() : threads({default_threads()}) {}

void RuntimeFlags::add_to(Args& a, const Defaults& d) {
  d_ = d;
  n_ctx = d.n_ctx;
  // llama-bench: K and V f16 each unless given (so -ctk alone names a type
  // weir's one-type cache cannot hold beside V's f16).
  cache_type_k = cache_type_v = d.kv_f16 ? "f16" : "";
  const std::string list = d.lists ? " (a list: each value a test)" : "";
  a.opt_list(kNgl, &ngl_text_, "N|auto",
             "layers on the GPU: the last N (0: CPU, default; 99: the whole model; auto: as --fit)" + list)
      .flag(kFit, &fit,
            "as much of the model on the GPU as its free memory holds, less a margin for the KV cache and "
            "scratch: whole layers from the last, the output head with all of them, a MoE's experts last; "
            "one line says what went where (= -ngl auto)")
      .opt(kFitVram, &fit_vram_text_, "SIZE", "the most GPU memory --fit may use, e.g. 6G or 6144M (default: what is free)")
      .opt_list(kOt, &overrides, "REGEX=DEV",
                "put the weights whose names match REGEX on DEV (CPU, CUDA0), e.g. \"exps=CPU\"; repeatable")
      .opt_list(kDevice, &devices, "N[,M...]",
                "the GPU(s) for -ngl (default -mg's); several: a layer split (-sm layer) or --tp over them")
      .opt(kMg, &main_gpu, "N", "the GPU of a one-GPU run, the first of a split (default 0)")
      .opt(kSm, &split_mode, "MODE",
           "several GPUs: layer (consecutive layers on each), tensor (= --tp over the GPUs) or none; "
           "default: layer when the model does not fit one GPU")
      .opt(kTs, &tensor_split, "A,B...", "a layer split's shares of the layers per GPU, e.g. 3,1")
      .flag(kCpuMoe, &cpu_moe, "mixture of experts: every layer's expert weights in CPU memory, their products on the CPU")
      .opt(kNCpuMoe, &n_cpu_moe, "N", "mixture of experts: the expert weights of the first N layers on the CPU")
      .opt(kTp, &tp, "N", "tensor parallel over N ranks: CPU ranks splitting -t, or N GPUs with -ngl 99 (default 1)")
      .flag(kNoOpOffload, &no_op_offload, "keep the prompt's products of CPU-resident weights on the CPU "
                                          "(default: on the GPU when there is one)")
      .opt(kCtx, &n_ctx, "N", d.ctx_help)
      .opt_list(kBatch, &n_batch, "N", "logical batch: prompt tokens handed over at once (default 2048)" + list)
      .opt_list(kUbatch, &n_ubatch, "N", "physical batch: tokens a forward step takes, at most -b (default 512)" + list)
      .opt(kCtk, &cache_type_k, "T",
           "KV cache type: f32, f16 or q8_0 (about half of f16's memory); default f16 with -ngl (the GPUs' "
           "attention kernels' type), f32 on the CPU (faster there); bench: f16, as llama-bench")
      .opt(kCtv, &cache_type_v, "T", "must equal -ctk (weir's cache has one type)")
      .opt(kFa, &flash_attn, "on|off|auto", "weir's attention is always fused (flash): on and auto (default) take it; "
                                             "off is refused")
      .opt_list(kThreads, &threads, "N", "CPU threads (default: all CPUs)" + list)
      .opt(kThreadsBatch, &threads_batch, "N", "threads for prompts: weir uses -t's threads for both, so equal to -t")
      .opt(kNuma, &numa, "MODE",
           "off (default), distribute (threads and weight rows spread over NUMA nodes) or isolate (only the node "
           "weir starts on)")
      .flag(kNoMmap, &no_mmap, "read the CPU's weights into memory instead of mapping the file (network filesystems)")
      .flag(kDirectIo, &direct_io, "read the weights with O_DIRECT, around the page cache (cold loads from fast disks)");
}

void RuntimeFlags::parsed(const Args& a) {
  device_given_ = a.given("--device");
  ctx_given_ = a.given("-c");
  if (!ngl_text_.empty()) {
    n_gpu_layers.clear();
    for (const std::string& v : ngl_text_) {
      if (v == "auto") {
        n_gpu_layers.push_back(kNglAuto);
        continue;
      }
      for (int n : parse_int_list("-ngl", v)) {
        if (n < 0) throw UsageError("-ngl: expected a number of layers (0 or more) or auto, got " + std::to_string(n));
        n_gpu_layers.push_back(n);
      }
    }
  }
  if (fit) {
    for (int n : n_gpu_layers)
      if (!ngl_text_.empty() && n != kNglAuto)
        throw UsageError("--fit chooses the layers on the GPU itself; give it or -ngl " + std::to_string(n) + ", not both");
    n_gpu_layers = {kNglAuto};
  }
  if (!fit_vram_text_.empty()) {
    fit_vram = parse_size("--fit-vram", fit_vram_text_);
    if (std::find(n_gpu_layers.begin(), n_gpu_layers.end(), kNglAuto) == n_gpu_layers.end())
      throw UsageError("--fit-vram caps what --fit places on the GPU: give --fit (or -ngl auto) with it");
  }
}

void RuntimeFlags::check_gpu_choice(int ngl) const {
  if (ngl == kNglAuto) ngl = 1;  // the fit's GPU is the one --device or -mg chooses
  const bool mg_given = main_gpu >= 0;
  if (device_given_ && mg_given) throw UsageError("-mg and --device both choose the GPU: give one");
  if ((device_given_ || mg_given) && ngl == 0 && overrides.empty())
    throw UsageError(std::string(device_given_ ? "--device" : "-mg") +
                     " chooses the GPU for -ngl; without -ngl (or with -ngl 0) the model runs on the CPU");
}

RuntimeSpec RuntimeFlags::spec(const std::string& model_path) const {
  return spec_for(model_path, one(n_gpu_layers, "-ngl"), one(threads, "--threads"), one(n_batch, "--batch-size"), one(n_ubatch, "--ubatch-size"));
}

DType RuntimeFlags::kv_type(int ngl) const {
  const DType k = !cache_type_k.empty() ? parse_kv_type("-ctk", cache_type_k) : default_kv_type(ngl == kNglAuto ? 1 : ngl);
  if (!cache_type_v.empty() && parse_kv_type("-ctv", cache_type_v) != k)
    throw UsageError("-ctk and -ctv differ; weir's KV cache has one type (give -ctk alone)");
  return k;
}

RuntimeSpec RuntimeFlags::spec_for(const std::string& model_path, int ngl, int n_threads, int batch, int ubatch) const {
  RuntimeSpec s;
  s.model_path = model_path;
  s.fit = ngl == kNglAuto;
  s.n_gpu_layers = s.fit ? 0 : ngl;
  s.fit_vram = fit_vram;
  s.note = [](const std::string& line) { std::fprintf(stderr, "weir: %s\n", line.c_str()); };
  if (devices.empty()) throw UsageError("--device: expected a GPU number");
  for (int dv : devices)
    if (dv < 0) throw UsageError("--device: expected GPU numbers >= 0, got " + std::to_string(dv));
  if (!d_.lists) check_gpu_choice(ngl);  // bench checks it once, with its largest -ngl
  s.main_gpu = main_gpu >= 0 ? main_gpu : devices[0];
  if (devices.size() > 1) s.devices = devices;
  s.split_mode = split_mode;
  s.tensor_split = parse_shares(tensor_split);
  s.overrides = overrides;
  s.cpu_moe = cpu_moe;
  s.n_cpu_moe = n_cpu_moe;
  s.tp = tp;
  s.op_offload = !no_op_offload;

  if (n_ctx < (d_.lists ? 0 : 1)) throw UsageError("--ctx-size: expected a positive number of tokens, got " + std::to_string(n_ctx));
  s.n_ctx = n_ctx;
  s.n_ctx_at_most_trained = d_.n_ctx_at_most_trained && !ctx_given_;
  if (batch < 1) throw UsageError("--batch-size: expected a positive number of tokens, got " + std::to_string(batch));
  if (ubatch < 1) throw UsageError("--ubatch-size: expected a positive number of tokens, got " + std::to_string(ubatch));
  s.n_batch = batch;
  s.n_ubatch = ubatch;
  s.kv_type = kv_type(ngl);
  s.kv_type_default = s.fit && cache_type_k.empty();  // bench's cache is f16 unless -ctk says (kv_f16)
  if (flash_attn == "off" || flash_attn == "0" || flash_attn == "false")
    throw UsageError("-fa off: weir's attention always runs fused (flash attention); there is no other path");
  if (flash_attn != "on" && flash_attn != "auto" && flash_attn != "1" && flash_attn != "true")
    throw UsageError("-fa: expected on, off or auto, got '" + flash_attn + "'");

  check_threads(n_threads, "--threads");
  s.threads = n_threads;
  s.threads_batch = threads_batch;
  s.cpu.numa = parse_numa_flag(numa);
  apply_cpu_env(&s.cpu);

  s.cuda = cuda_options_from_env(0);
  s.gpu_comm = gpu_comm_options_from_env();
  const char* prof = std::getenv("WEIR_SCHED_PROFILE");
  s.profile = prof && *prof == '1';

  s.no_mmap = no_mmap;
  s.load.readers = default_load_threads();
  s.load.buffer_bytes = size_t(4) << 20;
  s.load.direct_io = direct_io;
  apply_load_env(&s.load);
  s.load.progress = load_progress_bar();

  s.stop = &stop_flag();
  s.world = mpi_world();
  s.local_rank = s.world ? mpi_local_rank() : 0;
  return s;
}

}  // namespace weir::tools
