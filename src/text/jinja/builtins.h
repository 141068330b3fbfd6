// The filters, tests, methods and attribute lookups templates call, each
// with jinja2 3.1's behaviour (filters*.cpp, tests.cpp, methods.cpp,
// args.cpp, json.cpp).
#pragma once
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "text/jinja/value.h"

namespace weir::jinja {

enum class Support {
  Supported,
  Unsupported,  // jinja2 has it, this engine does not: fail at parse time
  Unknown,      // jinja2 does not have it either
};

Support filter_support(std::string_view name);
// Applies filter `name` to v. Throws EvalError for bad arguments or types.
Value apply_filter(std::string_view name, const Value& v, const CallArgs& args);

Support test_support(std::string_view name);
bool apply_test(std::string_view name, const Value& v, const CallArgs& args);

// `obj.name` as jinja2's sandbox does it: a method of str, list or dict
// (bound to obj), a dict's key, a namespace's attribute; undefined when
// missing. Throws EvalError when obj is undefined or the attribute is a
// Python one this engine does not have (so nothing renders differently).
Value get_attribute(const Value& obj, std::string_view name);
// Python's getattr(obj, name) alone (methods, namespace attributes; never a
// dict's key), as the attr filter wants; undefined when missing.
Value get_python_attribute(const Value& obj, std::string_view name);
// `obj[key]`: item first, then attribute for string keys; undefined when
// missing; negative indexes count from the end.
Value get_item(const Value& obj, const Value& key);
// `obj[start:stop:step]` (each may be none).
Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step);

// Binds call arguments to parameters by position and name, as Python does;
// throws EvalError naming `function` for too many, unknown or repeated
// arguments, and for a `required` parameter not given. The others take
// their default_value.
class ArgBinder {
 public:
  struct Param {
    const char* name;
    Value default_value;
    bool required = false;
  };
  ArgBinder(std::string_view function, const CallArgs& args, std::initializer_list<Param> params);
  const Value& operator[](size_t i) const { return values_[i]; }
  bool given(size_t i) const { return given_[i]; }

 private:
  std::vector<Value> values_;
  std::vector<bool> given_;
};

// The JSON text of v as Python's json.dumps(v, sort_keys=..., indent=...)
// writes it (ensure_ascii on). Throws EvalError for what json.dumps cannot
// write (undefined, a generator, a namespace).
// As Python's json.dumps: indent < 0 none; ensure_ascii writes \uXXXX for the rest.
std::string to_json(const Value& v, bool sort_keys, int indent, bool ensure_ascii);

}  // namespace weir::jinja
