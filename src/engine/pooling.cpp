#include "engine/pooling.h"

#include <cmath>

#include "core/error.h"
#include "model/model.h"

namespace weir {

Pooling model_pooling(const Model& m) {
  const std::string key = m.hparams().arch + ".pooling_type";
  const uint64_t v = m.file().get_uint_or(key, uint64_t(Pooling::Mean));
  if (v <= uint64_t(Pooling::Last)) return Pooling(v);
  if (v == 4) throw Error(m.file().name() + ": " + key + " is 4 (rank: a reranker's classifier head), which weir does not run");
  throw Error(m.file().name() + ": " + key + " is " + std::to_string(v) + ", not 0 (none), 1 (mean), 2 (cls) or 3 (last)");
}

std::optional<Pooling> parse_pooling(std::string_view name) {
  if (name == "none") return Pooling::None;
  if (name == "mean") return Pooling::Mean;
  if (name == "cls") return Pooling::Cls;
  if (name == "last") return Pooling::Last;
  return std::nullopt;
}

const char* pooling_name(Pooling p) {
  switch (p) {
    case Pooling::None: return "none";
    case Pooling::Mean: return "mean";
    case Pooling::Cls: return "cls";
    case Pooling::Last: return "last";
  }
  return "?";
}

bool pooling_reads(Pooling p, int64_t pos, int64_t len) {
  switch (p) {
    case Pooling::Cls: return pos == 0;
    case Pooling::Last: return pos == len - 1;
    case Pooling::Mean:
    case Pooling::None: return true;
  }
  return false;
}

void normalize_l2(std::span<float> v) {
  double ss = 0;
  for (float x : v) ss += double(x) * double(x);
  if (ss <= 0) return;
  const double inv = 1.0 / std::sqrt(ss);
  for (float& x : v) x = float(double(x) * inv);
}

}  // namespace weir
