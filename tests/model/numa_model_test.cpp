// Gemma 3 270M with its weights copied onto a simulated two-node machine
// (a fake sysfs tree over this machine's first two CPUs) computes exactly
// what it computes from the mmap: placement moves bytes, never changes them.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "backend/cpu/cpu_backend.h"
#include "engine/session.h"
#include "model/model.h"
#include "test_env.h"

namespace weir {
namespace {

namespace fs = std::filesystem;

std::vector<float> greedy_logits(const Model& m, CpuBackend& b, int steps) {
  Session s(m, b, SessionParams{64, 512});
  const std::vector<int32_t> ids = m.tokenizer().encode("The capital of France is", true, true);
  s.eval(ids);
  std::vector<float> out;
  for (int i = 0;; ++i) {
    const float* l = s.logits();
    out.insert(out.end(), l, l + s.n_vocab());
    if (i == steps) break;
    const int32_t next[1] = {int32_t(std::max_element(l, l + s.n_vocab()) - l)};
    s.eval(next);
  }
  return out;
}

TEST(NumaModel, PlacedWeightsGiveIdenticalLogits) {
  WEIR_REQUIRE_MODEL(path);
  const std::vector<int> cpus = cpu::affinity_cpus();
  if (cpus.size() < 2) GTEST_SKIP() << "needs two CPUs";
  const fs::path root = fs::temp_directory_path() / ("weir_numa_model_" + std::to_string(getpid()));
  fs::create_directories(root / "node0");
  fs::create_directories(root / "node1");
  std::ofstream(root / "online") << "0-1\n";
  std::ofstream(root / "node0/cpulist") << cpus[0] << "\n";
  std::ofstream(root / "node1/cpulist") << cpus[1] << "\n";
  std::ofstream(root / "node0/distance") << "10 21\n";
  std::ofstream(root / "node1/distance") << "21 10\n";

  auto model = Model::load(path);
  // Placed weights keep the file's layout (CpuOptions::repack does not apply
  // to node copies), so the unplaced run keeps it too.
  CpuOptions plain;
  plain.repack = false;
  CpuBackend off(2, plain);
  const std::vector<float> want = greedy_logits(*model, off, 3);
  CpuOptions o;
  o.numa = cpu::NumaMode::Distribute;
  o.numa_sysfs_root = root.string();
  CpuBackend placed(2, o);
  const std::vector<float> got = greedy_logits(*model, placed, 3);
  fs::remove_all(root);
  const NumaReport& r = placed.numa_report();
  // 18 layers x 7 matrices, and the tied output (token_embd).
  EXPECT_EQ(r.weights, 18u * 7 + 1) << r.describe();
  EXPECT_GT(r.planned_pages.at(0), 0u);
  EXPECT_GT(r.planned_pages.at(1), 0u);
  EXPECT_EQ(r.census.total(), r.planned_pages.at(0) + r.planned_pages.at(1)) << r.describe();
  EXPECT_EQ(r.census.absent, 0u) << r.describe();  // every page written by the copy
  ASSERT_EQ(got.size(), want.size());
  EXPECT_TRUE(got == want) << "logits differ with weights placed";
}

}  // namespace
}  // namespace weir
