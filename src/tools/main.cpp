// weir <command> [options]: the command-line front end.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "core/error.h"
#include "tools/args.h"
#include "tools/commands.h"

namespace {

struct Command {
  const char* name;
  int (*fn)(int, char**);
  const char* summary;
};

constexpr Command kCommands[] = {
    {"run", weir::tools::cmd_run, "generate text from a prompt"},
    {"bench", weir::tools::cmd_bench, "measure prompt and generation speed (llama-bench compatible)"},
    {"tokenize", weir::tools::cmd_tokenize, "print the tokens of a text"},
    {"perplexity", weir::tools::cmd_perplexity, "score a text file (llama-perplexity compatible)"},
    {"synth", weir::tools::cmd_synth, "write a random-weight model shaped like a real one (benchmarks)"},
    {"inspect", weir::tools::cmd_inspect, "show a GGUF file's metadata, tensors and parameter count"},
    {"quantize", weir::tools::cmd_quantize, "convert a model to another file type (Q4_K_M, Q8_0, F16, ...)"},
};

void print_usage(FILE* out) {
  std::fprintf(out, "usage: weir <command> [options]   (weir <command> --help for its options)\n\ncommands:\n");
  for (const Command& c : kCommands) std::fprintf(out, "  %-12s %s\n", c.name, c.summary);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "--help")) {
    print_usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  for (const Command& c : kCommands) {
    if (std::strcmp(argv[1], c.name) != 0) continue;
    try {
      return c.fn(argc - 2, argv + 2);
    } catch (const weir::tools::UsageError& e) {
      std::fprintf(stderr, "weir %s: %s (see 'weir %s --help')\n", c.name, e.what(), c.name);
      return 2;
    } catch (const weir::Error& e) {
      std::fprintf(stderr, "weir %s: error: %s\n", c.name, e.what());
      return 2;
    } catch (const std::bad_alloc&) {
      std::fprintf(stderr, "weir %s: error: out of memory\n", c.name);
      return 2;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "weir %s: internal error: %s\n", c.name, e.what());
      return 3;
    }
  }
  std::fprintf(stderr, "weir: unknown command '%s'\n", argv[1]);
  print_usage(stderr);
  return 2;
}
