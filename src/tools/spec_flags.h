// Speculative decoding's flags, the same in every command that generates
// (run, chat, serve, bench): --spec ngram|draft|off, -md FILE (implies
// draft), -ngld N, --draft-max N, --draft-min N, as llama.cpp spells them
// where it has them. They fill engine/spec_options.h's SpecOptions.
#pragma once
#include <string>

#include "engine/spec_options.h"
#include "tools/args.h"

namespace weir::tools {

struct SpecFlags {
  std::string mode;  // as given ("" : off, or draft with -md)
  std::string draft_path;
  int draft_gpu_layers = -1;
  int draft_max = 16, draft_min = 0;
  void add_to(Args& a);
  // After Args::parse: the options, every value checked (UsageError naming
  // the flag: an unknown --spec, --spec draft without -md, -md with --spec
  // ngram, --draft-max / --draft-min out of range).
  SpecOptions options(const Args& a) const;
};

// The flag names, for the test that every generating command takes them.
std::vector<std::string> spec_flag_names();

}  // namespace weir::tools
