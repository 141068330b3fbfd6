// Where something is in a template's source, and the errors that say so:
// "<name>: line 3:14: <message>".
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"

namespace weir::jinja {

struct Pos {
  int line = 1;
  int col = 1;  // in characters, from 1
};

// Turns byte offsets into line:column. The column counts characters from
// the line's start, so at() remembers its last answer and counts on from it
// when asked about a later offset of the same line: the lexer asks in order,
// which keeps a template written on one long line linear (a 210 KB line
// took 12 s to lex when every token counted from the line's start). Not for
// use from two threads at once.
class LineMap {
 public:
  explicit LineMap(std::string_view source);
  Pos at(size_t offset) const;

 private:
  std::string_view source_;
  std::vector<size_t> line_starts_;
  // The last answer: offset `last_offset_` is at column `last_col_` of
  // line `last_line_` (1-based; 0: none yet).
  mutable size_t last_line_ = 0, last_offset_ = 0;
  mutable int last_col_ = 1;
};

// The message of every template error: the template's name, the place and
// what is wrong.
std::string located(std::string_view name, Pos pos, std::string_view message);
[[noreturn]] inline void fail_at(std::string_view name, Pos pos, std::string_view message) {
  throw Error(located(name, pos, message));
}

}  // namespace weir::jinja
