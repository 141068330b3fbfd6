// Per-code-point Unicode facts as llama.cpp's tokenizers see them: the
// general category by its major class, White_Space, the first code point of
// the canonical decomposition (NFD), and the simple lower-case mapping.
// The tables are generated from Python's unicodedata by make_unicode_props.py
// (unicode_props_tables.cpp names the Unicode version); llama.cpp takes its
// categories and lower case from the latest UnicodeData.txt, so code points
// assigned after that version read as Undefined here.
#pragma once
#include <cstddef>
#include <cstdint>

namespace weir::unicode {

// llama.cpp's codepoint flags: C is split into Undefined (Cn, unassigned) and
// Control (Cc, Cf, Co, Cs).
enum class Category : uint8_t {
  Undefined,
  Control,
  Letter,
  Mark,
  Number,
  Punctuation,
  Symbol,
  Separator,
};

// Code points past U+10FFFF are Undefined and map to themselves.
Category category(char32_t cp);
// Unicode's White_Space property (PropList.txt): U+0009..U+000D, U+0020,
// U+0085, U+00A0, U+1680, U+2000..U+200A, U+2028, U+2029, U+202F, U+205F,
// U+3000.
bool is_white_space(char32_t cp);
// The first code point of cp's canonical decomposition ('é' -> 'e',
// U+D55C '한' -> U+1112 'ᄒ'); cp itself when it has none.
char32_t nfd_first(char32_t cp);
// The simple lower-case mapping ('A' -> 'a', U+0130 'İ' -> 'i'); cp itself
// when it has none.
char32_t to_lower(char32_t cp);

namespace tables {
struct CategoryRun {
  uint32_t first;  // the run lasts until the next run's first
  Category category;
};
struct MapRun {
  uint32_t first, last;  // every code point of [first, last] maps to `to`
  uint32_t to;
};
struct LowerPair {
  uint32_t from, to;
};
extern const CategoryRun category_runs[];
extern const size_t category_runs_size;
extern const MapRun nfd_first_runs[];
extern const size_t nfd_first_runs_size;
extern const LowerPair lower_pairs[];
extern const size_t lower_pairs_size;
}  // namespace tables

}  // namespace weir::unicode
