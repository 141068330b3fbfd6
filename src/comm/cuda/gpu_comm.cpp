// GPU groups of one process (comm/gpu_comm.h): NCCL communicators from
// ncclCommInitAll, and the NVLink one-shot kernels' peer buffers.
#include "comm/gpu_comm.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <cstdlib>
#include <mutex>

#include "comm/cuda/nccl_api.h"
#include "comm/cuda/nvlink_kernels.h"
#include "core/error.h"

namespace weir {
namespace {

using comm_cuda::kMaxBlocks;
using comm_cuda::kMaxRanks;
using comm_cuda::NcclApi;
using comm_cuda::NvlinkPeers;

void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    cudaGetLastError();
    throw Error(std::string("gpu comm: ") + what + ": " + cudaGetErrorString(e));
  }
}

// What the ranks share.
struct GpuGroup {
  std::vector<int> devices;       // a rank each (-1: a rank in another process)
  bool local = true;              // every rank a thread of this process
  GpuCommOptions opts;
  const NcclApi* nccl = nullptr;
  std::vector<ncclComm_t> comms;  // a rank each (null without NCCL)
  bool nvlink = false;            // peer access between every pair
  std::string nvlink_note;        // why not
  size_t cap = 0;                 // floats a slot
  std::vector<uint4*> recv;
  std::vector<uint32_t*> epochs;
  std::atomic<uint64_t> arrivals{0};  // before_launch calls of all ranks so far
  std::atomic<bool> aborted{false};
  std::mutex abort_m;
  std::string why;

  ~GpuGroup() {
    for (size_t r = 0; r < devices.size(); ++r) {
      if (devices[r] < 0) continue;
      cudaSetDevice(devices[r]);
      cudaDeviceSynchronize();
      if (r < recv.size() && recv[r]) cudaFree(recv[r]);
      if (r < epochs.size() && epochs[r]) cudaFree(epochs[r]);
      if (r < comms.size() && comms[r]) (aborted ? nccl->CommAbort : nccl->CommDestroy)(comms[r]);
    }
  }
};

