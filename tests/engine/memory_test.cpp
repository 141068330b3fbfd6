// Weights are held once: used in place from the mmap, or repacked by the
// CPU backend (repack.h) with their file pages given back (file_pages.h).
// After loading and running a prompt, resident memory grows by no more than
// the file, the KV cache and the activations, plus 10%.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "backend/cpu/cpu_backend.h"
#include "engine/session.h"
#include "model/model.h"
#include "test_env.h"

namespace weir {
namespace {

size_t rss_bytes() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return size_t(std::stoull(line.substr(6))) * 1024;
  return 0;
}

TEST(Memory, WeightsAreNotCopied) {
  WEIR_REQUIRE_MODEL(path);
  const size_t before = rss_bytes();
  auto model = Model::load(path);
  CpuBackend backend(2);
  SessionParams sp;
  sp.n_ctx = 2048;
  Session s(*model, backend, sp);
  std::vector<int32_t> prompt(300, 9259);
  prompt[0] = 2;
  s.eval(prompt);
  const int32_t next[1] = {1902};
  s.eval(next);
  const size_t after = rss_bytes();
  const size_t file = std::filesystem::file_size(path);
  // 10% and 16 MiB over what the model must hold (the tokenizer's tables,
  // threads' stacks, the allocator's own): a copy of the weights would be
  // 240 MiB more.
  const size_t budget = size_t(double(file + s.kv_cache().bytes() + s.activation_bytes()) * 1.10) + (size_t(16) << 20);
  std::printf("rss grew %.1f MiB; file %.1f MiB, kv %.1f MiB, activations %.1f MiB, budget %.1f MiB\n",
              double(after - before) / 1048576, double(file) / 1048576, double(s.kv_cache().bytes()) / 1048576,
              double(s.activation_bytes()) / 1048576, double(budget) / 1048576);
  EXPECT_LT(after - before, budget);
}

}  // namespace
}  // namespace weir
