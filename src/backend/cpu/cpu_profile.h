// Where a CPU graph's time goes (CpuOptions::profile, WEIR_CPU_PROFILE=1):
// the backend then runs every node between two barriers and thread 0 times
// it, the activations' quantization included, summed per kind of node (op,
// weight type and shape, tokens); printed to stderr when the backend goes,
// with the weight bytes a product read per second. Barriers around every node
// cost a little: the total is a bit above an unprofiled run's.
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include "core/tensor.h"

namespace weir::cpu {

class CpuProfile {
 public:
  // Adds one run of node t (seconds of wall time); how: "" or the product's
  // path ("x8": a repacked weight, "amx": AMX tiles), shown after the type.
  void add(const Tensor& t, const char* how, double seconds);
  // The table, longest first; "" when nothing was timed.
  std::string table(int threads) const;

 private:
  struct Stat {
    uint64_t calls = 0;
    double seconds = 0, weight_bytes = 0;
  };
  std::map<std::string, Stat> stats_;
};

}  // namespace weir::cpu
