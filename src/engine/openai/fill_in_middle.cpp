#include "engine/openai/fill_in_middle.h"

#include "engine/openai/request.h"

namespace weir::openai {

void require_fill_in_middle(const Vocab& v) {
  if (!v.valid(v.fim_pre) || !v.valid(v.fim_suf) || !v.valid(v.fim_mid))
    throw bad_request("suffix", "'suffix' needs a model with fill-in-the-middle tokens (prefix, suffix, middle); "
                                "this model's vocabulary has none");
}

std::vector<int32_t> fill_in_middle_prompt(const Vocab& v, std::span<const int32_t> prefix,
                                           std::span<const int32_t> suffix) {
  require_fill_in_middle(v);
  std::vector<int32_t> ids;
  ids.reserve(prefix.size() + suffix.size() + 4);
  if (v.add_bos && v.valid(v.bos)) ids.push_back(v.bos);
  ids.push_back(v.fim_pre);
  ids.insert(ids.end(), prefix.begin(), prefix.end());
  ids.push_back(v.fim_suf);
  ids.insert(ids.end(), suffix.begin(), suffix.end());
  ids.push_back(v.fim_mid);
  return ids;
}

}  // namespace weir::openai
