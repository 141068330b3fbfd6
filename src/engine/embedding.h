// Embeddings: token sequences run through a Session's forward graphs that
// end in the hidden states (ForwardOutput::Hidden), pooled on the host
// (engine/pooling.h). Several sequences go side by side in one forward
// step, up to the step's token budget; a sequence longer than the room left
// goes on in the next step (its cells kept until its last token), so a
// request of many short inputs takes few steps. Causal attention, as the
// model's generation runs: a sequence sees only its own earlier tokens; a
// non-causal model (BERT: HParams::causal false) sees its whole sequence, so
// each input goes whole into one step.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "engine/pooling.h"
#include "engine/session.h"

namespace weir {

struct EmbedOptions {
  Pooling pooling = Pooling::Mean;
  bool normalize = true;      // L2 (with Pooling::None: each token's vector)
  int64_t step_tokens = 512;  // tokens a forward step takes at most (not more than the session's batch)
  // The session's sequence ids it may use, from first_seq up; each is freed
  // before embed_tokens returns (or throws). A server gives ids its own
  // requests never take.
  int32_t first_seq = 0;
};

// One step's share of an input: tokens [begin, begin + count) of inputs[input].
struct EmbedChunk {
  size_t input = 0;
  int64_t begin = 0, count = 0;
};
// The forward steps for inputs of these lengths: in order, side by side,
// each step filled up to budget tokens. whole: no input is cut; one that
// does not fit in the room left starts the next step (Error for one longer
// than budget). Pure (tested on its own).
std::vector<std::vector<EmbedChunk>> plan_embedding_steps(std::span<const int64_t> lengths, int64_t budget,
                                                          bool whole = false);
// The most cache cells those steps hold at once (an input's cells stay from
// its first chunk to its last).
int64_t embedding_cells(std::span<const int64_t> lengths, int64_t budget, bool whole = false);

struct Embeddings {
  // One a input: n_embd floats; Pooling::None: the input's tokens' vectors
  // one after another (T * n_embd floats).
  std::vector<std::vector<float>> vectors;
  int64_t tokens = 0;  // every input's tokens
  int64_t steps = 0;   // forward steps taken
};

// The embeddings of inputs (token ids; each at least one token and at most
// the session's context, the model's positions, and for a non-causal model
// the step's tokens). Throws Error for an empty or too long input (its
// index named), or what a step throws; the session's other sequences are
// never touched.
Embeddings embed_tokens(Session& s, const std::vector<std::vector<int32_t>>& inputs, const EmbedOptions& o);

}  // namespace weir
