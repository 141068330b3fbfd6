// OpenAI's /v1/embeddings, whatever carries it (weir serve's handler, the
// Python package's create_embedding): the request body checked and read,
// its inputs run on the Batcher between its generation steps
// (Batcher::submit_work, engine/embedding.h), and the response object
// {"object": "list", "data": [{"object": "embedding", "index", "embedding"}],
// "model", "usage": {"prompt_tokens", "total_tokens"}}.
//
// Fields (request_fields.cpp lists them): input (a string, an array of
// strings, an array of token ids, or an array of such arrays; at most 2048
// inputs, none empty), model, encoding_format ("float" or "base64": the
// float32 values' little-endian bytes), dimensions (only the model's own
// size), user (a label), and weir's extension normalize (default true: L2,
// as OpenAI's vectors are; false: the pooled vector as it is). Pooling is the
// model's (<arch>.pooling_type; mean without it); a model whose pooling is
// none gets a 400, as llama-server answers. Texts get BOS as the vocabulary
// asks; token ids are taken as given.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/batcher.h"
#include "engine/openai/request.h"
#include "text/tokenizer.h"

namespace weir::openai {

struct EmbeddingRequest {
  std::vector<std::string> texts;                // input as text ...
  std::vector<std::vector<int32_t>> token_ids;   // ... or as token ids (checked against the vocabulary later)
  std::string model;
  bool base64 = false;                           // encoding_format
  std::optional<int64_t> dimensions;
  bool normalize = true;
  std::vector<std::string> unknown_fields;       // taken with accept_unknown (for the log)
};

// Throws ApiError (400) naming the field at fault.
EmbeddingRequest parse_embedding_request(const nlohmann::json& body, bool accept_unknown = false);

struct EmbeddingContext {
  Batcher& engine;
  const Tokenizer& tok;
  std::string model_name;         // for responses whose request names none
  int64_t max_input_tokens = 0;   // an input's tokens at most (0: the context's)
  bool whole_inputs = false;      // a non-causal model's: each input in one step (engine/embedding.h)
};

// Tokenizes r's inputs, runs them on the engine and waits for them; the
// response object. Throws ApiError (400: an input too long or outside the
// vocabulary, dimensions not the model's, a model pooled per token),
// QueueFull (the engine stopping or busy), Error (a failed step).
nlohmann::json create_embeddings(const EmbeddingContext& c, const EmbeddingRequest& r);

}  // namespace weir::openai
