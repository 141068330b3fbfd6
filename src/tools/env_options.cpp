#include "tools/env_options.h"

#include <cstdlib>
#include <stdexcept>
#include <string>

#include "backend/cpu/amx.h"
#include "backend/cpu/qdot.h"
#include "tools/args.h"

namespace weir::tools {
namespace {

const char* var(const char* name) {
  const char* e = std::getenv(name);
  return e && *e ? e : nullptr;
}
void flag(const char* name, bool* out) {
  if (const char* e = var(name)) *out = std::string(e) != "0";
}
void number(const char* name, int* out) {
  if (const char* e = var(name)) *out = std::atoi(e);
}
void text(const char* name, std::string* out) {
  if (const char* e = var(name)) *out = e;
}

}  // namespace

CudaOptions cuda_options_from_env(int device) {
  CudaOptions o;
  o.device = device;
  flag("WEIR_CUDA_GRAPHS", &o.graphs);
  flag("WEIR_CUDA_PROFILE", &o.profile);
  flag("WEIR_CUDA_PLAN_DUMP", &o.plan_dump);
  text("WEIR_CUDA_PDL_OFF_OPS", &o.pdl_off_ops);
  text("WEIR_CUDA_PDL_NODES", &o.pdl_nodes);
  flag("WEIR_CUDA_GLU_FUSE", &o.glu_fuse);
  flag("WEIR_CUDA_NORM_FOLD", &o.norm_fold);
  flag("WEIR_CUDA_ROW_JOBS", &o.row_jobs);
  flag("WEIR_CUDA_TILE_GROUP", &o.tile_group);
  flag("WEIR_CUDA_VEC_GROUP", &o.vec_group);
  flag("WEIR_CUDA_MOE_FUSE", &o.moe_fuse);
  flag("WEIR_CUDA_ROPE_NORM", &o.rope_norm);
  flag("WEIR_CUDA_NORM_CHAIN", &o.norm_chain);
  flag("WEIR_CUDA_PDL", &o.pdl);
  number("WEIR_CUDA_STAGED", &o.staged);
  number("WEIR_CUDA_STAGES", &o.stages);
  flag("WEIR_CUDA_ONE_WAVE", &o.one_wave);
  flag("WEIR_CUDA_FOLD_DEEP", &o.fold_deep);
  number("WEIR_CUDA_FOLD_SPLIT", &o.fold_split);
  number("WEIR_CUDA_FOLD_WPR", &o.fold_wpr);
  number("WEIR_CUDA_MV_WARPS", &o.mv_warps);
  flag("WEIR_CUDA_MV_EARLY", &o.mv_early);
  flag("WEIR_CUDA_TILE_MMA", &o.tile_mma);
  number("WEIR_CUDA_TILE_MAX_T", &o.tile_max_tokens);
  number("WEIR_CUDA_TILE_BLOCKS", &o.tile_blocks);
  number("WEIR_CUDA_NORM_NV", &o.norm_nv);
  number("WEIR_CUDA_ATTN_WIDE", &o.attn_wide);
  flag("WEIR_CUDA_ATTN_STRIDED", &o.attn_strided);
  number("WEIR_CUDA_ATTN_BLOCKS", &o.attn_blocks);
  number("WEIR_CUDA_ATTN_ROWS", &o.attn_rows);
  flag("WEIR_CUDA_ATTN_DEC", &o.attn_dec);
  number("WEIR_CUDA_ATTN_CLUSTER", &o.attn_cluster);
  flag("WEIR_CUDA_ATTN_SEPARATE", &o.attn_separate);
  flag("WEIR_CUDA_ATTN_EARLY_MASK", &o.attn_early_mask);
  return o;
}

void apply_cpu_env(CpuOptions* o) {
  if (const char* e = var("WEIR_BARRIER")) {
    const std::string v = e;
    if (v != "spin" && v != "adaptive") throw UsageError("WEIR_BARRIER=" + v + ": expected adaptive or spin");
    o->spin_barriers = v == "spin";
  }
  flag("WEIR_ALL_BARRIERS", &o->all_barriers);
  flag("WEIR_CPU_REPACK", &o->repack);
  flag("WEIR_CPU_PROFILE", &o->profile);
  flag("WEIR_CPU_AMX", &o->amx);
}

void apply_load_env(LoaderOptions* o) {
  auto positive = [](const char* name, const char* e) {
    const std::string v = e;
    size_t used = 0;
    long n = 0;
    try {
      n = std::stol(v, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != v.size() || n < 1 || n > 4096) throw UsageError(std::string(name) + "=" + v + ": expected 1 to 4096");
    return size_t(n);
  };
  if (const char* e = var("WEIR_LOAD_BUFFER_MB")) o->buffer_bytes = positive("WEIR_LOAD_BUFFER_MB", e) << 20;
  if (const char* e = var("WEIR_LOAD_THREADS")) o->readers = int(positive("WEIR_LOAD_THREADS", e));
}

GpuCommOptions gpu_comm_options_from_env() {
  GpuCommOptions o;
  if (const char* e = var("WEIR_NVLINK_MAX_KB")) {
    const std::string v = e;
    size_t used = 0;
    long n = -1;
    try {
      n = std::stol(v, &used);
    } catch (const std::exception&) {
    }
    if (used != v.size() || n < 0 || n > (1 << 20)) throw UsageError("WEIR_NVLINK_MAX_KB=" + v + ": expected 0 to 1048576");
    o.nvlink_max_bytes = size_t(n) << 10;
  }
  if (const char* e = var("WEIR_NCCL")) o.nccl_library = {e};
  return o;
}

bool pipeline_from_env() {
  bool on = true;
  flag("WEIR_PIPELINE", &on);
  return on;
}

void apply_process_env() {
  if (const char* e = var("WEIR_PREFETCH")) {  // BYTES[,l1|l2|l3|nta]
    const std::string v = e;
    const size_t comma = v.find(',');
    cpu::PrefetchPlan p;
    try {
      size_t used = 0;
      const std::string n = v.substr(0, comma);
      p.bytes = std::stoul(n, &used);
      if (used != n.size() || p.bytes > (1u << 20)) throw std::invalid_argument(n);
    } catch (const std::exception&) {
      throw UsageError("WEIR_PREFETCH=" + v + ": expected BYTES[,l1|l2|l3|nta], BYTES up to 1048576");
    }
    if (comma != std::string::npos) {
      const std::string l = v.substr(comma + 1);
      if (l == "l1") p.level = 0;
      else if (l == "l2") p.level = 1;
      else if (l == "l3") p.level = 2;
      else if (l == "nta") p.level = 3;
      else throw UsageError("WEIR_PREFETCH=" + v + ": the cache is l1, l2, l3 or nta");
    }
    cpu::set_prefetch(p);
  }
  if (const char* e = var("WEIR_AMX_PREFETCH")) {  // steps ahead, 0: none
    const std::string v = e;
    size_t used = 0;
    int steps = -1;
    try {
      steps = std::stoi(v, &used);
    } catch (const std::exception&) {
    }
    if (used != v.size() || steps < 0 || steps > 64)
      throw UsageError("WEIR_AMX_PREFETCH=" + v + ": expected the steps ahead, 0 to 64");
    cpu::set_amx_prefetch_steps(steps);
  }
  const char* s = var("WEIR_SIMD");
  if (!s) return;
  const std::string v = s;
  cpu::SimdLevel l;
  if (v == "reference") l = cpu::SimdLevel::Reference;
  else if (v == "avx2") l = cpu::SimdLevel::AVX2;
  else if (v == "avx512") l = cpu::SimdLevel::AVX512;
  else if (v == "avx512_vnni") l = cpu::SimdLevel::AVX512_VNNI;
  else throw UsageError("WEIR_SIMD=" + v + ": expected reference, avx2, avx512 or avx512_vnni");
  cpu::set_simd_cap(l);
}

}  // namespace weir::tools
