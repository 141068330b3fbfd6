// Helpers of the loader's tests (tests/loader, tests/cuda): every tensor of
// a file as load items for one backend, and the logits a model gives on a
// backend for a fixed prompt and a few decode steps.
#pragma once
#include <vector>

#include "engine/session.h"
#include "model/loader.h"
#include "model/model.h"

namespace weir::test {

// Every tensor of f, whole, for backend b.
inline std::vector<LoadItem> every_tensor(const GGUFFile& f, Backend* b) {
  std::vector<LoadItem> items;
  for (size_t i = 0; i < f.tensors().size(); ++i) items.push_back(LoadItem{i, b, 0, 0});
  return items;
}

// Logits of a fixed prompt (every row) and three decode steps.
inline std::vector<float> prompt_logits(const Model& m, Backend& b) {
  SessionParams sp;
  sp.n_ctx = 32;
  sp.n_batch = 5;
  Session s(m, b, sp);
  const std::vector<int32_t> prompt = {1, 5, 9, 2, 7, 3, 11};
  std::vector<int32_t> rows(prompt.size());
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = int32_t(i);
  s.eval(prompt, rows);
  std::vector<float> out;
  for (size_t t = 0; t < prompt.size(); ++t) out.insert(out.end(), s.logits(t), s.logits(t) + s.n_vocab());
  for (int32_t id : {4, 6, 8}) {
    const int32_t one[1] = {id};
    s.eval(one);
    out.insert(out.end(), s.logits(), s.logits() + s.n_vocab());
  }
  return out;
}

}  // namespace weir::test
