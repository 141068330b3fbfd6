// Fill in the middle (the completions' suffix): the prompt of a model
// trained to write what goes between a prefix and a suffix, in the order
// llama.cpp's /infill uses for PSM (prefix, suffix, then the middle):
//   [BOS] <fim_pre> prefix <fim_suf> suffix <fim_mid>
// after which the model writes the middle. Only vocabularies that name the
// three tokens (Vocab::fim_pre, fim_suf, fim_mid) can.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "text/vocab.h"

namespace weir::openai {

// Throws ApiError (400 naming `suffix`) when the vocabulary lacks any of
// the three tokens.
void require_fill_in_middle(const Vocab& v);

// prefix and suffix: their token ids, without BOS. Throws as
// require_fill_in_middle.
std::vector<int32_t> fill_in_middle_prompt(const Vocab& v, std::span<const int32_t> prefix,
                                           std::span<const int32_t> suffix);

}  // namespace weir::openai
