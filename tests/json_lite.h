// A small JSON reader for tests: objects, arrays, strings (all escapes,
// \uXXXX with surrogate pairs; a lone surrogate is kept as its 3-byte form,
// as Python writes it), numbers, true/false/null. Errors throw
// std::runtime_error with the byte offset. Header-only.
#pragma once
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace weir::test::json {

struct Value {
  enum class Type { Null, Bool, Number, String, Array, Object };
  Type type = Type::Null;
  bool boolean = false;
  double number = 0;
  bool is_int = false;  // the literal was an integer that fits int64
  int64_t integer = 0;
  std::string str;
  std::vector<Value> array;
  std::vector<std::pair<std::string, Value>> object;  // in file order

  bool is_null() const { return type == Type::Null; }
  bool is_object() const { return type == Type::Object; }
  bool is_array() const { return type == Type::Array; }
  bool is_string() const { return type == Type::String; }

  const Value* find(std::string_view key) const {
    for (const auto& [k, v] : object)
      if (k == key) return &v;
    return nullptr;
  }
  bool has(std::string_view key) const { return find(key) != nullptr; }
  const Value& operator[](std::string_view key) const {
    const Value* v = type == Type::Object ? find(key) : nullptr;
    if (!v) throw std::runtime_error("json: no key \"" + std::string(key) + "\"");
    return *v;
  }
  const Value& operator[](size_t i) const {
    if (type != Type::Array || i >= array.size()) throw std::runtime_error("json: bad index");
    return array[i];
  }
  size_t size() const { return type == Type::Array ? array.size() : object.size(); }

  bool as_bool() const {
    if (type != Type::Bool) throw std::runtime_error("json: not a bool");
    return boolean;
  }
  double as_number() const {
    if (type != Type::Number) throw std::runtime_error("json: not a number");
    return number;
  }
  int64_t as_int() const {
    if (type != Type::Number) throw std::runtime_error("json: not a number");
    return is_int ? integer : int64_t(number);
  }
  const std::string& as_string() const {
    if (type != Type::String) throw std::runtime_error("json: not a string");
    return str;
  }
  template <typename T = int64_t>
  std::vector<T> as_int_vector() const {
    if (type != Type::Array) throw std::runtime_error("json: not an array");
    std::vector<T> out;
    out.reserve(array.size());
    for (const Value& v : array) out.push_back(T(v.as_int()));
    return out;
  }
  std::vector<double> as_number_vector() const {
    if (type != Type::Array) throw std::runtime_error("json: not an array");
    std::vector<double> out;
    out.reserve(array.size());
    for (const Value& v : array) out.push_back(v.as_number());
    return out;
  }
};

namespace detail {

class Parser {
 public:
  explicit Parser(std::string_view s) : s_(s) {}

  Value parse_document() {
    Value v = parse_value(0);
    skip_ws();
    if (i_ != s_.size()) fail("trailing characters");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error("json: " + what + " at offset " + std::to_string(i_));
  }
  void skip_ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r'))
      ++i_;
  }
  char peek() {
    skip_ws();
    if (i_ >= s_.size()) fail("unexpected end");
    return s_[i_];
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++i_;
  }
  bool literal(std::string_view w) {
    if (s_.substr(i_, w.size()) == w) {
      i_ += w.size();
      return true;
    }
    return false;
  }

  Value parse_value(int depth) {
    if (depth > 512) fail("nesting too deep");
    Value v;
    const char c = peek();
    if (c == '{') {
      v.type = Value::Type::Object;
      ++i_;
      if (peek() == '}') {
        ++i_;
        return v;
      }
      for (;;) {
        if (peek() != '"') fail("expected a key");
        std::string key = parse_string();
        expect(':');
        v.object.emplace_back(std::move(key), parse_value(depth + 1));
        const char d = peek();
        ++i_;
        if (d == '}') break;
        if (d != ',') fail("expected ',' or '}'");
      }
    } else if (c == '[') {
      v.type = Value::Type::Array;
      ++i_;
      if (peek() == ']') {
        ++i_;
        return v;
      }
      for (;;) {
        v.array.push_back(parse_value(depth + 1));
        const char d = peek();
        ++i_;
        if (d == ']') break;
        if (d != ',') fail("expected ',' or ']'");
      }
    } else if (c == '"') {
      v.type = Value::Type::String;
      v.str = parse_string();
    } else if (literal("true")) {
      v.type = Value::Type::Bool;
      v.boolean = true;
    } else if (literal("false")) {
      v.type = Value::Type::Bool;
      v.boolean = false;
    } else if (literal("null")) {
      v.type = Value::Type::Null;
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      parse_number(v);
    } else if (literal("NaN")) {  // Python's json.dumps writes these
      v.type = Value::Type::Number;
      v.number = NAN;
    } else if (literal("Infinity")) {
      v.type = Value::Type::Number;
      v.number = INFINITY;
    } else if (literal("-Infinity")) {
      v.type = Value::Type::Number;
      v.number = -INFINITY;
    } else {
      fail("unexpected character");
    }
    return v;
  }

  void parse_number(Value& v) {
    const size_t start = i_;
    if (s_.substr(i_, 9) == "-Infinity") {
      i_ += 9;
      v.type = Value::Type::Number;
      v.number = -INFINITY;
      return;
    }
    if (s_[i_] == '-') ++i_;
    bool integral = true;
    while (i_ < s_.size()) {
      const char c = s_[i_];
      if (c >= '0' && c <= '9') {
        ++i_;
      } else if (c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-') {
        integral = false;
        ++i_;
      } else {
        break;
      }
    }
    const std::string text(s_.substr(start, i_ - start));
    v.type = Value::Type::Number;
    char* end = nullptr;
    v.number = std::strtod(text.c_str(), &end);
    if (end != text.c_str() + text.size() || text == "-") fail("bad number");
    if (integral) {
      int64_t x = 0;
      const auto r = std::from_chars(text.data(), text.data() + text.size(), x);
      if (r.ec == std::errc() && r.ptr == text.data() + text.size()) {
        v.is_int = true;
        v.integer = x;
      }
    }
  }

  static void put_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out.push_back(char(cp));
    } else if (cp < 0x800) {
      out.push_back(char(0xC0 | (cp >> 6)));
      out.push_back(char(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      out.push_back(char(0xE0 | (cp >> 12)));
      out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
      out.push_back(char(0x80 | (cp & 0x3F)));
    } else {
      out.push_back(char(0xF0 | (cp >> 18)));
      out.push_back(char(0x80 | ((cp >> 12) & 0x3F)));
      out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
      out.push_back(char(0x80 | (cp & 0x3F)));
    }
  }

  uint32_t hex4() {
    if (i_ + 4 > s_.size()) fail("short \\u escape");
    uint32_t x = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = s_[i_++];
      x <<= 4;
      if (c >= '0' && c <= '9') x |= uint32_t(c - '0');
      else if (c >= 'a' && c <= 'f') x |= uint32_t(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') x |= uint32_t(c - 'A' + 10);
      else fail("bad hex digit in \\u escape");
    }
    return x;
  }

  std::string parse_string() {
    expect('"');
    std::string out;
    for (;;) {
      if (i_ >= s_.size()) fail("unterminated string");
      const char c = s_[i_++];
      if (c == '"') break;
      if (c != '\\') {
        out.push_back(c);
        continue;
      }
      if (i_ >= s_.size()) fail("unterminated escape");
      const char e = s_[i_++];
      switch (e) {
        case '"': out.push_back('"'); break;
        case '\\': out.push_back('\\'); break;
        case '/': out.push_back('/'); break;
        case 'b': out.push_back('\b'); break;
        case 'f': out.push_back('\f'); break;
        case 'n': out.push_back('\n'); break;
        case 'r': out.push_back('\r'); break;
        case 't': out.push_back('\t'); break;
        case 'u': {
          uint32_t cp = hex4();
          if (cp >= 0xD800 && cp <= 0xDBFF && s_.substr(i_, 2) == "\\u") {
            const size_t save = i_;
            i_ += 2;
            const uint32_t lo = hex4();
            if (lo >= 0xDC00 && lo <= 0xDFFF)
              cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            else
              i_ = save;  // lone high surrogate; the next escape stands alone
          }
          put_utf8(out, cp);
          break;
        }
        default: fail(std::string("bad escape \\") + e);
      }
    }
    return out;
  }

  std::string_view s_;
  size_t i_ = 0;
};

}  // namespace detail

inline Value parse(std::string_view text) { return detail::Parser(text).parse_document(); }

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// One value per non-blank line (JSON Lines).
inline std::vector<Value> parse_lines(std::string_view text) {
  std::vector<Value> out;
  size_t start = 0;
  size_t line = 1;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view l = text.substr(start, end - start);
    if (l.find_first_not_of(" \t\r") != std::string_view::npos) {
      try {
        out.push_back(parse(l));
      } catch (const std::runtime_error& e) {
        throw std::runtime_error("line " + std::to_string(line) + ": " + e.what());
      }
    }
    start = end + 1;
    ++line;
  }
  return out;
}

inline std::vector<Value> read_jsonl(const std::string& path) { return parse_lines(read_file(path)); }

}  // namespace weir::test::json
