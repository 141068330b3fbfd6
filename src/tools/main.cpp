// weir <command> [options]: the command-line front end.
//
// Exit codes: 0 success; 2 a bad command line, input or environment (one
// line on stderr names the flag, file, key or resource); 3 an internal
// error (a bug: please report it); 128 + N when signal N stopped the work
// (130 SIGINT, 143 SIGTERM, 129 SIGHUP).
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "backend/cpu/kernel_choice.h"
#include "backend/cpu/qdot.h"
#include "backend/registry.h"
#include "core/error.h"
#include "tools/args.h"
#include "tools/commands.h"
#include "tools/env_options.h"
#include "comm/mpi_comm.h"
#include "tools/mpi_ranks.h"
#include "tools/signals.h"

#ifndef WEIR_VERSION
#define WEIR_VERSION "0.0.0"
#endif

namespace {

struct Command {
  const char* name;
  int (*fn)(int, char**);
  const char* summary;
};

constexpr Command kCommands[] = {
    {"run", weir::tools::cmd_run, "generate text from a prompt"},
    {"serve", weir::tools::cmd_serve, "an OpenAI-compatible HTTP server with continuous batching"},
    {"chat", weir::tools::cmd_chat, "talk with a model in the terminal (its chat template, streaming)"},
    {"bench", weir::tools::cmd_bench, "measure prompt and generation speed (llama-bench compatible)"},
    {"tokenize", weir::tools::cmd_tokenize, "print the tokens of a text"},
    {"embed", weir::tools::cmd_embed, "print the embeddings of texts (pooled hidden states)"},
    {"perplexity", weir::tools::cmd_perplexity, "score a text file (llama-perplexity compatible)"},
    {"synth", weir::tools::cmd_synth, "write a random-weight model shaped like a real one (benchmarks)"},
    {"inspect", weir::tools::cmd_inspect, "show a GGUF file's metadata, tensors and parameter count"},
    {"quantize", weir::tools::cmd_quantize, "convert a model to another file type (Q4_K_M, Q8_0, F16, ...)"},
    {"imatrix", weir::tools::cmd_imatrix, "an importance matrix from a text file (for quantize --imatrix)"},
};

void print_usage(FILE* out) {
  std::fprintf(out, "usage: weir <command> [options]   (weir <command> --help for its options)\n"
                    "       weir --version\n\ncommands:\n");
  for (const Command& c : kCommands) std::fprintf(out, "  %-12s %s\n", c.name, c.summary);
}

void print_version() {
  std::printf("weir %s\n", WEIR_VERSION);
  std::printf("CPU: %s\n", weir::cpu::describe_cpu_kernels(weir::tools::cpu_options_from_env().repack).c_str());
  std::printf("MPI: %s\n", weir::mpi_built() ? "yes (mpirun -np N weir run ... : N ranks of a tensor-parallel group)"
                                             : "no (tensor parallel within one process only)");
  std::printf("CUDA: %s", weir::cuda_build_info().c_str());
  if (weir::cuda_built()) {
    std::string why;
    const auto gpus = weir::cuda_devices(&why);
    if (gpus.empty()) std::printf("; %s", why.c_str());
    for (const auto& g : gpus) std::printf("; GPU %d: %s (sm_%d%d)", g.index, g.name.c_str(), g.cc_major, g.cc_minor);
  }
  std::printf("\n");
}

// Runs a command; every way it can fail ends in one line on stderr and an
// exit code.
int run_command(const Command& c, int argc, char** argv) {
  using weir::tools::stop_exit_code;
  try {
    return c.fn(argc, argv);
  } catch (const weir::tools::UsageError& e) {
    std::fprintf(weir::tools::error_stream(), "weir %s: %s (see 'weir %s --help')\n", c.name, e.what(), c.name);
    return 2;
  } catch (const weir::Cancelled& e) {
    const std::string what = e.what();
    std::fprintf(weir::tools::error_stream(), "weir %s: interrupted (%s)%s\n", c.name, weir::tools::stop_signal_name(),
                 what == "interrupted" ? "" : ("; " + what).c_str());
    return stop_exit_code();
  } catch (const weir::ThreadStartError& e) {
    std::fprintf(weir::tools::error_stream(), "weir %s: error: %s; lower --threads (-t)\n", c.name, e.what());
    return 2;
  } catch (const weir::Error& e) {
    // Work that noticed the stop flag may fail in its own words.
    if (weir::tools::stop_requested()) {
      std::fprintf(weir::tools::error_stream(), "weir %s: interrupted (%s)\n", c.name, weir::tools::stop_signal_name());
      return stop_exit_code();
    }
    std::fprintf(weir::tools::error_stream(), "weir %s: error: %s\n", c.name, e.what());
    return 2;
  } catch (const std::bad_alloc&) {
    std::fprintf(weir::tools::error_stream(), "weir %s: error: out of memory\n", c.name);
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(weir::tools::error_stream(), "weir %s: internal error: %s\n", c.name, e.what());
    return 3;
  }
}

}  // namespace

int main(int argc, char** argv) {
  weir::tools::install_signal_handlers();
  try {
    weir::tools::apply_process_env();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "weir: %s\n", e.what());
    return 2;
  }
  if (argc < 2 || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "--help")) {
    print_usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (!std::strcmp(argv[1], "--version") || !std::strcmp(argv[1], "version")) {
    print_version();
  } else {
    const Command* cmd = nullptr;
    for (const Command& c : kCommands)
      if (!std::strcmp(argv[1], c.name)) cmd = &c;
    if (!cmd) {
      std::fprintf(stderr, "weir: unknown command '%s' (see 'weir --help')\n", argv[1]);
      return 2;
    }
    // Under mpirun, each process is a rank of the tensor-parallel group.
    if (weir::tools::launched_by_mpirun()) {
      try {
        weir::tools::start_mpi_ranks();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "weir %s: error: started by mpirun, but %s\n", argv[1], e.what());
        return 2;
      }
    }
    const int rc = run_command(*cmd, argc - 2, argv + 2);
    weir::tools::end_mpi_ranks(rc);
    if (rc != 0) return rc;
  }
  // What a command printed may still sit in stdout's buffer: a write that
  // fails there (a full disk, a closed pipe) is an error too.
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    std::fprintf(stderr, "weir %s: error: cannot write to standard output: %s\n", argv[1], std::strerror(errno));
    return 2;
  }
  return 0;
}
