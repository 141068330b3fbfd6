// Splits a template's source into text and the tokens inside its tags,
// doing jinja2's whitespace control on the way:
//   {%- / {{- / {#-  strip all whitespace before the tag (newlines too);
//   -%} / -}} / -#}  strip all whitespace after it;
//   trim_blocks      removes the first newline after a block or comment tag;
//   lstrip_blocks    removes spaces and tabs from the start of a line up to a
//                    block or comment tag; {%+ turns it off for one tag and
//                    +%} turns trim_blocks off for one;
// and as jinja2's defaults: newlines (\r\n, \r) in text become \n, and one
// newline at the very end of the source is dropped (keep_trailing_newline
// off). Comments are dropped and {% raw %}...{% endraw %} becomes text.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "text/jinja/position.h"

namespace weir::jinja {

enum class TokenType {
  Text,        // text between tags (text)
  VarBegin,    // {{
  VarEnd,      // }}
  BlockBegin,  // {%
  BlockEnd,    // %}
  Name,        // identifier (text)
  String,      // string literal, escapes done (text)
  Int,         // integer literal (int_value)
  Float,       // float literal (float_value)
  Operator,    // + - * / // % ** ~ ( ) [ ] { } , . : | = == != < > <= >= ; (text)
  End,         // end of the source
};

struct Token {
  TokenType type = TokenType::End;
  std::string text;
  int64_t int_value = 0;
  double float_value = 0;
  Pos pos;
};

struct LexOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
};

// Throws weir::Error "<name>: line L:C: ..." for an unclosed tag, comment or
// string, or a character that cannot start a token.
std::vector<Token> tokenize(std::string_view source, const LexOptions& options, std::string_view name);

// What a token is called in error messages: "name 'foo'", "'}}'", "end of template".
std::string describe(const Token& t);

}  // namespace weir::jinja
