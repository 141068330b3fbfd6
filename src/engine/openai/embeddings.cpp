#include "engine/openai/embeddings.h"

#include "engine/openai/json_body.h"

#include <algorithm>
#include <cstring>
#include <future>
#include <memory>

#include "engine/embedding.h"
#include "engine/openai/answer.h"
#include "engine/openai/base64.h"
#include "engine/openai/request_fields.h"

namespace weir::openai {

using nlohmann::json;

namespace {

constexpr size_t kMaxEmbeddingInputs = 2048;  // OpenAI's limit of an input array
constexpr const char* kInputForms = "a string, an array of strings, an array of token ids or an array of arrays of token ids";

bool all_of_kind(const json& a, bool (json::*is)() const noexcept) {
  return std::all_of(a.begin(), a.end(), [&](const json& x) { return (x.*is)(); });
}

std::vector<int32_t> ids_of(const json& a, const std::string& at) {
  if (a.empty()) throw bad_request("input", "'" + at + "' is empty: an embedding needs at least one token");
  std::vector<int32_t> ids;
  for (const json& t : a) ids.push_back(token_id(t, 0, "input"));
  return ids;
}

void read_inputs(const json& in, EmbeddingRequest& r) {
  if (in.is_string()) {
    if (in.get_ref<const std::string&>().empty()) throw bad_request("input", "'input' must not be an empty string");
    r.texts.push_back(in.get<std::string>());
    return;
  }
  if (!in.is_array()) throw bad_request("input", "'input' must be " + std::string(kInputForms) + ", got " + json_kind(in));
  if (in.empty()) throw bad_request("input", "'input' must hold at least one input");
  if (all_of_kind(in, &json::is_number_integer)) {
    r.token_ids.push_back(ids_of(in, "input"));
    return;
  }
  if (in.size() > kMaxEmbeddingInputs)
    throw bad_request("input", "'input' holds " + std::to_string(in.size()) + " inputs, over the limit of " +
                                   std::to_string(kMaxEmbeddingInputs));
  if (all_of_kind(in, &json::is_string)) {
    for (size_t i = 0; i < in.size(); ++i) {
      if (in[i].get_ref<const std::string&>().empty())
        throw bad_request("input", "'input[" + std::to_string(i) + "]' must not be an empty string");
      r.texts.push_back(in[i].get<std::string>());
    }
    return;
  }
  if (all_of_kind(in, &json::is_array)) {
    for (size_t i = 0; i < in.size(); ++i) {
      const std::string at = "input[" + std::to_string(i) + "]";
      if (!all_of_kind(in[i], &json::is_number_integer))
        throw bad_request("input", "'" + at + "' must be an array of token ids");
      r.token_ids.push_back(ids_of(in[i], at));
    }
    return;
  }
  throw bad_request("input", "'input' must be " + std::string(kInputForms) + "; an array mixes kinds");
}

// The float32 values' little-endian bytes, as base64 (OpenAI's encoding).
std::string float_base64(const std::vector<float>& v) {
  std::string bytes(v.size() * sizeof(float), '\0');
  for (size_t i = 0; i < v.size(); ++i) {
    uint32_t u;
    std::memcpy(&u, &v[i], sizeof u);
    for (int b = 0; b < 4; ++b) bytes[i * 4 + size_t(b)] = char((u >> (8 * b)) & 0xFF);
  }
  return base64_encode(bytes);
}

}  // namespace

EmbeddingRequest parse_embedding_request(const json& body, bool accept_unknown) {
  if (!body.is_object()) throw bad_request("", "the request body must be a JSON object, got " + std::string(json_kind(body)));
  EmbeddingRequest r;
  r.unknown_fields = check_fields(body, Endpoint::Embeddings, accept_unknown);
  const json* in = given_field(body, "input");
  if (!in) throw bad_request("input", "'input' is required");
  read_inputs(*in, r);
  if (const json* v = given_field(body, "model")) {
    if (!v->is_string()) throw bad_request("model", "'model' must be a string, got " + std::string(json_kind(*v)));
    r.model = v->get<std::string>();
  }
  if (const json* v = given_field(body, "encoding_format")) {
    if (*v != "float" && *v != "base64")
      throw bad_request("encoding_format", "'encoding_format' must be float or base64, got " +
                                               v->dump(-1, ' ', false, json::error_handler_t::replace).substr(0, 200));
    r.base64 = *v == "base64";
  }
  if (const json* v = given_field(body, "dimensions")) {
    const bool positive = v->is_number_unsigned() ? v->get<uint64_t>() >= 1 && v->get<uint64_t>() <= uint64_t(INT64_MAX)
                                                  : v->is_number_integer() && v->get<int64_t>() >= 1;
    if (!positive)
      throw bad_request("dimensions", "'dimensions' must be a positive integer, got " + v->dump());
    r.dimensions = v->get<int64_t>();
  }
  if (const json* v = given_field(body, "normalize")) {
    if (!v->is_boolean()) throw bad_request("normalize", "'normalize' must be a boolean, got " + std::string(json_kind(*v)));
    r.normalize = v->get<bool>();
  }
  return r;
}

json create_embeddings(const EmbeddingContext& c, const EmbeddingRequest& r) {
  const size_t limit = c.max_input_tokens > 0 ? size_t(c.max_input_tokens) : size_t(INT32_MAX);
  const std::string why = c.max_input_tokens > 0 ? "the server's --max-request-tokens" : "";
  std::vector<std::vector<int32_t>> inputs = r.token_ids;
  for (size_t i = 0; i < inputs.size(); ++i) {
    for (int32_t t : inputs[i])
      if (!c.tok.vocab().valid(t))
        throw bad_request("input", "'input' holds the id " + std::to_string(t) + ", outside the vocabulary");
    if (inputs[i].size() > limit) throw over_token_limit("input", std::to_string(inputs[i].size()), limit, why);
  }
  for (const std::string& text : r.texts)
    inputs.push_back(encode_limited(c.tok, text, c.tok.vocab().add_bos, true, limit, "input", why));
  std::vector<int64_t> lengths;
  for (const auto& in : inputs) lengths.push_back(int64_t(in.size()));
  const int64_t budget = int64_t(std::max<size_t>(1, c.engine.step_tokens()));

  auto done = std::make_shared<std::promise<Embeddings>>();
  std::future<Embeddings> result = done->get_future();
  Batcher::SessionWork w;
  w.cells = size_t(embedding_cells(lengths, budget, c.whole_inputs));
  const bool normalize = r.normalize;
  const std::optional<int64_t> dimensions = r.dimensions;
  w.run = [done, inputs = std::move(inputs), budget, normalize, dimensions](Session& s, int32_t first_seq) {
    const int64_t E = s.n_embd();
    if (dimensions && *dimensions != E)
      throw bad_request("dimensions", "'dimensions' must be the model's embedding size, " + std::to_string(E) +
                                          ", or absent: weir does not shorten embeddings (got " +
                                          std::to_string(*dimensions) + ")");
    EmbedOptions o;
    o.pooling = model_pooling(s.model());
    if (o.pooling == Pooling::None)
      throw bad_request("", "this model's pooling is none (a vector for each token), which /v1/embeddings cannot "
                            "return (weir embed --pooling none prints them)");
    // The context, or a BERT model's position table when shorter.
    const int64_t positions = s.model().hparams().n_pos_max;
    const bool table = positions > 0 && positions < s.n_ctx();
    const int64_t most = table ? positions : s.n_ctx();
    for (size_t i = 0; i < inputs.size(); ++i)
      if (int64_t(inputs[i].size()) > most)
        throw over_token_limit("input", std::to_string(inputs[i].size()), size_t(most),
                               table ? "the model takes " + std::to_string(most) + " positions"
                                     : "the context holds " + std::to_string(most) + " tokens");
    o.normalize = normalize;
    o.step_tokens = std::min(budget, s.n_batch());
    o.first_seq = first_seq;
    done->set_value(embed_tokens(s, inputs, o));
  };
  w.on_error = [done](std::exception_ptr e) { done->set_exception(e); };
  c.engine.submit_work(std::move(w));
  Embeddings emb;
  try {
    emb = result.get();
  } catch (const std::future_error&) {
    throw Error("the engine stopped before the embeddings were computed");
  }

  json data = json::array();
  for (size_t i = 0; i < emb.vectors.size(); ++i) {
    json item = {{"object", "embedding"}, {"index", i}};
    item["embedding"] = r.base64 ? json(float_base64(emb.vectors[i])) : json(emb.vectors[i]);
    data.push_back(std::move(item));
  }
  return json{{"object", "list"},
              {"data", std::move(data)},
              {"model", r.model.empty() ? c.model_name : r.model},
              {"usage", {{"prompt_tokens", emb.tokens}, {"total_tokens", emb.tokens}}}};
}

}  // namespace weir::openai
