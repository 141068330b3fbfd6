// Python's str.format, as templates call it ("{} of {}".format(a, b),
// "{name:>8}".format(name=...)): replacement fields with automatic or
// explicit numbering and keywords, attribute and item access in field names
// (through the sandbox's lookups), the !s / !r / !a conversions, and the
// format spec mini-language ([[fill]align][sign][#][0][width][,|_][.precision]
// [type]) for strings, integers and floats. On a Markup string the
// arguments are escaped first and the result is Markup, as jinja2's
// sandbox does.
#pragma once
#include "text/jinja/value.h"

namespace weir::jinja {

// self: a string. Throws EvalError with Python's message for a bad format
// string, a missing argument or a spec the value's type does not take.
Value str_format(const Value& self, const CallArgs& args);

}  // namespace weir::jinja