class GpuComm final : public Collective {
 public:
  GpuComm(std::shared_ptr<GpuGroup> g, int rank) : g_(std::move(g)), rank_(rank) {
    if (g_->nvlink) {
      for (int q = 0; q < size(); ++q) {
        peers_.recv[q] = g_->recv[size_t(q)];
      }
      peers_.epochs = g_->epochs[size_t(rank)];
      peers_.rank = rank;
      peers_.size = size();
      peers_.cap = g_->cap;
      int khz = 0;
      cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, g_->devices[size_t(rank)]);
      peers_.timeout_cycles = (long long)(khz > 0 ? khz : 1500000) * g_->opts.timeout_ms;
    }
  }
  ~GpuComm() override {
    cudaSetDevice(device());
    if (send_) cudaFree(send_);
    if (gathered_) cudaFree(gathered_);
  }
  int rank() const override { return rank_; }
  int size() const override { return int(g_->devices.size()); }
  std::string kind() const override {
    return g_->nvlink ? (g_->nccl ? "nvlink+nccl" : "nvlink (no NCCL: " + g_->nvlink_note + ")") : "nccl";
  }

  void prepare(size_t max_floats) override {
    // NCCL's all_gather goes through padded buffers: room for the largest.
    if (max_floats <= scratch_floats_ || !g_->nccl) return;
    cuda_ok(cudaSetDevice(device()), "cudaSetDevice");
    if (send_) cudaFree(send_);
    if (gathered_) cudaFree(gathered_);
    send_ = gathered_ = nullptr;
    const size_t padded = max_floats + size_t(size()) * 1024;
    cuda_ok(cudaMalloc(&send_, padded * sizeof(float)), "cudaMalloc");
    cuda_ok(cudaMalloc(&gathered_, padded * sizeof(float)), "cudaMalloc");
    scratch_floats_ = max_floats;
  }

  void all_reduce_sum(const float* src, float* dst, size_t n, void* stream) override {
    check();
    auto s = static_cast<cudaStream_t>(stream);
    if (use_nvlink(n)) return comm_cuda::nvlink_all_reduce(peers_, src, dst, n, s);
    if (g_->nvlink && !g_->nccl) {  // no NCCL: the kernel a buffer's worth at a time
      for (size_t at = 0; at < n; at += g_->cap)
        comm_cuda::nvlink_all_reduce(peers_, src + at, dst + at, std::min(g_->cap, n - at), s);
      return;
    }
    need_nccl(n);
    nccl_ok(g_->nccl->AllReduce(src, dst, n, ncclFloat, ncclSum, comm(), s), "ncclAllReduce");
  }

  void all_gather_rows(const float* src, size_t src_ld, float* dst, size_t dst_ld, int64_t total, int64_t cols,
                       void* stream) override {
    check();
    auto s = static_cast<cudaStream_t>(stream);
    const size_t most = size_t(split_range(total, size(), 0).size());
    if (use_nvlink(most * size_t(cols)))
      return comm_cuda::nvlink_all_gather(peers_, src, src_ld, dst, dst_ld, total, cols, s);
    if (g_->nvlink && !g_->nccl && most <= g_->cap) {  // no NCCL: a few columns at a time
      const int64_t per = int64_t(g_->cap / most);
      for (int64_t c = 0; c < cols; c += per)
        comm_cuda::nvlink_all_gather(peers_, src + size_t(c) * src_ld, src_ld, dst + size_t(c) * dst_ld, dst_ld, total,
                                     std::min(per, cols - c), s);
      return;
    }
    need_nccl(most * size_t(cols));
    // Every rank's part padded to `most` rows: NCCL gathers equal counts.
    if (most * size_t(cols) * size_t(size()) > scratch_floats_ + size_t(size()) * 1024)
      throw Error("gpu comm: all_gather of " + std::to_string(total) + " x " + std::to_string(cols) +
                  " floats past what was prepared");
    const Range mine = split_range(total, size(), rank_);
    cuda_ok(cudaMemcpy2DAsync(send_, most * sizeof(float), src, src_ld * sizeof(float),
                              size_t(mine.size()) * sizeof(float), size_t(cols), cudaMemcpyDeviceToDevice, s),
            "pack");
    nccl_ok(g_->nccl->AllGather(send_, gathered_, most * size_t(cols), ncclFloat, comm(), s), "ncclAllGather");
    for (int q = 0; q < size(); ++q) {
      const Range r = split_range(total, size(), q);
      cuda_ok(cudaMemcpy2DAsync(dst + r.begin, dst_ld * sizeof(float), gathered_ + size_t(q) * most * size_t(cols),
                                most * sizeof(float), size_t(r.size()) * sizeof(float), size_t(cols),
                                cudaMemcpyDeviceToDevice, s),
              "unpack");
    }
  }

  // Every rank calls it once a step: round k ends when k * size calls have
  // come. Spins for the first 200 us (the ranks arrive together in a steady
  // decode), then sleeps between looks.
  void before_launch() override {
    check();
    if (!g_->local) return;  // processes: no peer mappings between them, nothing to wait for
    const uint64_t n = uint64_t(size());
    const uint64_t end = (g_->arrivals.fetch_add(1) / n + 1) * n;
    const auto t0 = std::chrono::steady_clock::now();
    for (int spins = 0; g_->arrivals.load() < end; ++spins) {
      check();
      if (spins < 64) continue;
      const auto waited = std::chrono::steady_clock::now() - t0;
      if (waited > std::chrono::milliseconds(g_->opts.timeout_ms)) {
        abort("tensor parallel: rank " + std::to_string(rank_) + " waited " +
              std::to_string(g_->opts.timeout_ms / 1000.0) + " s for the other ranks to start a step");
        check();
      }
      if (waited < std::chrono::microseconds(200)) std::this_thread::yield();
      else std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }

  void abort(const std::string& why) override {
    std::lock_guard<std::mutex> lk(g_->abort_m);
    if (g_->aborted) return;
    g_->why = why;  // before the flag: check() reads it once the flag is up
    g_->aborted = true;
    // Ranks stuck inside NCCL come out (the group is done).
    for (ncclComm_t c : g_->comms)
      if (c) g_->nccl->CommAbort(c);
    for (ncclComm_t& c : g_->comms) c = nullptr;
  }

 private:
  int device() const { return g_->devices[size_t(rank_)]; }
  ncclComm_t comm() const { return g_->comms[size_t(rank_)]; }
  bool use_nvlink(size_t floats) const {
    return g_->nvlink && floats <= g_->cap && floats * sizeof(float) <= g_->opts.nvlink_max_bytes;
  }
  void need_nccl(size_t floats) const {
    if (!g_->nccl || !comm())
      throw Error("gpu comm: a message of " + std::to_string(floats * sizeof(float)) +
                  " bytes needs NCCL, which this group does not have" +
                  (g_->nvlink_note.empty() ? "" : " (" + g_->nvlink_note + ")"));
  }
  void check() const {
    if (g_->aborted) throw CommError(g_->why);
  }
  void nccl_ok(ncclResult_t r, const char* what) const {
    if (r != ncclSuccess) throw CommError(std::string(what) + ": " + g_->nccl->GetErrorString(r));
  }
  std::shared_ptr<GpuGroup> g_;
  int rank_;
  NvlinkPeers peers_{};
  float* send_ = nullptr;
  float* gathered_ = nullptr;
  size_t scratch_floats_ = 0;
};

