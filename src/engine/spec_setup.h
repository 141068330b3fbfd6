// The proposer SpecOptions names, ready to use beside a target's runtime:
// none (off), n-gram lookup, or a draft model with a runtime of its own
// (built from the target's spec: the draft's file, -ngld layers on the GPU,
// the target's context), its vocabulary and size checked against the
// target's (engine/draft_model_proposer.h).
#pragma once
#include <memory>

#include "engine/draft_proposer.h"
#include "engine/runtime.h"
#include "engine/spec_options.h"

namespace weir {

struct SpecSetup {
  std::unique_ptr<Runtime> draft;            // mode Draft: the draft model's
  std::unique_ptr<DraftProposer> proposer;   // null: off
  SpecOptions options;
  // "ngram", "draft gemma-3-270m.gguf (-ngld 99)", "off": for reports.
  std::string describe() const;
};

// For a target `target` built from `target_spec` whose session has n_ctx
// cells. Throws UsageError for a draft under mpirun (not supported),
// weir::Error for a draft that cannot serve the target.
SpecSetup make_spec(const SpecOptions& o, const RuntimeSpec& target_spec, const Model& target, int64_t n_ctx);
inline SpecSetup make_spec(const SpecOptions& o, const RuntimeSpec& target_spec, const Runtime& target) {
  return make_spec(o, target_spec, *target.model, target.session ? target.session->n_ctx() : target_spec.n_ctx);
}

// The draft model of a continuous batcher (weir serve -md, the Python
// package's draft_model="path"; engine/draft_batch.h): a runtime of the
// draft's file built as make_spec builds it (-ngld layers on the GPU, the
// target's context and cache type), whose session takes max_graphs step
// shapes (a server's draft steps come in many) and steps of n_batch tokens;
// its cells are one pool shared by every batcher sequence. Checked against
// the target first (check_draft_model: weir::Error naming the difference);
// UsageError under mpirun or when o.mode is not Draft.
std::unique_ptr<Runtime> make_batch_draft(const SpecOptions& o, const RuntimeSpec& target_spec, const Model& target,
                                          int64_t n_ctx, int64_t n_batch, int max_graphs);

}  // namespace weir
