// Python's arithmetic and string operators as jinja2 evaluates them: int
// and float mixing, floor division and modulo with the divisor's sign,
// str and list concatenation and repetition, markupsafe's escaping when a
// Markup meets a plain str, and printf-style `str % args`.
#pragma once
#include <string_view>

#include "text/jinja/value.h"

namespace weir::jinja {

// op: + - * / // % ** ~. Throws EvalError as Python raises TypeError or
// ZeroDivisionError, and for int results past 64 bits (Python's are
// unbounded: unsupported here rather than wrong).
Value binary_op(std::string_view op, const Value& a, const Value& b);
Value negate(const Value& v);
Value unary_plus(const Value& v);
// Python's `format % args` (args a tuple, a dict for %(name)s, or one value).
Value percent_format(const Value& format, const Value& args);
// The string `s` as Markup: escaped unless it is Markup already.
std::string escape_unless_markup(const Value& v);

}  // namespace weir::jinja