void nccl_check(const NcclApi& api, ncclResult_t r, const char* what) {
  if (r != ncclSuccess) throw Error(std::string(what) + ": " + api.GetErrorString(r));
}

}  // namespace

bool gpu_comm_built() { return true; }

std::unique_ptr<Collective> make_gpu_comm_rank(int device, int rank, int size,
                                               const std::function<void(void*, size_t)>& broadcast,
                                               const GpuCommOptions& o) {
  if (size < 1 || size > kMaxRanks || rank < 0 || rank >= size)
    throw Error("gpu comm: rank " + std::to_string(rank) + " of " + std::to_string(size));
  setenv("NCCL_NVLS_ENABLE", "0", 1);  // never NVLink multicast (docs: it can take shared GPUs out of service)
  setenv("NCCL_RUNTIME_CONNECT", "0", 0);
  auto g = std::make_shared<GpuGroup>();
  g->devices.assign(size_t(size), -1);
  g->devices[size_t(rank)] = device;
  g->local = false;
  g->opts = o;
  g->opts.nvlink_max_bytes = 0;
  g->nvlink_note = "ranks in separate processes";
  // Every rank takes part in the broadcast, even one whose NCCL is missing
  // (it then sends or receives zeros and fails below with the reason).
  const NcclApi* api = nullptr;
  std::string why;
  try {
    api = &comm_cuda::nccl(o.nccl_library.empty() ? comm_cuda::default_nccl_candidates() : o.nccl_library);
  } catch (const Error& e) {
    why = e.what();
  }
  ncclUniqueId id{};
  if (rank == 0 && api) nccl_check(*api, api->GetUniqueId(&id), "ncclGetUniqueId");
  broadcast(&id, sizeof id);
  if (!api) throw Error("gpu comm: rank " + std::to_string(rank) + ": " + why);
  cuda_ok(cudaSetDevice(device), "cudaSetDevice");
  g->nccl = api;
  g->comms.assign(size_t(size), nullptr);
  nccl_check(*api, api->CommInitRank(&g->comms[size_t(rank)], size, id, rank), "ncclCommInitRank");
  return std::make_unique<GpuComm>(g, rank);
}

std::string gpu_comm_info() {
  std::string s = "NVLink one-shot kernels";
  try {
    const NcclApi& n = comm_cuda::nccl(comm_cuda::default_nccl_candidates());
    s += " + NCCL " + std::to_string(n.version / 10000) + "." + std::to_string(n.version / 100 % 100) + "." +
         std::to_string(n.version % 100) + " (" + n.path + ")";
  } catch (const Error& e) {
    s += "; " + std::string(e.what());
  }
  return s;
}

