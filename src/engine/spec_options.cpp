#include "engine/spec_options.h"

namespace weir {

const char* spec_mode_name(SpecMode m) {
  switch (m) {
    case SpecMode::Ngram: return "ngram";
    case SpecMode::Draft: return "draft";
    case SpecMode::Off: break;
  }
  return "off";
}

}  // namespace weir
