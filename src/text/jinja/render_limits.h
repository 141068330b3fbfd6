// What one render may spend: a template given by a user (weir serve
// --chat-template-file) and messages sent by remote clients must not be able
// to take the server's memory or time, nor keep it from shutting down.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace weir::jinja {

struct RenderLimits {
  // The rendered text, in bytes. (Each string or list a render builds on
  // the way is capped apart, at kMaxTextBytes: 64 MiB.)
  size_t max_output_bytes = size_t{16} << 20;
  // The render's work budget, in units of about one byte written, so that it
  // bounds both time and memory:
  //   - every string or list built costs its size, a string its bytes (`~`,
  //     `+`, `*`, join, replace, format, upper, tojson, indent, ..., and the
  //     text appended to the output), a list sizeof(Value) per item; steps
  //     that check a result's size before building it count it then and
  //     again as the value they return;
  //   - reading through a string or list (in, find, ==, sort, len of a
  //     string, a dict's keys) costs its bytes, or kItemWork per item;
  //   - a statement or loop turn costs kStatementWork (256), an expression
  //     node kExpressionWork (16): about what they take in time next to
  //     writing a byte (a loop turn ~1.2 us, a byte copied ~0.2 ns).
  // A loop that grows a string by `~` is quadratic in bytes, so it runs out
  // quickly. The default is spent in 0.2-0.6 s on a 2-core VM by the
  // costliest loops found (method calls, filters, macros, namespaces), and
  // in a few tens of milliseconds by growing strings.
  // Real chat templates spend 11-22 units per byte they render: 6-8% of the
  // default for a 2,000-turn, 1 MB conversation (tests/data's templates).
  uint64_t max_work = uint64_t{1} << 28;
  // When set and it reads true, the render stops with weir::Cancelled
  // ("<name>: the render was stopped"). Read at every statement, loop turn,
  // expression and string or list built.
  const std::atomic<bool>* stop = nullptr;
};

}  // namespace weir::jinja
