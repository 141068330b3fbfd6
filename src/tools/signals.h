// How weir's commands end when the operating system asks: the first SIGINT,
// SIGTERM or SIGHUP sets a stop flag that the work in progress polls (the
// session between forward steps and graph segments, quantize and synth
// between pieces); the command then removes what it was writing and exits
// with 128 + the signal's number (130, 143, 129). A second such signal ends
// the process at once, after removing partial output files
// (core/partial_files.h). SIGPIPE and SIGXFSZ are ignored, so a closed pipe
// or a file-size limit is a write error with a message, not a silent death.
#pragma once
#include <atomic>

namespace weir::tools {

// Installs the handlers (once, at start-up; main does it).
void install_signal_handlers();
// Set by the first stop signal.
const std::atomic<bool>& stop_flag();
bool stop_requested();
// An interactive command (weir chat) takes a SIGINT back once it has
// stopped what the user interrupted (an answer): the flag falls and the next
// SIGINT stops the next answer instead of ending the process. Returns
// whether there was one; SIGTERM and SIGHUP are never taken back.
bool take_back_interrupt();
// The signal that set the flag (0: none), its exit code and its name.
int stop_signal();
int stop_exit_code();
const char* stop_signal_name();

}  // namespace weir::tools
