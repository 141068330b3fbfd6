// The Unicode behaviour of Python's str that templates reach: UTF-8 walking
// by code point (len, indexing, slicing), whitespace as str.isspace() and
// re's \s see it, case mapping as str.lower()/upper()/title()/capitalize()
// do it (full mappings: 'ß'.upper() is 'SS'; the final-sigma rule),
// isprintable() for repr(), and isalnum() for \w. The tables are generated
// from Python itself by make_unicode_tables.py.
//
// Bytes that are not valid UTF-8 decode to U+DC80..U+DCFF (Python's
// surrogateescape) and encode back to the same byte, so nothing is lost.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace weir::jinja {

namespace unicode_tables {
struct CaseRun {
  uint32_t first, last;  // code points mapped, every `stride`-th from first
  int32_t delta;         // mapped = cp + delta
  uint8_t stride;
};
struct CaseSpecial {
  uint32_t cp;
  const char* utf8;  // a mapping to several code points
};
struct Range {
  uint32_t first, last;
};
extern const CaseRun lower_runs[], upper_runs[], title_runs[];
extern const size_t lower_runs_size, upper_runs_size, title_runs_size;
extern const CaseSpecial lower_special[], upper_special[], title_special[];
extern const size_t lower_special_size, upper_special_size, title_special_size;
extern const Range cased_ranges[], case_ignorable_ranges[], printable_ranges[], alnum_ranges[],
    alpha_ranges[], digit_ranges[], lowercase_ranges[], uppercase_ranges[];
extern const size_t cased_ranges_size, case_ignorable_ranges_size, printable_ranges_size,
    alnum_ranges_size, alpha_ranges_size, digit_ranges_size, lowercase_ranges_size,
    uppercase_ranges_size;
}  // namespace unicode_tables

// The code point at s[i], advancing i past it.
char32_t utf8_next(std::string_view s, size_t& i);
void utf8_append(std::string& out, char32_t cp);
std::vector<char32_t> utf8_decode(std::string_view s);
std::string utf8_encode(const std::vector<char32_t>& cps);
size_t utf8_length(std::string_view s);

bool is_space(char32_t cp);       // str.isspace()
bool is_line_break(char32_t cp);  // where str.splitlines() splits
bool is_printable(char32_t cp);   // str.isprintable()
bool is_alnum(char32_t cp);       // str.isalnum()
bool is_cased(char32_t cp);
bool is_alpha(char32_t cp);      // str.isalpha()
bool is_digit(char32_t cp);      // str.isdigit()
bool is_lowercase(char32_t cp);  // str.islower() of the character alone
bool is_uppercase(char32_t cp);  // str.isupper() of the character alone

std::string to_lower(std::string_view s);       // str.lower()
std::string to_upper(std::string_view s);       // str.upper()
std::string to_title(std::string_view s);       // str.title()
std::string to_capitalized(std::string_view s);  // str.capitalize()
std::string swap_case(std::string_view s);        // str.swapcase()

}  // namespace weir::jinja
