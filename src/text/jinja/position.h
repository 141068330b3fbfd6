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

// Turns byte offsets into line:column.
class LineMap {
 public:
  explicit LineMap(std::string_view source);
  Pos at(size_t offset) const;

 private:
  std::string_view source_;
  std::vector<size_t> line_starts_;
};

// The message of every template error: the template's name, the place and
// what is wrong.
std::string located(std::string_view name, Pos pos, std::string_view message);
[[noreturn]] inline void fail_at(std::string_view name, Pos pos, std::string_view message) {
  throw Error(located(name, pos, message));
}

}  // namespace weir::jinja
