// Evaluates a parsed template. Scoping is jinja2's: a for loop's body gets a
// fresh scope each iteration (so `set` inside a loop does not leak out, nor
// carry over to the next iteration; namespace() is how templates keep
// state), as do macros and with blocks; `if` makes none, so `set` inside an
// if changes the enclosing scope. A macro sees the scope it was defined in
// as it is when called.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include "text/jinja/ast.h"
#include "text/jinja/render_limits.h"
#include "text/jinja/value.h"

namespace weir::jinja {

class Scope {
 public:
  explicit Scope(std::shared_ptr<Scope> parent = nullptr) : parent_(std::move(parent)) {}
  // The value of `name` here or in an enclosing scope; null when not set.
  const Value* find(const std::string& name) const;
  void set(const std::string& name, Value v) { vars_[name] = std::move(v); }

 private:
  std::unordered_map<std::string, Value> vars_;
  std::shared_ptr<Scope> parent_;
};

// The globals jinja2 and Hugging Face add: range, dict, namespace,
// raise_exception, strftime_now (globals.cpp).
void add_globals(Scope& scope);
// The error for a namespace attribute `what` set to a value that is or
// holds a namespace or loop (unsupported: it could then hold itself, and
// printing it would never end).
std::string no_reference_in_namespace(const std::string& what);

// Globals jinja2 has that this engine does not (cycler, joiner, lipsum):
// naming one is an error rather than an undefined value.
bool is_unsupported_global(std::string_view name);

// Renders `body` with the variables of `context` (a dict), within `limits`.
// Throws weir::Error "<name>: line L:C: ..." for errors at render time (a
// limit passed among them), weir::Cancelled when limits.stop was set.
std::string render(const Body& body, const Value& context, std::string_view name, const RenderLimits& limits);

}  // namespace weir::jinja
