#include "tools/spec_flags.h"

#include "core/error.h"

namespace weir::tools {

void SpecFlags::add_to(Args& a) {
  a.opt("--spec", &mode, "MODE",
        "speculative decoding: ngram (guesses from the text so far), draft (from -md), off (default; draft with -md)")
      .opt("-md,--model-draft", &draft_path, "FILE", "a draft model of the same vocabulary (implies --spec draft)")
      .opt("-ngld,--gpu-layers-draft", &draft_gpu_layers, "N", "the draft model's layers on the GPU (default: as -ngl)")
      .opt("--draft-max", &draft_max, "N", "most guesses a step checks (default 16; 1 .. 64)")
      .opt("--draft-min", &draft_min, "N",
           "fewest guesses a step checks (default 0: the adaptive rule may decode plainly when guesses do not pay)");
}

SpecOptions SpecFlags::options(const Args& a) const {
  SpecOptions o;
  if (mode.empty()) o.mode = draft_path.empty() ? SpecMode::Off : SpecMode::Draft;
  else if (mode == "off") o.mode = SpecMode::Off;
  else if (mode == "ngram") o.mode = SpecMode::Ngram;
  else if (mode == "draft") o.mode = SpecMode::Draft;
  else throw UsageError("--spec: expected ngram, draft or off, got '" + mode + "'");
  if (o.mode == SpecMode::Draft && draft_path.empty()) throw UsageError("--spec draft needs a draft model (-md FILE)");
  if (!draft_path.empty() && o.mode != SpecMode::Draft)
    throw UsageError("-md gives a draft model, but --spec " + mode + " does not use one (drop one of them)");
  if (draft_max < 1 || draft_max > DraftLength::kMaxDraft)
    throw UsageError("--draft-max: expected 1 .. " + std::to_string(DraftLength::kMaxDraft) + ", got " +
                     std::to_string(draft_max));
  if (draft_min < 0 || draft_min > draft_max)
    throw UsageError("--draft-min: expected 0 .. --draft-max (" + std::to_string(draft_max) + "), got " +
                     std::to_string(draft_min));
  if (a.given("-ngld") && o.mode != SpecMode::Draft) throw UsageError("-ngld: there is no draft model (-md FILE)");
  if (draft_gpu_layers < -1) throw UsageError("-ngld: expected 0 or more, got " + std::to_string(draft_gpu_layers));
  o.length.draft_max = draft_max;
  o.length.draft_min = draft_min;
  o.draft_path = draft_path;
  o.draft_gpu_layers = draft_gpu_layers;
  return o;
}

std::vector<std::string> spec_flag_names() { return {"--spec", "-md", "-ngld", "--draft-max", "--draft-min"}; }

}  // namespace weir::tools
