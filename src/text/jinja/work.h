// How a render counts its work against RenderLimits::max_work, and the cap
// on any one string or list, from wherever the work is done: the renderer
// counts statements, loop turns, expression nodes and its output; the
// filters, methods, operators and value functions count the strings and
// lists they build and read through (and every string value made counts its
// bytes when made: Value(std::string), value.cpp).
//
// The counts go to the meter of the render running on this thread (a render
// runs on one thread from start to end, and installs its meter for that
// time). Outside a render (parsing, value_from_json, tests of the parts)
// nothing is counted and only the size cap applies.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "text/jinja/render_limits.h"

namespace weir::jinja {

// The most bytes one string or list may take (a list counts sizeof(Value)
// per item): what a single step may build, whatever the budget.
inline constexpr size_t kMaxTextBytes = size_t{1} << 26;  // 64 MiB
// What a statement or loop turn, and an expression node, cost in work units
// (one unit: about the time to write one byte). Measured on a 2-core VM: a
// loop turn ~1.2 us, an expression node ~30 ns, a byte copied ~0.2 ns.
inline constexpr uint64_t kStatementWork = 256;
inline constexpr uint64_t kExpressionWork = 16;
// Reading one list item or dict entry (a compare, a scan for `in`).
inline constexpr uint64_t kItemWork = 8;

// Charges `units` to the render running on this thread, if any. Throws
// EvalError when that passes its budget, weir::Cancelled when its stop flag
// is set.
void charge_work(uint64_t units);
// Call before building a string of `bytes` bytes: throws EvalError when it
// would pass kMaxTextBytes, else charges the bytes as work.
void will_build(uint64_t bytes);
// The same for a list of `items` items.
void will_build_list(uint64_t items);
// Throws EvalError naming `bytes` as over kMaxTextBytes.
[[noreturn]] void refuse_size(uint64_t bytes);
// For text grown piece by piece, where its size is not known ahead: call
// after each piece (of at most kMaxTextBytes) to stop it once it passes
// kMaxTextBytes, and charge the whole when it is done.
inline void check_built(const std::string& text) {
  if (text.size() > kMaxTextBytes) refuse_size(text.size());
}

// The meter of one render: created by the renderer, it is this thread's
// until it is destroyed (then the one before it is again).
class WorkMeter {
 public:
  // `name`: the template's, for the stop message; must outlive the meter.
  WorkMeter(const RenderLimits& limits, std::string_view name);
  ~WorkMeter();
  WorkMeter(const WorkMeter&) = delete;
  WorkMeter& operator=(const WorkMeter&) = delete;

  void charge(uint64_t units);
  uint64_t used() const { return used_; }

 private:
  const RenderLimits& limits_;
  std::string_view name_;
  uint64_t used_ = 0;
  WorkMeter* previous_;
};

}  // namespace weir::jinja
