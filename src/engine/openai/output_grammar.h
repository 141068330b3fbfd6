// A request's output constraints made ready for the engine: its
// OutputFormat compiled against the model's vocabulary (engine/grammar), its
// logit_bias checked against the vocabulary's size.
#pragma once
#include <memory>
#include <utility>
#include <vector>

#include "engine/grammar/grammar.h"
#include "engine/openai/request.h"

namespace weir::openai {

// Null for free text. Throws ApiError (400 naming the field that asked) for
// a schema or grammar that does not compile, or when compiler is null (the
// runtime has no grammar support) and one is asked for.
std::shared_ptr<const CompiledGrammar> output_grammar(GrammarCompiler* compiler, const OutputFormat& f);

// The bias of each token, its id checked: ApiError (400, logit_bias) for an
// id past the vocabulary.
std::vector<std::pair<int32_t, float>> checked_logit_bias(const std::vector<std::pair<int32_t, float>>& bias,
                                                          int64_t n_vocab);

}  // namespace weir::openai
