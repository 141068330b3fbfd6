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
  const size_t start = line_starts_[line - 1];
  const size_t end = std::min(offset, source_.size());
  return {static_cast<int>(line), static_cast<int>(utf8_length(source_.substr(start, end - start))) + 1};
}

std::string located(std::string_view name, Pos pos, std::string_view message) {
  return std::string(name) + ": line " + std::to_string(pos.line) + ":" + std::to_string(pos.col) + ": " +
         std::string(message);
}

}  // namespace weir::jinja
