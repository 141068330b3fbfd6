#include "engine/spec_setup.h"

#include "core/error.h"
#include "engine/draft_model_proposer.h"
#include "engine/ngram_proposer.h"

namespace weir {

namespace {

// The draft's runtime spec from the target's, after checking the draft
// against the target (before any weight goes anywhere).
RuntimeSpec draft_spec(const SpecOptions& o, const RuntimeSpec& target_spec, const Model& target, int64_t n_ctx) {
  if (target_spec.world) throw UsageError("-md: a draft model under mpirun is not supported; use --spec ngram");
  check_draft_model(target, *Model::load(o.draft_path));
  RuntimeSpec d = target_spec;
  d.model_path = o.draft_path;
  d.n_gpu_layers = o.draft_gpu_layers >= 0 ? o.draft_gpu_layers : target_spec.n_gpu_layers;
  d.fit = false;
  d.tp = 1;
  d.split_mode = "none";
  d.tensor_split.clear();
  d.overrides.clear();
  d.cpu_moe = false;
  d.n_cpu_moe = 0;
  d.n_ctx = n_ctx;
  d.n_ctx_at_most_trained = false;
  d.n_seq = 1;
  d.kv_type_default = false;  // the target's cache type (-ctk), not a fit's guess
  d.note = nullptr;
  return d;
}

}  // namespace

std::string SpecSetup::describe() const {
  if (!proposer) return "off";
  if (options.mode == SpecMode::Ngram) return "ngram";
  return "draft " + (draft ? draft->model->file().name() : std::string("?"));
}

SpecSetup make_spec(const SpecOptions& o, const RuntimeSpec& target_spec, const Model& target, int64_t n_ctx) {
  SpecSetup s;
  s.options = o;
  (void)DraftLength(o.length);  // the lengths checked here, before any model loads
  if (o.mode == SpecMode::Off) return s;
  if (o.mode == SpecMode::Ngram) {
    s.proposer = std::make_unique<NgramProposer>(o.ngram);
    return s;
  }
  s.draft = std::make_unique<Runtime>(build_runtime(draft_spec(o, target_spec, target, n_ctx)));
  s.proposer = std::make_unique<DraftModelProposer>(*s.draft->session, target.hparams().n_vocab);
  return s;
}

std::unique_ptr<Runtime> make_batch_draft(const SpecOptions& o, const RuntimeSpec& target_spec, const Model& target,
                                          int64_t n_ctx, int64_t n_batch, int max_graphs) {
  if (o.mode != SpecMode::Draft) throw UsageError("make_batch_draft: the speculation mode is " + std::string(spec_mode_name(o.mode)));
  RuntimeSpec d = draft_spec(o, target_spec, target, n_ctx);
  d.n_batch = n_batch;
  d.n_ubatch = n_batch;
  d.max_graphs = max_graphs;
  d.stop_steps = target_spec.stop_steps;
  return std::make_unique<Runtime>(build_runtime(d));
}

}  // namespace weir
