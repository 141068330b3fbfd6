// Python's str methods on UTF-8 text, by code point as Python counts:
// what the methods (methods.cpp) and filters (filters.cpp) share.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace weir::jinja::pystr {

// chars: nullopt strips whitespace (str.isspace), else any of these characters.
std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right);
// sep: nullopt splits on runs of whitespace and drops empty ends. maxsplit < 0: no limit.
std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit);
std::vector<std::string> rsplit(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit);
std::vector<std::string> splitlines(std::string_view s, bool keepends);
// count < 0: all.
std::string replace(std::string_view s, std::string_view old, std::string_view with, int64_t count);
// The code point index of the first (last) `sub` in s[start:end], or -1.
int64_t find(std::string_view s, std::string_view sub, std::optional<int64_t> start, std::optional<int64_t> end,
             bool from_right);
int64_t count(std::string_view s, std::string_view sub);
std::string center(std::string_view s, int64_t width, std::string_view fill);
std::string ljust(std::string_view s, int64_t width, std::string_view fill);
std::string rjust(std::string_view s, int64_t width, std::string_view fill);
std::string zfill(std::string_view s, int64_t width);
bool is_lower(std::string_view s);

// Where `sub` first is in s at or after byte `from` (npos: nowhere).
// Linear in s and sub whatever they hold (glibc's memmem: the two-way
// algorithm; std::string_view::find can compare sub at every byte), and
// charged the bytes it passes.
size_t find_bytes(std::string_view s, std::string_view sub, size_t from = 0);
// Where the last `sub` in s that ends at or before byte `end` starts (npos:
// nowhere); charged every byte it compares (it can compare all of sub at
// each place).
size_t rfind_bytes(std::string_view s, std::string_view sub, size_t end);
bool is_upper(std::string_view s);

}  // namespace weir::jinja::pystr
