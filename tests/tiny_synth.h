// Tiny random-weight models written by weir synth (no Python needed), and
// the greedy tokens a prompt gets alone in a session of its own: the
// reference that batched, pipelined and served generation must equal.
#pragma once
#include <string>
#include <vector>

#include "engine/session.h"
#include "model/model.h"
#include "model/synth.h"
#include "test_env.h"

namespace weir::test {

// The `tiny` preset of an architecture, in this test's own directory.
inline std::string synth_tiny(const std::string& arch, const std::string& tag) {
  const std::string path = own_dir() + "/" + tag + "-" + arch + ".gguf";
  SynthOptions o;
  o.threads = 2;
  o.sync = false;
  write_synth_model(find_synth_preset(arch, "tiny"), o, path);
  return path;
}

// `steps` greedy tokens after `prompt`, one eval_sample a token.
inline std::vector<int32_t> greedy_alone(const Model& m, Backend& b, const std::vector<int32_t>& prompt, int steps) {
  SessionParams sp;
  sp.n_ctx = int64_t(prompt.size()) + steps + 1;
  Session s(m, b, sp);
  BackendSampling greedy;
  greedy.temperature = 0;
  std::vector<int32_t> out = {s.eval_sample(prompt, greedy)};
  for (int i = 1; i < steps; ++i) {
    const int32_t t[1] = {out.back()};
    out.push_back(s.eval_sample(t, greedy));
  }
  return out;
}

}  // namespace weir::test
