// The plans themselves, against a record: for the tiny models of five
// architectures in five file types, six token counts, F16 and 8-bit KV
// caches and each fusion knob off in turn, every launch's nodes, memory
// range, activation source, 8-bit output, constant weights and jobs, and
// the arena the plan's memory placement gives (sizes and every offset), hashed
// per case. tests/data/cuda_launch_plans.txt was written by the planner as
// it was before launches became values (9e9165b, 21 per-node vectors), so
// the rewrite is shown to plan the same launches. A deliberate change to
// the plans rewrites the record: run
//   weir_cuda_plan_tests --gtest_also_run_disabled_tests --gtest_filter='*DISABLED_WriteRecord'
// and say in the commit why the plans changed.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/plan/launch_memory.h"
#include "backend/cuda/plan/launch_plan.h"
#include "model/model.h"
#include "model/synth.h"
#include "cuda_plan/tiny_models.h"
#include "test_env.h"

namespace weir::cuda {
namespace {

struct Case {
  const char* arch;
  FileType ft;
  int64_t T;
  DType kv;
  int knob;  // -1: every fusion on; 0-7: one off (below); 8: all off
};

std::vector<Case> cases() {
  std::vector<Case> v;
  for (const char* a : {"llama", "qwen2", "qwen3", "gemma3", "qwen3moe"})
    for (FileType ft : {FileType::Q4_K_M, FileType::Q8_0, FileType::MOSTLY_F16, FileType::Q4_0, FileType::Q6_K})
      for (int64_t T : {1, 2, 4, 9, 40, 200})
        for (DType kv : {DType::F16, DType::Q8_0})
          for (int knob = -1; knob < 9; ++knob)
            if (kv == DType::F16 || knob == -1) v.push_back({a, ft, T, kv, knob});
  return v;
}

CudaOptions options(int knob) {
  CudaOptions o;
  bool* knobs[] = {&o.glu_in_products, &o.defer_norm, &o.rope_in_products, &o.tile_group,
                   &o.float_group,     &o.moe_fusions, &o.rope_fusions,    &o.norm_chain};
  if (knob >= 0 && knob < 8) *knobs[knob] = false;
  if (knob == 8)
    for (bool* k : knobs) *k = false;
  return o;
}

using test_models::tiny;

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

int id(const Tensor* t) { return t ? t->id : -1; }

// One case's line of the record: "<case>: N launches <hash>".
std::string record_line(const Case& c) {
  auto model = tiny(c.arch, c.ft);
  CpuBackend cpu{1};
  auto kv = std::make_unique<KVCache>(model->hparams(), 256, c.kv, cpu);
  ForwardGraph fg = model->build(c.T, 256, 1, *kv, false, TensorParallel{});
  const Graph& g = *fg.graph;
  const LaunchPlan p = plan_launches(g, options(c.knob));
  std::string text;
  char line[256];
  for (const Launch& l : p.launches) {
    const bool other = l.kind == LaunchKind::InOtherLaunch;
    const char* x = l.x_from == ActivationSource::DeferredNorm  ? "D"
                    : l.x_from == ActivationSource::GluQ8       ? "G"
                    : l.x_from == ActivationSource::Q8InScratch ? "Q"
                                                                : "R";
    std::snprintf(line, sizeof line, "%zu %s end %zu mem %zu x %s%d q%d w%d |", l.first, other ? "other" : "run", l.end,
                  l.memory_end, x, l.x_from == ActivationSource::DeferredNorm ? int(l.deferred_norm_writer) : -1,
                  int(l.quantize_out), int(l.weights_constant));
    text += line;
    if (!other)
      for (const RopeStoreNode& j : l.jobs)
        text += " [" + std::to_string(id(j.node)) + "," + std::to_string(id(j.into)) + "," + std::to_string(id(j.norm)) +
                "," + std::to_string(id(j.scale)) + "," + std::to_string(id(j.bias)) + "]";
    text += "\n";
  }
  const ActivationPlan act = plan_launch_memory(g, p);
  size_t h = act.bytes;
  for (size_t v : act.offset) h = h * 1000003u + v;
  std::snprintf(line, sizeof line, "scratch %zu deferred %zu glu %zu arena %zu hash %zu", p.scratch_bytes,
                p.deferred_norm_bytes, p.glu_q8_bytes, act.bytes, h);
  text += line;
  char out[256];
  std::snprintf(out, sizeof out, "%s %s T%lld kv %s knob %d: %zu launches %016llx", c.arch, file_type_name(c.ft),
                (long long)c.T, dtype_name(c.kv), c.knob, p.kernel_launches(), (unsigned long long)fnv1a(text));
  return out;
}

std::string record_path() { return test::data_dir() + "/cuda_launch_plans.txt"; }

TEST(LaunchPlanRecord, EveryCasePlansAsRecorded) {
  std::ifstream in(record_path());
  ASSERT_TRUE(in) << "no record at " << record_path();
  std::vector<std::string> want;
  for (std::string l; std::getline(in, l);) want.push_back(l);
  const std::vector<Case> cs = cases();
  ASSERT_EQ(want.size(), cs.size()) << "the record has another set of cases";
  int differ = 0;
  for (size_t i = 0; i < cs.size(); ++i) {
    const std::string got = record_line(cs[i]);
    if (got != want[i] && ++differ <= 10) ADD_FAILURE() << "planned: " << got << "\nrecord:  " << want[i];
  }
  EXPECT_EQ(differ, 0) << "of " << cs.size() << " cases";
}

TEST(LaunchPlanRecord, DISABLED_WriteRecord) {
  std::ofstream out(record_path());
  for (const Case& c : cases()) out << record_line(c) << "\n";
}

}  // namespace
}  // namespace weir::cuda
