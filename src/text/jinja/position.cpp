#include "text/jinja/position.h"

#include <algorithm>

#include "text/jinja/unicode.h"

namespace weir::jinja {

LineMap::LineMap(std::string_view source) : source_(source) {
  line_starts_.push_back(0);
  for (size_t i = 0; i < source.size(); ++i)
    if (source[i] == '\n') line_starts_.push_back(i + 1);
}

Pos LineMap::at(size_t offset) const {
  const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
  const size_t line = static_cast<size_t>(it - line_starts_.begin());
  const size_t end = std::min(offset, source_.size());
  // Count from the last answer when it is on this line and not past offset.
  size_t from = line_starts_[line - 1];
  int col = 1;
  if (line == last_line_ && last_offset_ <= end) from = last_offset_, col = last_col_;
  col += static_cast<int>(utf8_length(source_.substr(from, end - from)));
  last_line_ = line, last_offset_ = end, last_col_ = col;
  return {static_cast<int>(line), col};
}

std::string located(std::string_view name, Pos pos, std::string_view message) {
  return std::string(name) + ": line " + std::to_string(pos.line) + ":" + std::to_string(pos.col) + ": " +
         std::string(message);
}

}  // namespace weir::jinja
