// weir embed: the embeddings of texts (-p, repeatable, or -f: a text a
// line), pooled as the model's GGUF says (<arch>.pooling_type; mean when
// absent) or as --pooling asks, L2-normalized unless --normalize none.
// Vectors go to stdout (JSON in OpenAI's /v1/embeddings shape, or plain: a
// line a vector); what ran goes to stderr.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/embedding.h"
#include "tools/args.h"
#include "tools/commands.h"
#include "tools/common.h"
#include "tools/runtime_flags.h"

namespace weir::tools {
namespace {

// The texts of -f: one a line; empty lines (and a final newline) skipped.
std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at <= text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(at, end - at);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) out.push_back(std::move(line));
    at = end + 1;
  }
  return out;
}

// A float as JSON and plain text print it: the shortest form that reads
// back as the same float.
std::string number(float x) {
  char buf[32];
  for (int digits = 6; digits <= 9; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, double(x));
    if (std::strtof(buf, nullptr) == x) break;
  }
  return buf;
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c < 0x20) {
      char esc[8];
      std::snprintf(esc, sizeof esc, "\\u%04x", c);
      out += esc;
    } else {
      out += char(c);
    }
  }
  return out + "\"";
}

}  // namespace

int cmd_embed(int argc, char** argv) {
  std::string model_path, file, pooling_flag, normalize = "l2", format = "json";
  std::vector<std::string> texts;
  bool no_bos = false;
  RuntimeFlags rf;
  RuntimeFlags::Defaults d;
  d.ctx_help = "KV cache cells: the longest text's tokens at most (default 4096, or the model's if smaller)";
  Args a("embed", "Print the embeddings of texts: the model's hidden states after its output norm, pooled.");
  a.opt("-m,--model", &model_path, "FILE", "GGUF model (required)")
      .opt_each("-p,--prompt", &texts, "TEXT", "a text to embed (repeat for several: they run side by side)")
      .opt("-f,--file", &file, "FILE", "texts to embed, one a line (empty lines skipped)")
      .opt("--pooling", &pooling_flag, "MODE",
           "mean, cls (the first token), last (the last token) or none (every token's vector); default: the "
           "model's <arch>.pooling_type, else mean")
      .opt("--normalize", &normalize, "MODE", "l2 (unit length: the default, as OpenAI's) or none")
      .opt("--format", &format, "FORMAT", "json (OpenAI's /v1/embeddings response; the default) or plain (a line a vector, floats apart by spaces; with --pooling none a line a token, an empty line after each text)")
      .flag("--no-bos", &no_bos, "do not add the BOS token even if the model asks for it");
  rf.add_to(a, d);
  if (!a.parse(argc, argv)) return 0;
  rf.parsed(a);
  const RuntimeSpec spec = rf.spec(model_path);
  if (a.given("-f")) {
    for (std::string& line : lines_of(read_text_file(file, "-f"))) texts.push_back(std::move(line));
    if (texts.empty()) throw UsageError("-f " + file + ": no text in it (a text a line)");
  }
  if (texts.empty()) throw UsageError("no text given (-p TEXT, repeatable, or -f FILE)");
  if (normalize != "l2" && normalize != "none")
    throw UsageError("--normalize: expected l2 or none, got '" + normalize + "'");
  if (format != "json" && format != "plain") throw UsageError("--format: expected json or plain, got '" + format + "'");
  std::optional<Pooling> pooling;
  if (a.given("--pooling")) {
    pooling = parse_pooling(pooling_flag);
    if (!pooling) throw UsageError("--pooling: expected mean, cls, last or none, got '" + pooling_flag + "'");
  }

  Runtime rt = build_runtime(spec);
  const Model& model = *rt.model;
  const Tokenizer& tok = model.tokenizer();
  EmbedOptions eo;
  eo.pooling = pooling ? *pooling : model_pooling(model);
  eo.normalize = normalize == "l2";
  eo.step_tokens = rt.session->n_batch();  // a non-causal model's: the context (build_runtime)
  std::vector<std::vector<int32_t>> inputs;
  for (const std::string& t : texts) {
    inputs.push_back(tok.encode(t, tok.vocab().add_bos && !no_bos, true));
    if (inputs.back().empty())
      throw UsageError("text " + std::to_string(inputs.size() - 1) + " has no tokens (give it some text, or drop --no-bos)");
  }
  const auto t0 = std::chrono::steady_clock::now();
  const Embeddings emb = embed_tokens(*rt.session, inputs, eo);
  const double secs = seconds_since(t0);
  const size_t E = size_t(model.hparams().n_embd);

  std::string out;
  if (format == "json") {
    out = "{\"object\":\"list\",\"data\":[";
    for (size_t i = 0; i < emb.vectors.size(); ++i) {
      const std::vector<float>& v = emb.vectors[i];
      out += std::string(i ? "," : "") + "{\"object\":\"embedding\",\"index\":" + std::to_string(i) + ",\"embedding\":[";
      const bool per_token = eo.pooling == Pooling::None;
      for (size_t k = 0; k < v.size(); ++k) {
        if (per_token && k % E == 0) out += k ? "],[" : "[";
        else if (k) out += ",";
        out += number(v[k]);
      }
      out += per_token ? "]]}" : "]}";
    }
    const std::string name = model_path.substr(model_path.find_last_of('/') + 1);
    out += "],\"model\":" + json_string(name) + ",\"usage\":{\"prompt_tokens\":" + std::to_string(emb.tokens) +
           ",\"total_tokens\":" + std::to_string(emb.tokens) + "}}\n";
  } else {
    for (const std::vector<float>& v : emb.vectors) {
      for (size_t k = 0; k < v.size(); ++k) out += number(v[k]) + ((k + 1) % E == 0 ? "\n" : " ");
      if (eo.pooling == Pooling::None) out += "\n";
    }
  }
  write_stdout(out);
  std::fprintf(stderr, "weir embed: %zu texts, %lld tokens in %lld forward steps, %.0f ms (%.1f tokens/s); %zu dims, pooling %s%s, %s\n",
               inputs.size(), static_cast<long long>(emb.tokens), static_cast<long long>(emb.steps), secs * 1e3,
               double(emb.tokens) / std::max(secs, 1e-9), E, pooling_name(eo.pooling),
               pooling ? "" : " (the model's)", eo.normalize ? "L2-normalized" : "not normalized");
  return 0;
}

}  // namespace weir::tools
