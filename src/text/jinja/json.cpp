// JSON text to template values (how callers pass messages and tools), and
// values to JSON text as Python's json.dumps writes it (the tojson filter).
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/error.h"
#include "text/jinja/builtins.h"
#include "text/jinja/position.h"
#include "text/jinja/template.h"
#include "text/jinja/unicode.h"
#include "text/jinja/work.h"
#include "text/utf8_streamer.h"

namespace weir::jinja {

namespace {

class JsonReader {
 public:
  explicit JsonReader(std::string_view s) : s_(s) {}

  Value document() {
    Value v = value(0);
    skip_ws();
    if (i_ != s_.size()) fail("unexpected text after the JSON value");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    const Pos p = LineMap(s_).at(i_);
    throw Error("JSON: " + what + " at line " + std::to_string(p.line) + ":" + std::to_string(p.col) +
                " (byte " + std::to_string(i_) + ")");
  }
  void skip_ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }
  bool literal(std::string_view word) {
    if (s_.substr(i_, word.size()) != word) return false;
    i_ += word.size();
    return true;
  }

  Value value(int depth) {
    if (depth > 512) fail("nesting deeper than 512");
    skip_ws();
    if (i_ >= s_.size()) fail("unexpected end of text, expected a value");
    const char c = s_[i_];
    if (c == '{') return object(depth);
    if (c == '[') return array(depth);
    if (c == '"') return Value(string());
    if (literal("true")) return Value(true);
    if (literal("false")) return Value(false);
    if (literal("null")) return Value::none();
    if (c == '-' || (c >= '0' && c <= '9')) return number();
    fail(std::string("unexpected character '") + c + "'");
  }

  Value object(int depth) {
    ++i_;
    Dict d;
    skip_ws();
    if (i_ < s_.size() && s_[i_] == '}') {
      ++i_;
      return Value::dict(std::move(d));
    }
    for (;;) {
      skip_ws();
      if (i_ >= s_.size() || s_[i_] != '"') fail("expected a string key");
      std::string key = string();
      skip_ws();
      if (i_ >= s_.size() || s_[i_] != ':') fail("expected ':'");
      ++i_;
      d.set(Value(std::move(key)), value(depth + 1));
      skip_ws();
      if (i_ < s_.size() && s_[i_] == ',') {
        ++i_;
        continue;
      }
      if (i_ < s_.size() && s_[i_] == '}') {
        ++i_;
        return Value::dict(std::move(d));
      }
      fail("expected ',' or '}'");
    }
  }

  Value array(int depth) {
    ++i_;
    std::vector<Value> items;
    skip_ws();
    if (i_ < s_.size() && s_[i_] == ']') {
      ++i_;
      return Value::list(std::move(items));
    }
    for (;;) {
      items.push_back(value(depth + 1));
      skip_ws();
      if (i_ < s_.size() && s_[i_] == ',') {
        ++i_;
        continue;
      }
      if (i_ < s_.size() && s_[i_] == ']') {
        ++i_;
        return Value::list(std::move(items));
      }
      fail("expected ',' or ']'");
    }
  }

  uint32_t hex4() {
    if (i_ + 4 > s_.size()) fail("truncated \\u escape");
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = s_[i_++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= static_cast<uint32_t>(c - '0');
      else if (c >= 'a' && c <= 'f') v |= static_cast<uint32_t>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') v |= static_cast<uint32_t>(c - 'A' + 10);
      else fail("bad \\u escape");
    }
    return v;
  }

  std::string string() {
    ++i_;
    std::string out;
    for (;;) {
      if (i_ >= s_.size()) fail("unterminated string");
      const char c = s_[i_];
      if (c == '"') {
        ++i_;
        break;
      }
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in a string");
      if (c != '\\') {
        out.push_back(c);
        ++i_;
        continue;
      }
      if (++i_ >= s_.size()) fail("unterminated string");
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
          if (cp >= 0xd800 && cp < 0xdc00) {
            if (s_.substr(i_, 2) != "\\u") fail("lone surrogate in a \\u escape");
            i_ += 2;
            const uint32_t lo = hex4();
            if (lo < 0xdc00 || lo >= 0xe000) fail("bad surrogate pair in a \\u escape");
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
          } else if (cp >= 0xdc00 && cp < 0xe000) {
            fail("lone surrogate in a \\u escape");
          }
          utf8_append(out, cp);
          break;
        }
        default: fail(std::string("bad escape '\\") + e + "'");
      }
    }
    if (!is_valid_utf8(out)) fail("string is not valid UTF-8");
    return out;
  }

  Value number() {
    const size_t start = i_;
    if (s_[i_] == '-') ++i_;
    auto digits = [&] {
      const size_t d = i_;
      while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
      if (i_ == d) fail("bad number");
    };
    if (i_ < s_.size() && s_[i_] == '0') ++i_;
    else digits();
    bool is_float = false;
    if (i_ < s_.size() && s_[i_] == '.') {
      ++i_;
      digits();
      is_float = true;
    }
    if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
      ++i_;
      if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
      digits();
      is_float = true;
    }
    const std::string text(s_.substr(start, i_ - start));
    if (is_float) return Value(std::strtod(text.c_str(), nullptr));
    int64_t v = 0;
    const auto r = std::from_chars(text.data(), text.data() + text.size(), v);
    if (r.ec != std::errc()) {
      i_ = start;
      fail("integer " + text + " does not fit 64 bits");
    }
    return Value(v);
  }

  std::string_view s_;
  size_t i_ = 0;
};

