// weir tokenize: print the tokens of a text (ids and pieces, or a JSON list).
#include <cstdio>

#include "core/error.h"
#include "core/gguf.h"
#include "text/tokenizer.h"
#include "tools/args.h"
#include "tools/commands.h"
#include "tools/common.h"

namespace weir::tools {

int cmd_tokenize(int argc, char** argv) {
  std::string model_path, text, file;
  bool ids_only = false, no_bos = false, no_parse_special = false;
  Args a("tokenize", "Print the tokens of a text.");
  a.opt("-m,--model", &model_path, "FILE", "GGUF model whose tokenizer to use (required)")
      .opt("-p,--prompt", &text, "TEXT", "text to tokenize")
      .opt("-f,--file", &file, "FILE", "read the text from a file")
      .flag("--ids", &ids_only, "print only a JSON list of ids")
      .flag("--no-bos", &no_bos, "do not add the BOS token")
      .flag("--no-parse-special", &no_parse_special, "treat special-token text as plain text");
  if (!a.parse(argc, argv)) return 0;
  if (model_path.empty()) throw UsageError("no model given (-m MODEL.gguf)");
  if (a.given("-p") && a.given("-f")) throw UsageError("give the text as -p TEXT or -f FILE, not both");
  if (a.given("-f")) text = read_text_file(file, "-f");
  else if (!a.given("-p")) throw UsageError("no text given (-p TEXT or -f FILE)");
  // Only the tokenizer is needed: no weights are touched.
  GGUFFile f = GGUFFile::open(model_path);
  auto tok = Tokenizer::from_gguf(f);
  const std::vector<int32_t> ids = tok->encode(text, tok->vocab().add_bos && !no_bos, !no_parse_special);
  if (ids_only) {
    std::string out = "[";
    for (size_t i = 0; i < ids.size(); ++i) out += (i ? ", " : "") + std::to_string(ids[i]);
    std::printf("%s]\n", out.c_str());
    return 0;
  }
  for (int32_t id : ids) {
    std::string piece = tok->token_to_piece(id, true);
    std::printf("%6d -> '%s'\n", id, piece.c_str());
  }
  return 0;
}

}  // namespace weir::tools