std::vector<std::unique_ptr<Collective>> make_gpu_comms(const std::vector<int>& devices, const GpuCommOptions& o) {
  const int n = int(devices.size());
  if (n < 1 || n > kMaxRanks) throw Error("gpu comm: 1 to " + std::to_string(kMaxRanks) + " GPUs, got " + std::to_string(n));
  auto g = std::make_shared<GpuGroup>();
  g->devices = devices;
  g->opts = o;
  if (o.nvlink_max_bytes == GpuCommOptions::kNvlinkAuto)  // without NCCL the kernel's buffer size only
    g->opts.nvlink_max_bytes = size_t(n <= 2 || !o.nccl ? 512 : 192) << 10;
  // NVLink: peer access between every pair.
  g->nvlink = g->opts.nvlink_max_bytes > 0 && n > 1;
  for (int i = 0; i < n && g->nvlink; ++i)
    for (int j = 0; j < n; ++j) {
      if (i == j) continue;
      int can = 0;
      cuda_ok(cudaDeviceCanAccessPeer(&can, devices[size_t(i)], devices[size_t(j)]), "cudaDeviceCanAccessPeer");
      if (!can) {
        g->nvlink = false;
        g->nvlink_note = "GPU " + std::to_string(devices[size_t(i)]) + " cannot reach GPU " +
                         std::to_string(devices[size_t(j)]) + "'s memory";
        break;
      }
      cuda_ok(cudaSetDevice(devices[size_t(i)]), "cudaSetDevice");
      const cudaError_t e = cudaDeviceEnablePeerAccess(devices[size_t(j)], 0);
      if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) cuda_ok(e, "cudaDeviceEnablePeerAccess");
      cudaGetLastError();
    }
  if (g->nvlink) {
    g->cap = (g->opts.nvlink_max_bytes + 2 * sizeof(float) - 1) / (2 * sizeof(float)) * 2;  // whole pairs
    const size_t bytes = comm_cuda::nvlink_buffer_bytes(g->cap, n);
    for (int r = 0; r < n; ++r) {
      cuda_ok(cudaSetDevice(devices[size_t(r)]), "cudaSetDevice");
      uint4* recv = nullptr;
      uint32_t* epochs = nullptr;
      cuda_ok(cudaMalloc(&recv, bytes), "cudaMalloc");
      g->recv.push_back(recv);
      cuda_ok(cudaMalloc(&epochs, kMaxBlocks * sizeof(uint32_t)), "cudaMalloc");
      g->epochs.push_back(epochs);
      cuda_ok(cudaMemset(recv, 0, bytes), "cudaMemset");
      cuda_ok(cudaMemset(epochs, 0, kMaxBlocks * sizeof(uint32_t)), "cudaMemset");
      comm_cuda::nvlink_load_kernels();
      cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    }
  }
  // NCCL (NVLS stays off: see docs; the tools set NCCL_NVLS_ENABLE=0).
  // Without it, the NVLink kernels take every message, a buffer at a time.
  if (o.nccl && n > 1) {
    // Never NVLink multicast (it can take shared GPUs out of service), and
    // every connection made at init: a first collective inside a CUDA graph
    // recording must not have to make one.
    setenv("NCCL_NVLS_ENABLE", "0", 1);
    setenv("NCCL_RUNTIME_CONNECT", "0", 0);
    try {
      g->nccl = &comm_cuda::nccl(o.nccl_library.empty() ? comm_cuda::default_nccl_candidates() : o.nccl_library);
    } catch (const Error& e) {
      if (!g->nvlink) throw;
      g->nvlink_note = e.what();
    }
  }
  if (g->nccl) {
    g->comms.assign(size_t(n), nullptr);
    const ncclResult_t r = g->nccl->CommInitAll(g->comms.data(), n, devices.data());
    if (r != ncclSuccess) throw Error(std::string("ncclCommInitAll: ") + g->nccl->GetErrorString(r));
  }
  if (n > 1 && !g->nvlink && !g->nccl) throw Error("gpu comm: neither NVLink peer access nor NCCL for " + std::to_string(n) + " GPUs");
  std::vector<std::unique_ptr<Collective>> out;
  for (int r = 0; r < n; ++r) out.push_back(std::make_unique<GpuComm>(g, r));
  return out;
}

}  // namespace weir
