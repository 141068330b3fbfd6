// Speculative decoding's settings (issue 48), one struct for every front
// end: tools/spec_flags.h fills it from --spec, -md, -ngld, --draft-max,
// --draft-min; the Python package from draft_model=. docs/speculative.md
// says what each does.
#pragma once
#include <string>

#include "engine/draft_length.h"
#include "engine/ngram_proposer.h"

namespace weir {

enum class SpecMode {
  Off,    // plain decoding
  Ngram,  // prompt lookup: guesses from the text so far (NgramProposer)
  Draft,  // a smaller model of the same vocabulary guesses (DraftModelProposer)
};

struct SpecOptions {
  SpecMode mode = SpecMode::Off;
  DraftLengthOptions length;  // --draft-min, --draft-max and the adaptive rule
  NgramOptions ngram;
  // The draft model (mode Draft): its file and the layers it puts on the
  // GPU (-ngld; -1: as the target's -ngl).
  std::string draft_path;
  int draft_gpu_layers = -1;
};

// "off", "ngram", "draft".
const char* spec_mode_name(SpecMode m);

}  // namespace weir
