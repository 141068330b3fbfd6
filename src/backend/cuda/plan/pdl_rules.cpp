// Which launches take programmatic dependent launch (kernel_rules.h): the
// knobs that turn it off by op or by plan node.
#include <cstdio>
#include <cstring>
#include <string>

#include "backend/cuda/plan/kernel_rules.h"

namespace weir::cuda {

bool pdl_off_for(Op op, const std::string& list) {
  return !list.empty() && ("," + list + ",").find("," + std::string(op_name(op)) + ",") != std::string::npos;
}

bool pdl_off_for_node(size_t i, const std::string& spec) {
  bool any = false;
  for (const char* s = spec.c_str(); s && *s;) {
    long lo = 0, hi = -1;
    if (std::sscanf(s, "%ld-%ld", &lo, &hi) == 2) {
      any = true;
      if (long(i) >= lo && long(i) <= hi) return false;
    }
    s = std::strchr(s, ',');
    if (s) ++s;
  }
  return any;
}

}  // namespace weir::cuda
