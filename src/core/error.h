// The exceptions that reach users. An Error's message is a single line that
// names what was wrong and where (file, key, tensor, offset, flag).
#pragma once
#include <stdexcept>
#include <string>

namespace weir {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A bad option: a flag's value (or a Python argument) out of range, two that
// conflict. Its message names the flag. weir's command prints it with the
// usage and exits with 2; Python raises ValueError.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Work stopped because the caller asked (a stop flag was set: Ctrl-C,
// SIGTERM). Whatever was being written has been removed.
struct Cancelled : Error {
  using Error::Error;
};

// A group of threads could not all be started (the operating system refused
// one: a memory or process limit). None of the group is left running.
struct ThreadStartError : Error {
  using Error::Error;
};

}  // namespace weir
