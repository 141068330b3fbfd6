#include "engine/spec_setup.h"

#include "core/error.h"
#include "engine/draft_model_proposer.h"
#include "engine/ngram_proposer.h"

namespace weir {

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
  if (target_spec.world) throw UsageError("-md: a draft model under mpirun is not supported; use --spec ngram");
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
  check_draft_model(target, *Model::load(o.draft_path));  // before any weight goes anywhere
  s.draft = std::make_unique<Runtime>(build_runtime(d));
  s.proposer = std::make_unique<DraftModelProposer>(*s.draft->session, target.hparams().n_vocab);
  return s;
}

}  // namespace weir
