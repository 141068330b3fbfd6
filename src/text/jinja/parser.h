// Turns tokens into statements and expressions, with jinja2's grammar and
// operator precedence (loosest first): `x if c else y`, or, and, not,
// comparisons and `in`, + -, ~, * / // %, **, unary - +, then filters and
// tests (`x | f`, `x is t`), then postfix `.a`, `[i]`, `(args)`.
//
// Unsupported constructs ({% include %}, {% call %}, *args in calls, ...)
// and unknown filters or tests fail here, naming the construct and its
// line:column. As in jinja2, an unknown filter or test inside an {% if %}
// fails only when evaluated.
#pragma once
#include <string_view>
#include <vector>

#include "text/jinja/ast.h"
#include "text/jinja/lexer.h"

namespace weir::jinja {

Body parse(std::vector<Token> tokens, std::string_view name);

}  // namespace weir::jinja
