#include "tools/env_options.h"

#include <algorithm>
#include <cstdlib>
#include <regex>
#include <utility>
#include <stdexcept>
#include <string>

#include "backend/cpu/amx.h"
#include "backend/cpu/qdot.h"
#include "core/graph.h"
#include "tools/args.h"

namespace weir::tools {
namespace {

const char* var(const char* name) {
  const char* e = std::getenv(name);
  return e && *e ? e : nullptr;
}
// On/off knobs: 1, on, true, yes or 0, off, false, no; anything else is an
// error naming the variable (a typo must not silently mean "on").
void flag(const char* name, bool* out) {
  const char* e = var(name);
  if (!e) return;
  const std::string v = e;
  if (v == "1" || v == "on" || v == "true" || v == "yes") *out = true;
  else if (v == "0" || v == "off" || v == "false" || v == "no") *out = false;
  else throw UsageError(std::string(name) + "=" + v + ": expected 1 or 0 (on or off)");
}
// NAME's value v as a whole number in [lo, hi], or a usage error naming it.
long whole_number(const char* name, const std::string& v, long lo, long hi) {
  size_t used = 0;
  long n = 0;
  try {
    n = std::stol(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != v.size() || n < lo || n > hi)
    throw UsageError(std::string(name) + "=" + v + ": expected a whole number from " + std::to_string(lo) + " to " +
                     std::to_string(hi));
  return n;
}
void number(const char* name, int* out, int lo, int hi) {
  if (const char* e = var(name)) *out = int(whole_number(name, e, lo, hi));
}

// WEIR_CUDA_PDL_OFF_OPS=op,op: every name one of the IR's ops.
void op_list(const char* name, std::string* out) {
  const char* e = var(name);
  if (!e) return;
  const std::string v = e;
  size_t at = 0;
  while (at <= v.size()) {
    const size_t comma = std::min(v.find(',', at), v.size());
    const std::string op = v.substr(at, comma - at);
    bool known = false;
    for (int k = 0; k < int(Op::Count) && !known; ++k) known = op == op_name(Op(k));
    if (!known) throw UsageError(std::string(name) + "=" + v + ": '" + op + "' is not an op (rms_norm, mul_mat, ...)");
    at = comma + 1;
  }
  *out = v;
}

// WEIR_CUDA_PDL_NODES=LO-HI,...: ranges of plan nodes.
void node_ranges(const char* name, std::string* out) {
  const char* e = var(name);
  if (!e) return;
  const std::string v = e;
  static const std::regex ranges(R"(\d+-\d+(,\d+-\d+)*)");
  if (!std::regex_match(v, ranges)) throw UsageError(std::string(name) + "=" + v + ": expected LO-HI[,LO-HI...]");
  *out = v;
}

// The CUDA knobs' names before 2026-11-28, and now.
constexpr std::pair<const char*, const char*> kRenamedCudaKnobs[] = {
    {"WEIR_CUDA_NORM_FOLD", "WEIR_CUDA_DEFER_NORM"},        {"WEIR_CUDA_FOLD_DEEP", "WEIR_CUDA_ADD_NORM_DEEP"},
    {"WEIR_CUDA_FOLD_SPLIT", "WEIR_CUDA_ADD_NORM_SPLIT_K"}, {"WEIR_CUDA_FOLD_WPR", "WEIR_CUDA_ADD_NORM_WARPS_PER_ROW"},
    {"WEIR_CUDA_MV_WARPS", "WEIR_CUDA_DECODE_WARPS_PER_SM"}, {"WEIR_CUDA_MV_EARLY", "WEIR_CUDA_EARLY_WEIGHTS"},
    {"WEIR_CUDA_NORM_NV", "WEIR_CUDA_NORM_FLOAT4S"},        {"WEIR_CUDA_ATTN_WIDE", "WEIR_CUDA_ATTN_HEAD_BLOCKS"},
    {"WEIR_CUDA_ATTN_DEC", "WEIR_CUDA_ATTN_DECODE_MMA"},    {"WEIR_CUDA_ATTN_SEPARATE", "WEIR_CUDA_ATTN_SEQUENCE_HINT"},
    {"WEIR_CUDA_GLU_FUSE", "WEIR_CUDA_GLU_IN_PRODUCTS"},    {"WEIR_CUDA_MOE_FUSE", "WEIR_CUDA_MOE_FUSIONS"},
    {"WEIR_CUDA_VEC_GROUP", "WEIR_CUDA_FLOAT_GROUP"},       {"WEIR_CUDA_ROW_JOBS", "WEIR_CUDA_ROPE_IN_PRODUCTS"},
    {"WEIR_CUDA_ROPE_NORM", "WEIR_CUDA_ROPE_FUSIONS"},      {"WEIR_CUDA_TILE_MAX_T", "WEIR_CUDA_TILE_MAX_TOKENS"},
};

}  // namespace

CudaOptions cuda_options_from_env(int device) {
  for (const auto& [before, now] : kRenamedCudaKnobs)
    if (var(before)) throw UsageError(std::string(before) + " is now called " + now);
  CudaOptions o;
  o.device = device;
  flag("WEIR_CUDA_GRAPHS", &o.graphs);
  flag("WEIR_CUDA_PROFILE", &o.profile);
  flag("WEIR_CUDA_PLAN_DUMP", &o.plan_dump);
  op_list("WEIR_CUDA_PDL_OFF_OPS", &o.pdl_off_ops);
  node_ranges("WEIR_CUDA_PDL_NODES", &o.pdl_nodes);
  flag("WEIR_CUDA_GLU_IN_PRODUCTS", &o.glu_in_products);
  flag("WEIR_CUDA_DEFER_NORM", &o.defer_norm);
  flag("WEIR_CUDA_ROPE_IN_PRODUCTS", &o.rope_in_products);
  flag("WEIR_CUDA_TILE_GROUP", &o.tile_group);
  flag("WEIR_CUDA_FLOAT_GROUP", &o.float_group);
  flag("WEIR_CUDA_MOE_FUSIONS", &o.moe_fusions);
  flag("WEIR_CUDA_ROPE_FUSIONS", &o.rope_fusions);
  flag("WEIR_CUDA_NORM_CHAIN", &o.norm_chain);
  flag("WEIR_CUDA_PDL", &o.pdl);
  number("WEIR_CUDA_STAGED", &o.staged, -1, 1);
  number("WEIR_CUDA_STAGES", &o.stages, 0, 64);
  flag("WEIR_CUDA_ONE_WAVE", &o.one_wave);
  flag("WEIR_CUDA_ADD_NORM_DEEP", &o.add_norm_deep);
  number("WEIR_CUDA_ADD_NORM_SPLIT_K", &o.add_norm_split_k, 0, 3);
  number("WEIR_CUDA_ADD_NORM_WARPS_PER_ROW", &o.add_norm_warps_per_row, 0, 32);
  number("WEIR_CUDA_DECODE_WARPS_PER_SM", &o.decode_warps_per_sm, 0, 64);
  flag("WEIR_CUDA_EARLY_WEIGHTS", &o.early_weights);
  flag("WEIR_CUDA_TILE_MMA", &o.tile_mma);
  number("WEIR_CUDA_TILE_MAX_TOKENS", &o.tile_max_tokens, 0, 64);
  number("WEIR_CUDA_MMA_MIN_TOKENS", &o.mma_min_tokens, 5, 9);
  number("WEIR_CUDA_TILE_BLOCKS", &o.tile_blocks, 1, 32);
  number("WEIR_CUDA_NORM_FLOAT4S", &o.norm_float4s, 1, 16);
  number("WEIR_CUDA_ATTN_HEAD_BLOCKS", &o.attn_head_blocks, 0, 3);
  flag("WEIR_CUDA_ATTN_STRIDED", &o.attn_strided);
  number("WEIR_CUDA_ATTN_BLOCKS", &o.attn_blocks, 1, 16);
  number("WEIR_CUDA_ATTN_ROWS", &o.attn_rows, 1, 64);
  flag("WEIR_CUDA_ATTN_DECODE_MMA", &o.attn_decode_mma);
  number("WEIR_CUDA_ATTN_CLUSTER", &o.attn_cluster, 0, 16);
  flag("WEIR_CUDA_ATTN_SEQUENCE_HINT", &o.attn_sequence_hint);
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
  if (const char* e = var("WEIR_LOAD_BUFFER_MB"))
    o->buffer_bytes = size_t(whole_number("WEIR_LOAD_BUFFER_MB", e, 1, 4096)) << 20;
  number("WEIR_LOAD_THREADS", &o->readers, 1, 4096);
}

GpuCommOptions gpu_comm_options_from_env() {
  GpuCommOptions o;
  if (const char* e = var("WEIR_NVLINK_MAX_KB"))
    o.nvlink_max_bytes = size_t(whole_number("WEIR_NVLINK_MAX_KB", e, 0, 1 << 20)) << 10;
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
  int amx_steps = -1;  // WEIR_AMX_PREFETCH: steps ahead, 0: none
  number("WEIR_AMX_PREFETCH", &amx_steps, 0, 64);
  if (amx_steps >= 0) cpu::set_amx_prefetch_steps(amx_steps);
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