// --- writing ---------------------------------------------------------------

void write_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out.push_back('"');
  for (size_t i = 0; i < s.size();) {
    check_built(out);
    const char32_t c = utf8_next(s, i);
    char buf[16];
    switch (c) {
      case '"': out += "\\\""; continue;
      case '\\': out += "\\\\"; continue;
      case '\n': out += "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      case '\b': out += "\\b"; continue;
      case '\f': out += "\\f"; continue;
      default: break;
    }
    if (c >= 0xdc80 && c <= 0xdcff) {
      throw EvalError("tojson: a string that is not valid UTF-8");
    } else if (c >= 0x20 && (c < 0x7f || !ensure_ascii)) {
      utf8_append(out, c);
    } else if (c < 0x10000) {
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
      out += buf;
    } else {
      const uint32_t v = c - 0x10000;
      std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", 0xd800 + (v >> 10), 0xdc00 + (v & 0x3ff));
      out += buf;
    }
  }
  out.push_back('"');
}

std::string key_text(const Value& k) {
  if (k.is_string()) return k.text();
  if (k.is_bool()) return k.boolean() ? "true" : "false";
  if (k.is_none()) return "null";
  if (k.is_int()) return std::to_string(k.integer());
  if (k.is_float()) {
    const double f = k.number();
    if (std::isnan(f)) return "NaN";
    if (std::isinf(f)) return f < 0 ? "-Infinity" : "Infinity";
    return float_repr(f);
  }
  throw EvalError(std::string("keys must be str, int, float, bool or None, not ") + k.type_name());
}

void write(std::string& out, const Value& v, bool sort_keys, int indent, int level, bool ensure_ascii) {
  std::string newline, close;  // before each item, and before the closing bracket
  if (indent >= 0) {
    will_build(uint64_t(indent) * uint64_t(level + 1) + 1);
    newline.assign(static_cast<size_t>(indent) * static_cast<size_t>(level + 1) + 1, ' ');
    close.assign(static_cast<size_t>(indent) * static_cast<size_t>(level) + 1, ' ');
    newline[0] = close[0] = '\n';
  }
  const char* sep = indent >= 0 ? "," : ", ";
  switch (v.kind()) {
    case Kind::None: out += "null"; return;
    case Kind::Bool: out += v.boolean() ? "true" : "false"; return;
    case Kind::Int: out += std::to_string(v.integer()); return;
    case Kind::Float: {
      const double f = v.number();
      if (std::isnan(f)) out += "NaN";
      else if (std::isinf(f)) out += f < 0 ? "-Infinity" : "Infinity";
      else out += float_repr(f);
      return;
    }
    case Kind::String: write_string(out, v.text(), ensure_ascii); return;
    case Kind::Sequence:
      if (v.is_seq(SeqKind::List) || v.is_seq(SeqKind::Tuple)) {
        const auto& items = v.seq().items;
        if (items.empty()) {
          out += "[]";
          return;
        }
        out += "[";
        for (size_t i = 0; i < items.size(); ++i) {
          out += i ? sep + newline : newline;
          write(out, items[i], sort_keys, indent, level + 1, ensure_ascii);
          check_built(out);
        }
        out += close + "]";
        return;
      }
      break;
    case Kind::Dict: {
      std::vector<const std::pair<Value, Value>*> items;
      for (const auto& kv : v.dict()) items.push_back(&kv);
      if (items.empty()) {
        out += "{}";
        return;
      }
      if (sort_keys)
        std::stable_sort(items.begin(), items.end(), [](auto* x, auto* y) { return compare(x->first, y->first) < 0; });
      out += "{";
      for (size_t i = 0; i < items.size(); ++i) {
        out += i ? sep + newline : newline;
        write_string(out, key_text(items[i]->first), ensure_ascii);
        out += ": ";
        write(out, items[i]->second, sort_keys, indent, level + 1, ensure_ascii);
        check_built(out);
      }
      out += close + "}";
      return;
    }
    default: break;
  }
  throw EvalError(std::string("Object of type ") + v.type_name() + " is not JSON serializable");
}

}  // namespace

Value value_from_json(std::string_view json) { return JsonReader(json).document(); }

std::string to_json(const Value& v, bool sort_keys, int indent, bool ensure_ascii) {
  std::string out;
  write(out, v, sort_keys, indent, 0, ensure_ascii);
  charge_work(out.size());
  return out;
}

}  // namespace weir::jinja
