#include "text/unicode_props.h"

#include <algorithm>

namespace weir::unicode {

Category category(char32_t cp) {
  using tables::CategoryRun;
  const CategoryRun* begin = tables::category_runs;
  const CategoryRun* end = begin + tables::category_runs_size;
  if (cp >= 0x110000) return Category::Undefined;
  // The last run whose first is <= cp.
  const CategoryRun* it = std::upper_bound(
      begin, end, uint32_t(cp), [](uint32_t c, const CategoryRun& r) { return c < r.first; });
  return (it - 1)->category;
}

bool is_white_space(char32_t cp) {
  switch (cp) {
    case 0x0009: case 0x000A: case 0x000B: case 0x000C: case 0x000D:
    case 0x0020: case 0x0085: case 0x00A0: case 0x1680:
    case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

char32_t nfd_first(char32_t cp) {
  using tables::MapRun;
  const MapRun* begin = tables::nfd_first_runs;
  const MapRun* end = begin + tables::nfd_first_runs_size;
  const MapRun* it = std::upper_bound(begin, end, uint32_t(cp),
                                      [](uint32_t c, const MapRun& r) { return c < r.first; });
  if (it == begin) return cp;
  --it;
  return cp <= it->last ? char32_t(it->to) : cp;
}

char32_t to_lower(char32_t cp) {
  if (cp < 0x80) return cp >= 'A' && cp <= 'Z' ? cp + 32 : cp;
  using tables::LowerPair;
  const LowerPair* begin = tables::lower_pairs;
  const LowerPair* end = begin + tables::lower_pairs_size;
  const LowerPair* it = std::lower_bound(
      begin, end, uint32_t(cp), [](const LowerPair& p, uint32_t c) { return p.from < c; });
  return it != end && it->from == cp ? char32_t(it->to) : cp;
}

}  // namespace weir::unicode
