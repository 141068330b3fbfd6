// Collectives between threads of one process (CPU ranks; the reference for
// the others): every rank's buffer is host memory the others read directly.
// A call waits for every rank at a barrier, sums (or copies) what it needs
// in rank order into its own output, and waits again before returning, so
// no rank reuses its input while another still reads it. A rank that does
// not come within the timeout, or an abort(), makes every waiting rank
// throw CommError.
#pragma once
#include <memory>
#include <vector>

#include "core/collective.h"

namespace weir {

struct CommOptions {
  int timeout_ms = 60000;  // a collective's wait for the slowest rank
};

// n endpoints of one group: element r is rank r's.
std::vector<std::unique_ptr<Collective>> make_thread_comms(int n, const CommOptions& o = {});

}  // namespace weir
