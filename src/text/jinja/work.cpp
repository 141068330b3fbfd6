#include "text/jinja/work.h"

#include "core/error.h"
#include "text/jinja/value.h"

namespace weir::jinja {

namespace {

thread_local WorkMeter* current_meter = nullptr;

}  // namespace

void refuse_size(uint64_t bytes) {
  throw EvalError("a string or list of " + std::to_string(bytes) + " bytes: over the 64 MiB limit on one value, refused");
}

WorkMeter::WorkMeter(const RenderLimits& limits, std::string_view name)
    : limits_(limits), name_(name), previous_(current_meter) {
  current_meter = this;
}

WorkMeter::~WorkMeter() { current_meter = previous_; }

void WorkMeter::charge(uint64_t units) {
  used_ = units > UINT64_MAX - used_ ? UINT64_MAX : used_ + units;
  if (used_ > limits_.max_work)
    throw EvalError("the render exceeded its work budget of " + std::to_string(limits_.max_work) +
                    " (a loop that grows a string, or runs too long?)");
  if (limits_.stop && limits_.stop->load(std::memory_order_relaxed))
    throw Cancelled(std::string(name_) + ": the render was stopped");
}

void charge_work(uint64_t units) {
  if (current_meter) current_meter->charge(units);
}

void will_build(uint64_t bytes) {
  if (bytes > kMaxTextBytes) refuse_size(bytes);
  charge_work(bytes);
}

void will_build_list(uint64_t items) {
  if (items > kMaxTextBytes / sizeof(Value)) refuse_size(items > UINT64_MAX / sizeof(Value) ? UINT64_MAX : items * sizeof(Value));
  will_build(items * sizeof(Value));
}

}  // namespace weir::jinja
