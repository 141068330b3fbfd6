#include "tools/signals.h"

#include <signal.h>

#include <cstring>

#include "core/partial_files.h"

namespace weir::tools {
namespace {

std::atomic<bool> g_stop{false};
std::atomic<int> g_signal{0};

extern "C" void on_stop_signal(int sig) {
  int expected = 0;
  if (g_signal.compare_exchange_strong(expected, sig)) {
    g_stop.store(true);
    return;
  }
  // The second one: no more waiting for the work to notice.
  remove_partial_files();
  signal(sig, SIG_DFL);
  raise(sig);
}

}  // namespace

void install_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
  signal(SIGXFSZ, SIG_IGN);
}

const std::atomic<bool>& stop_flag() { return g_stop; }

bool take_back_interrupt() {
  int expected = SIGINT;
  if (!g_signal.compare_exchange_strong(expected, 0)) return false;
  g_stop.store(false);
  return true;
}
bool stop_requested() { return g_stop.load(std::memory_order_relaxed); }
int stop_signal() { return g_signal.load(); }
int stop_exit_code() { return 128 + (stop_signal() ? stop_signal() : SIGINT); }

const char* stop_signal_name() {
  switch (stop_signal()) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    default: return "a signal";
  }
}

}  // namespace weir::tools
