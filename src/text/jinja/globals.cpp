// The functions every template can call: jinja2's range, dict and
// namespace, and Hugging Face's raise_exception and strftime_now.
#include <ctime>

#include "text/jinja/builtins.h"
#include "text/jinja/render.h"
#include "text/jinja/work.h"

namespace weir::jinja {

namespace {

// jinja2's sandbox refuses longer ranges.
constexpr int64_t kMaxRange = 100000;

int64_t int_arg(const Value& v, const char* function) {
  if (v.is_int() || v.is_bool()) return v.integer();
  if (v.is_undefined()) throw EvalError(v.undefined_hint());
  throw EvalError(std::string("'") + v.type_name() + "' object cannot be interpreted as an integer (in " + function +
                  ")");
}

Value range(const CallArgs& args) {
  if (!args.keyword.empty()) throw EvalError("range() takes no keyword arguments");
  const auto& p = args.positional;
  if (p.empty() || p.size() > 3)
    throw EvalError("range expected at most 3 arguments, got " + std::to_string(p.size()));
  int64_t start = 0, stop, step = 1;
  if (p.size() == 1) {
    stop = int_arg(p[0], "range");
  } else {
    start = int_arg(p[0], "range");
    stop = int_arg(p[1], "range");
    if (p.size() == 3) step = int_arg(p[2], "range");
  }
  if (step == 0) throw EvalError("range() arg 3 must not be zero");
  const int64_t len = step > 0 ? (stop > start ? (stop - start + step - 1) / step : 0)
                               : (start > stop ? (start - stop - step - 1) / -step : 0);
  if (len > kMaxRange)
    throw EvalError("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  return Value::range(start, stop, step);
}

// Python's dict(): from a mapping or (key, value) pairs, then keywords.
Dict dict_from(const CallArgs& args, const char* function) {
  Dict d;
  if (args.positional.size() > 1)
    throw EvalError(std::string(function) + " expected at most 1 argument, got " +
                    std::to_string(args.positional.size()));
  if (!args.positional.empty()) {
    const Value& src = args.positional[0];
    if (src.is_undefined()) throw EvalError(src.undefined_hint());
    if (src.is_dict()) {
      charge_work(src.dict().size() * kItemWork);  // a copy
      d = src.dict();
    } else if (src.is_object() && src.object().assignable) {
      charge_work(src.object().attrs.size() * kItemWork);
      d = src.object().attrs;
    } else {
      for (const Value& item : iterate(src)) {
        std::vector<Value> pair = iterate(item);
        if (pair.size() != 2)
          throw EvalError("dictionary update sequence element has length " + std::to_string(pair.size()) +
                          "; 2 is required");
        d.set(pair[0], pair[1]);
      }
    }
  }
  for (const auto& [k, v] : args.keyword) d.set(Value(k), v);
  return d;
}

Value make_namespace(const CallArgs& args) {
  auto ns = std::make_shared<Object>();
  ns->class_name = "Namespace";
  ns->assignable = true;
  ns->attrs = dict_from(args, "Namespace");
  for (const auto& [k, v] : ns->attrs)
    if (holds_reference(v)) throw EvalError(no_reference_in_namespace("namespace(" + k.str() + "=...)"));
  if (ns->attrs.depth() >= kMaxNesting)
    throw EvalError("namespace(): lists or dicts nested " + std::to_string(ns->attrs.depth() - 1) + " deep, too deep to keep");
  return Value::object(std::move(ns));
}

Value raise_exception(const CallArgs& args) {
  if (args.positional.size() != 1 || !args.keyword.empty())
    throw EvalError("raise_exception() takes one argument, the message");
  throw EvalError(args.positional[0].str());
}

Value strftime_now(const CallArgs& args) {
  if (args.positional.size() != 1 || !args.positional[0].is_string() || !args.keyword.empty())
    throw EvalError("strftime_now() takes one argument, a format string");
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  const std::string& fmt = args.positional[0].text();
  if (fmt.empty()) return Value("");
  will_build(256 + uint64_t(fmt.size()) * 8);
  std::string buf(256 + fmt.size() * 8, '\0');
  const size_t n = std::strftime(buf.data(), buf.size(), fmt.c_str(), &local);
  if (n == 0) throw EvalError("strftime_now(): the format gives no text or too much");
  buf.resize(n);
  return Value(std::move(buf));
}

}  // namespace

void add_globals(Scope& scope) {
  scope.set("range", Value::function("range", range));
  scope.set("dict", Value::function("dict", [](const CallArgs& a) { return Value::dict(dict_from(a, "dict")); }));
  scope.set("namespace", Value::function("namespace", make_namespace));
  scope.set("raise_exception", Value::function("raise_exception", raise_exception));
  scope.set("strftime_now", Value::function("strftime_now", strftime_now));
}

std::string no_reference_in_namespace(const std::string& what) {
  return what + ": a namespace cannot hold a namespace or a loop, not even in a list or dict or through a "
         "bound method (unsupported: it could then hold itself)";
}

bool is_unsupported_global(std::string_view name) {
  return name == "cycler" || name == "joiner" || name == "lipsum";
}

}  // namespace weir::jinja
