#include "engine/draft_model_proposer.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"

namespace weir {

namespace {
// As llama.cpp's speculative example: vocabularies may differ in a few added
// tokens at the end.
constexpr int32_t kMaxVocabDifference = 128;

std::string gb(size_t bytes) {
  char s[32];
  if (bytes >= 1000000000) std::snprintf(s, sizeof s, "%.2f GB", double(bytes) / 1e9);
  else std::snprintf(s, sizeof s, "%.2f MB", double(bytes) / 1e6);
  return s;
}
}  // namespace

void check_draft_model(const Model& target, const Model& draft) {
  const std::string names = draft.file().name() + " (draft) and " + target.file().name() + " (target)";
  const Vocab& t = target.tokenizer().vocab();
  const Vocab& d = draft.tokenizer().vocab();
  if (t.model != d.model)
    throw Error(names + " use different tokenizers (" + d.model + " and " + t.model + "); a draft model needs the target's vocabulary");
  const int32_t nt = t.n_tokens(), nd = d.n_tokens();
  if (std::abs(nt - nd) > kMaxVocabDifference)
    throw Error(names + " have vocabularies of " + std::to_string(nd) + " and " + std::to_string(nt) +
                " tokens; a draft model needs the target's vocabulary");
  for (int32_t id = 0; id < std::min(nt, nd); ++id)
    if (t.text(id) != d.text(id))
      throw Error(names + " have different vocabularies: token " + std::to_string(id) + " is '" +
                  std::string(d.text(id)) + "' in the draft, '" + std::string(t.text(id)) + "' in the target");
  if (t.bos != d.bos || t.eos != d.eos || t.add_bos != d.add_bos)
    throw Error(names + " differ in their BOS/EOS tokens; a draft model needs the target's vocabulary");
  if (draft.weight_bytes() > target.weight_bytes())
    throw Error("the draft model " + draft.file().name() + " (" + gb(draft.weight_bytes()) + " of weights) is larger than the target " +
                target.file().name() + " (" + gb(target.weight_bytes()) + "); a draft must be smaller to pay for itself");
}

DraftModelProposer::DraftModelProposer(Session& draft, int64_t target_vocab) : s_(draft), target_vocab_(target_vocab) {}

std::vector<int32_t> DraftModelProposer::propose(std::span<const int32_t> tokens, int max_tokens) {
  if (max_tokens <= 0 || tokens.empty()) return {};
  // Keep the cached prefix the sequence still has; run the rest.
  size_t same = 0;
  while (same < held_.size() && same < tokens.size() && held_[same] == tokens[same]) ++same;
  if (same == tokens.size()) --same;  // at least one token to run, for the logits after it
  if (same < held_.size()) {
    s_.truncate(0, int64_t(same));
    held_.resize(same);
  }
  // Room in the draft's context: the rest and the guesses.
  const int64_t room = s_.n_ctx() - int64_t(tokens.size()) - 1;
  if (room <= 0) return {};
  max_tokens = int(std::min<int64_t>(max_tokens, room));
  BackendSampling greedy;
  greedy.temperature = 0;
  std::vector<int32_t> out;
  out.push_back(s_.eval_sample(tokens.subspan(same), greedy));
  held_.assign(tokens.begin(), tokens.end());
  // The next guesses one step each, the step after queued before the host waits.
  int queued = 0;
  while (int(out.size()) + queued < max_tokens && queued < int(Session::kMaxQueued)) {
    s_.queue_sample_next(greedy);
    ++queued;
  }
  while (queued > 0) {
    held_.push_back(out.back());
    out.push_back(s_.take_sampled());
    --queued;
    if (int(out.size()) + queued < max_tokens) {
      s_.queue_sample_next(greedy);
      ++queued;
    }
  }
  // A guess the target's vocabulary lacks ends the guesses.
  const auto bad = std::find_if(out.begin(), out.end(), [&](int32_t g) { return g < 0 || g >= target_vocab_; });
  out.erase(bad, out.end());
  return out;
}

}  // namespace weir
