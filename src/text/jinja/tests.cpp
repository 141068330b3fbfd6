// The `is` tests (`x is defined`, `n is divisibleby 3`), as jinja2 3.1 has them.
#include <algorithm>
#include <cmath>
#include <string>

#include "text/jinja/builtins.h"
#include "text/jinja/operators.h"
#include "text/jinja/pystr.h"

namespace weir::jinja {

namespace {

constexpr std::string_view kTests[] = {
    "defined", "undefined", "none", "boolean", "false", "true", "integer", "float", "number", "string", "mapping",
    "iterable", "sequence", "callable", "escaped", "filter", "test", "even", "odd", "divisibleby", "eq", "equalto",
    "==", "ne", "!=", "lt", "lessthan", "<", "le", "<=", "gt", "greaterthan", ">", "ge", ">=", "in", "sameas",
    "lower", "upper"};

const Value& one_arg(std::string_view name, const CallArgs& args) {
  if (args.positional.size() != 1 || !args.keyword.empty())
    throw EvalError("test '" + std::string(name) + "' takes one argument");
  return args.positional[0];
}

void no_args(std::string_view name, const CallArgs& args) {
  if (!args.positional.empty() || !args.keyword.empty())
    throw EvalError("test '" + std::string(name) + "' takes no arguments");
}

bool is_iterable(const Value& v) {
  return v.is_undefined() || v.is_string() || v.is_sequence() || v.is_dict();
}

// Python's `a is b` where it does not depend on CPython's caching of objects.
bool same_object(const Value& a, const Value& b) {
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Kind::Undefined: return false;
    case Kind::None: return true;
    case Kind::Bool: return a.boolean() == b.boolean();
    case Kind::Int:
      if (a.integer() >= -5 && a.integer() <= 256) return a.integer() == b.integer();
      break;
    case Kind::Float:
    case Kind::String: break;
    default: return a.identity() == b.identity();
  }
  throw EvalError(std::string("'sameas' on a ") + a.type_name() +
                  " depends on Python's object identity (unsupported)");
}

bool modulo_is(const Value& v, int64_t divisor, int64_t want) {
  const Value r = binary_op("%", v, Value(divisor));
  return equals(r, Value(want));
}

}  // namespace

Support test_support(std::string_view name) {
  if (std::find(std::begin(kTests), std::end(kTests), name) != std::end(kTests)) return Support::Supported;
  return Support::Unknown;
}

bool apply_test(std::string_view name, const Value& v, const CallArgs& args) {
  if (name == "defined") return no_args(name, args), !v.is_undefined();
  if (name == "undefined") return no_args(name, args), v.is_undefined();
  if (name == "none") return no_args(name, args), v.is_none();
  if (name == "boolean") return no_args(name, args), v.is_bool();
  if (name == "false") return no_args(name, args), v.is_bool() && !v.boolean();
  if (name == "true") return no_args(name, args), v.is_bool() && v.boolean();
  if (name == "integer") return no_args(name, args), v.is_int();
  if (name == "float") return no_args(name, args), v.is_float();
  if (name == "number") return no_args(name, args), v.is_number();
  if (name == "string") return no_args(name, args), v.is_string();
  if (name == "mapping") return no_args(name, args), v.is_dict();
  if (name == "iterable") return no_args(name, args), is_iterable(v);
  if (name == "sequence") {
    no_args(name, args);
    return v.is_undefined() || v.is_string() || v.is_dict() || v.is_seq(SeqKind::List) ||
           v.is_seq(SeqKind::Tuple) || v.is_seq(SeqKind::Range);
  }
  if (name == "callable") {
    no_args(name, args);
    // jinja2's Undefined has __call__ (it fails when called).
    return v.is_function() || v.is_undefined() || (v.is_object() && v.object().class_name == "LoopContext");
  }
  if (name == "escaped") return no_args(name, args), v.is_markup();
  if (name == "filter" || name == "test") {
    no_args(name, args);
    if (!v.is_string()) return false;
    return name == "filter" ? filter_support(v.text()) == Support::Supported
                            : test_support(v.text()) == Support::Supported;
  }
  if (name == "even") return no_args(name, args), modulo_is(v, 2, 0);
  if (name == "odd") return no_args(name, args), modulo_is(v, 2, 1);
  if (name == "divisibleby") {
    const Value& n = one_arg(name, args);
    return equals(binary_op("%", v, n), Value(0));
  }
  if (name == "eq" || name == "equalto" || name == "==") return equals(v, one_arg(name, args));
  if (name == "ne" || name == "!=") return !equals(v, one_arg(name, args));
  if (name == "in") return contains(one_arg(name, args), v);
  if (name == "sameas") return same_object(v, one_arg(name, args));
  if (name == "lower" || name == "upper") {
    no_args(name, args);
    const std::string s = v.str();
    return name == "lower" ? pystr::is_lower(s) : pystr::is_upper(s);
  }
  const Value& other = one_arg(name, args);
  const char* op = name == "lt" || name == "lessthan" || name == "<"      ? "<"
                   : name == "le" || name == "<="                          ? "<="
                   : name == "gt" || name == "greaterthan" || name == ">" ? ">"
                                                                           : ">=";
  const int c = compare(v, other, op);
  if (c == 2) return false;
  if (op[0] == '<') return op[1] ? c <= 0 : c < 0;
  return op[1] ? c >= 0 : c > 0;
}

}  // namespace weir::jinja
