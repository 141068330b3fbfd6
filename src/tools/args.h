// Command-line flags for weir's subcommands: declared once with their help
// text, parsed strictly (unknown flag, missing or malformed value -> UsageError).
#pragma once
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/error.h"

namespace weir::tools {

// Bad command line (core/error.h): main prints the message and the usage,
// exits with 2.
using weir::UsageError;

// Parses an integer list ("1,2,4", "1-8*2", "128-512+128"); errors name the flag.
std::vector<int> parse_int_list(const std::string& name, const std::string& value);

// Parses a size in bytes with a binary unit: "2G", "2048M", "1.5GiB",
// "512MiB", "64K" (K, M, G, T: 2^10, 2^20, 2^30, 2^40; an "i" and a "B" may
// follow). A bare number is refused (bytes or MiB? say which); so are 0 and
// sizes past 2^63. Errors name the flag.
uint64_t parse_size(const std::string& name, const std::string& value);

class Args {
 public:
  Args(std::string command, std::string summary) : command_(std::move(command)), summary_(std::move(summary)) {}

  Args& flag(const std::string& names, bool* out, const std::string& help);
  Args& opt(const std::string& names, std::string* out, const std::string& meta, const std::string& help);
  Args& opt(const std::string& names, int* out, const std::string& meta, const std::string& help);
  Args& opt(const std::string& names, int64_t* out, const std::string& meta, const std::string& help);
  Args& opt(const std::string& names, uint64_t* out, const std::string& meta, const std::string& help);
  Args& opt(const std::string& names, float* out, const std::string& meta, const std::string& help);
  // A list option, as llama-bench takes them: comma-separated values, ranges
  // "first-last", "first-last+step", "first-last*mult", and repeats (-t 1 -t 2)
  // append. The first occurrence replaces the defaults already in *out.
  Args& opt_list(const std::string& names, std::vector<int>* out, const std::string& meta, const std::string& help);
  // Comma-separated strings (or repeats); same replace-then-append rule.
  Args& opt_list(const std::string& names, std::vector<std::string>* out, const std::string& meta,
                 const std::string& help);
  // A repeatable option whose every occurrence is one whole value, commas
  // and all (weir embed -p TEXT -p TEXT), appended in order.
  Args& opt_each(const std::string& names, std::vector<std::string>* out, const std::string& meta,
                 const std::string& help);
  // A positional argument (in order).
  Args& positional(const std::string& meta, std::string* out, const std::string& help);

  // Parses argv (after the subcommand); -h/--help prints usage and returns false.
  bool parse(int argc, char** argv);
  std::string usage() const;
  // Whether a flag was given on the command line (by any of its names).
  bool given(const std::string& name) const;

 private:
  struct Spec {
    std::vector<std::string> names;
    std::string meta, help;
    bool takes_value = true;
    std::function<void(const std::string& name, const std::string& value)> set;
    bool seen = false;
  };
  std::string command_, summary_;
  std::vector<Spec> specs_;
  std::vector<Spec> positionals_;
};

}  // namespace weir::tools
