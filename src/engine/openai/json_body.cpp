#include "engine/openai/json_body.h"

#include <vector>

#include "engine/openai/request.h"
#include "text/utf8_streamer.h"

namespace weir::openai {

namespace {

// Where the scan is: one frame an open array or object.
struct Frame {
  bool object = false;
  size_t index = 0;      // arrays: the element now read
  std::string_view key;  // objects: the member now read
  bool want_key = true;  // objects: the next string is a key
};

// "messages[0].content": the field the scan is in.
std::string path_of(const std::vector<Frame>& stack) {
  std::string p;
  for (const Frame& f : stack) {
    if (!f.object) {
      p += "[" + std::to_string(f.index) + "]";
    } else if (!f.want_key) {
      if (!p.empty()) p += ".";
      p += utf8_or_replacement(f.key.substr(0, 64));
    }
  }
  return p;
}

// The end of the string whose opening quote is at `open` (the closing
// quote's offset), or npos when the body ends first. Sets `bad_escape` when
// a \u escape is a UTF-16 surrogate without its pair.
size_t string_end(std::string_view s, size_t open, bool& bad_escape) {
  auto hex4 = [&](size_t at, unsigned& v) {
    if (at + 4 > s.size()) return false;
    v = 0;
    for (size_t k = at; k < at + 4; ++k) {
      const char c = s[k];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= unsigned(c - '0');
      else if (c >= 'a' && c <= 'f') v |= unsigned(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') v |= unsigned(c - 'A' + 10);
      else return false;
    }
    return true;
  };
  for (size_t i = open + 1; i < s.size(); ++i) {
    if (s[i] == '"') return i;
    if (s[i] != '\\') continue;
    if (++i >= s.size()) return std::string_view::npos;
    if (s[i] != 'u') continue;
    unsigned v = 0;
    if (!hex4(i + 1, v)) continue;  // the parser reports it
    i += 4;
    if (v >= 0xDC00 && v <= 0xDFFF) bad_escape = true;
    if (v >= 0xD800 && v <= 0xDBFF) {
      unsigned lo = 0;
      if (i + 2 < s.size() && s[i + 1] == '\\' && s[i + 2] == 'u' && hex4(i + 3, lo) && lo >= 0xDC00 && lo <= 0xDFFF)
        i += 6;
      else
        bad_escape = true;
    }
  }
  return std::string_view::npos;
}

// Depth and strings; structure errors are left to the parser.
void scan(std::string_view s, const JsonLimits& limits) {
  std::vector<Frame> stack;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '"') {
      bool bad_escape = false;
      const size_t end = string_end(s, i, bad_escape);
      if (end == std::string_view::npos) return;
      const std::string_view text = s.substr(i + 1, end - i - 1);
      const bool is_key = !stack.empty() && stack.back().object && stack.back().want_key;
      if (is_key) {
        stack.back().key = text;
        stack.back().want_key = false;
      }
      if (bad_escape || !is_valid_utf8(text)) {
        const std::string at = path_of(stack);
        const std::string what = is_key ? "a key" : "a string";
        const std::string why = bad_escape ? "an unpaired UTF-16 surrogate escape (\\uD800-\\uDFFF)" : "bytes that are not UTF-8";
        throw bad_request(at, (at.empty() ? "the body" : "'" + at + "'") + " holds " + what + " with " + why +
                                  " (at byte " + std::to_string(i) + ")");
      }
      i = end;
    } else if (c == '[' || c == '{') {
      if (int(stack.size()) >= limits.max_depth)
        throw bad_request(path_of(stack), "the body nests arrays and objects deeper than " +
                                              std::to_string(limits.max_depth) + " levels (the limit)");
      Frame f;
      f.object = c == '{';
      stack.push_back(f);
    } else if (c == ']' || c == '}') {
      if (stack.empty()) return;
      stack.pop_back();
    } else if (c == ',') {
      if (stack.empty()) return;
      Frame& f = stack.back();
      if (f.object) f.want_key = true;
      else ++f.index;
    }
  }
}

}  // namespace

std::string utf8_or_replacement(std::string_view s) {
  if (is_valid_utf8(s)) return std::string(s);
  Utf8Streamer u;
  std::string out = u.push(s);
  return out + u.flush();
}

nlohmann::json parse_json_body(std::string_view body, const JsonLimits& limits) {
  scan(body, limits);
  try {
    return nlohmann::json::parse(body);
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for a number past double's
    // "[json.exception.parse_error.101] parse error at line 1, column 2: ...;
    // last read: '...'": the library's tag off, the quoted bytes as UTF-8.
    std::string what = e.what();
    if (const size_t p = what.find("] "); what.rfind("[json.exception", 0) == 0 && p != std::string::npos)
      what = what.substr(p + 2);
    throw bad_request("", "the body is not valid JSON: " + utf8_or_replacement(what));
  }
}

const nlohmann::json* given_field(const nlohmann::json& body, const char* name) {
  auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

const char* json_kind(const nlohmann::json& v) {
  switch (v.type()) {
    case nlohmann::json::value_t::null: return "null";
    case nlohmann::json::value_t::boolean: return "a boolean";
    case nlohmann::json::value_t::string: return "a string";
    case nlohmann::json::value_t::array: return "an array";
    case nlohmann::json::value_t::object: return "an object";
    case nlohmann::json::value_t::number_float: return "a number";
    default: return "an integer";
  }
}

}  // namespace weir::openai
