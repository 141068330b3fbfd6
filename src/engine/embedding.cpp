#include "engine/embedding.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"

namespace weir {

std::vector<std::vector<EmbedChunk>> plan_embedding_steps(std::span<const int64_t> lengths, int64_t budget,
                                                          bool whole) {
  if (budget < 1) throw Error("embeddings: a step must take at least one token");
  std::vector<std::vector<EmbedChunk>> steps;
  int64_t room = 0;
  for (size_t i = 0; i < lengths.size(); ++i) {
    if (whole && lengths[i] > budget)
      throw Error("input " + std::to_string(i) + " has " + std::to_string(lengths[i]) +
                  " tokens, more than a forward step takes (" + std::to_string(budget) +
                  "): this model sees a whole input at once");
    for (int64_t begin = 0; begin < lengths[i];) {
      if (room == 0 || (whole && room < lengths[i])) {
        steps.emplace_back();
        room = budget;
      }
      const int64_t n = std::min(room, lengths[i] - begin);
      steps.back().push_back({i, begin, n});
      begin += n;
      room -= n;
    }
  }
  return steps;
}

int64_t embedding_cells(std::span<const int64_t> lengths, int64_t budget, bool whole) {
  int64_t most = 0;
  for (const auto& step : plan_embedding_steps(lengths, budget, whole)) {
    int64_t held = 0;  // every input of the step holds its tokens so far
    for (const EmbedChunk& c : step) held += c.begin + c.count;
    most = std::max(most, held);
  }
  return most;
}

Embeddings embed_tokens(Session& s, const std::vector<std::vector<int32_t>>& inputs, const EmbedOptions& o) {
  const int64_t E = s.n_embd();
  std::vector<int64_t> lengths;
  Embeddings out;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const int64_t n = int64_t(inputs[i].size());
    if (n == 0) throw Error("input " + std::to_string(i) + " is empty: an embedding needs at least one token");
    if (n > s.n_ctx())
      throw Error("input " + std::to_string(i) + " has " + std::to_string(n) + " tokens, more than the context (" +
                  std::to_string(s.n_ctx()) + ")");
    if (const int64_t most = s.model().hparams().n_pos_max; most > 0 && n > most)
      throw Error("input " + std::to_string(i) + " has " + std::to_string(n) + " tokens, more than the model's " +
                  std::to_string(most) + " positions");
    lengths.push_back(n);
    out.tokens += n;
  }
  // Per input: the running sum of its rows (Mean, in double), or the rows
  // its pooling reads.
  std::vector<std::vector<double>> sums(o.pooling == Pooling::Mean ? inputs.size() : 0);
  std::vector<std::vector<float>> rows(inputs.size());
  std::vector<int32_t> seq_of(inputs.size(), -1), free_seqs;
  int32_t next_seq = o.first_seq;
  auto free_seq = [&](size_t input) {
    s.remove_seq(seq_of[input]);
    free_seqs.push_back(seq_of[input]);
    seq_of[input] = -1;
  };
  try {
    const bool whole = !s.model().hparams().causal;
    for (const std::vector<EmbedChunk>& step : plan_embedding_steps(lengths, o.step_tokens, whole)) {
      std::vector<int32_t> tokens, seqs, out_rows;
      std::vector<size_t> owner;  // the input of each out row (SIZE_MAX: none)
      for (const EmbedChunk& c : step) {
        int32_t& sq = seq_of[c.input];
        if (sq < 0) {
          if (free_seqs.empty()) {
            sq = next_seq++;
          } else {
            sq = free_seqs.back();
            free_seqs.pop_back();
          }
        }
        for (int64_t t = c.begin; t < c.begin + c.count; ++t) {
          if (pooling_reads(o.pooling, t, lengths[c.input])) {
            out_rows.push_back(int32_t(tokens.size()));
            owner.push_back(c.input);
          }
          tokens.push_back(inputs[c.input][size_t(t)]);
          seqs.push_back(sq);
        }
      }
      if (out_rows.empty()) {  // only the middle of a long input: a row computed and not read
        out_rows.push_back(int32_t(tokens.size() - 1));
        owner.push_back(SIZE_MAX);
      }
      s.step_hidden(tokens, seqs, out_rows);
      ++out.steps;
      for (size_t k = 0; k < owner.size(); ++k) {
        if (owner[k] == SIZE_MAX) continue;
        const float* h = s.hidden(k);
        if (o.pooling == Pooling::Mean) {
          std::vector<double>& sum = sums[owner[k]];
          sum.resize(size_t(E), 0.0);
          for (int64_t e = 0; e < E; ++e) sum[size_t(e)] += double(h[e]);
        } else {
          rows[owner[k]].insert(rows[owner[k]].end(), h, h + E);
        }
      }
      for (const EmbedChunk& c : step)
        if (c.begin + c.count == lengths[c.input]) free_seq(c.input);
    }
  } catch (...) {
    for (size_t i = 0; i < inputs.size(); ++i)
      if (seq_of[i] >= 0) s.remove_seq(seq_of[i]);
    throw;
  }
  out.vectors.resize(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::vector<float>& v = out.vectors[i];
    if (o.pooling == Pooling::Mean) {
      v.resize(size_t(E));
      for (int64_t e = 0; e < E; ++e) v[size_t(e)] = float(sums[i][size_t(e)] / double(lengths[i]));
    } else {
      v = std::move(rows[i]);
    }
    for (float x : v)
      if (!std::isfinite(x))
        throw Error("the model computed a non-finite hidden state for input " + std::to_string(i) +
                    " (its weights or metadata are broken)");
    if (!o.normalize) continue;
    for (size_t r = 0; r < v.size(); r += size_t(E)) normalize_l2(std::span<float>(v).subspan(r, size_t(E)));
  }
  return out;
}

}  // namespace weir
