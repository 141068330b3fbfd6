#include "text/jinja/str_format.h"

#include <cmath>
#include <cstdio>
#include <optional>
#include <string>

#include "text/jinja/builtins.h"
#include "text/jinja/operators.h"
#include "text/jinja/unicode.h"

namespace weir::jinja {
namespace {

struct Spec {
  std::string fill = " ";
  char align = 0;  // '<', '>', '^', '=' or 0 (the type's default)
  char sign = 0;   // '+', '-', ' ' or 0
  bool alternate = false, zero = false;
  int64_t width = -1;
  char grouping = 0;  // ',' or '_'
  int64_t precision = -1;
  char type = 0;
};

size_t code_points(const std::string& s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

// The length in bytes of the UTF-8 character at s[i].
size_t char_len(const std::string& s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  const size_t n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
  return std::min(n, s.size() - i);
}

Spec parse_spec(const std::string& s) {
  Spec p;
  size_t i = 0;
  auto is_align = [](char c) { return c == '<' || c == '>' || c == '^' || c == '='; };
  if (!s.empty()) {
    const size_t first = char_len(s, 0);
    if (first < s.size() && is_align(s[first])) {
      p.fill = s.substr(0, first), p.align = s[first], i = first + 1;
    } else if (is_align(s[0])) {
      p.align = s[0], i = 1;
    }
  }
  if (i < s.size() && (s[i] == '+' || s[i] == '-' || s[i] == ' ')) p.sign = s[i++];
  if (i < s.size() && s[i] == '#') p.alternate = true, ++i;
  if (i < s.size() && s[i] == '0') p.zero = true, ++i;
  auto digits = [&](int64_t* out) {
    const size_t b = i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
    if (i > b) {
      if (i - b > 9) throw EvalError("Too many decimal digits in format string");
      *out = std::stoll(s.substr(b, i - b));
    }
    return i > b;
  };
  digits(&p.width);
  if (i < s.size() && (s[i] == ',' || s[i] == '_')) p.grouping = s[i++];
  if (i < s.size() && s[i] == '.') {
    ++i;
    if (!digits(&p.precision)) throw EvalError("Format specifier missing precision");
  }
  if (i < s.size()) p.type = s[i++];
  if (i < s.size()) throw EvalError("Invalid format specifier '" + s + "' for object of type 'str'");
  if (p.zero && !p.align) p.fill = "0", p.align = '=';
  return p;
}

std::string pad(const std::string& body, const Spec& p, char default_align, size_t sign_len = 0) {
  const size_t n = code_points(body);
  if (p.width < 0 || int64_t(n) >= p.width) return body;
  const size_t gap = size_t(p.width) - n;
  std::string fill;
  for (size_t k = 0; k < gap; ++k) fill += p.fill;
  const char a = p.align ? p.align : default_align;
  if (a == '<') return body + fill;
  if (a == '>') return fill + body;
  if (a == '=') return body.substr(0, sign_len) + fill + body.substr(sign_len);
  std::string left, right;  // '^': the extra fill on the right
  for (size_t k = 0; k < gap / 2; ++k) left += p.fill;
  for (size_t k = 0; k < gap - gap / 2; ++k) right += p.fill;
  return left + body + right;
}

// Digits grouped by threes (or fours for b, o, x) with sep.
std::string grouped(const std::string& digits, char sep, size_t every) {
  if (!sep) return digits;
  std::string out;
  const size_t n = digits.size();
  for (size_t k = 0; k < n; ++k) {
    if (k && (n - k) % every == 0) out += sep;
    out += digits[k];
  }
  return out;
}

std::string with_sign(bool negative, const Spec& p, const std::string& body) {
  if (negative) return "-" + body;
  if (p.sign == '+') return "+" + body;
  if (p.sign == ' ') return " " + body;
  return body;
}

std::string format_string(const std::string& s, const Spec& p) {
  if (p.type && p.type != 's') throw EvalError(std::string("Unknown format code '") + p.type + "' for object of type 'str'");
  if (p.sign) throw EvalError("Sign not allowed in string format specifier");
  if (p.alternate) throw EvalError("Alternate form (#) not allowed in string format specifier");
  if (p.align == '=') throw EvalError("'=' alignment not allowed in string format specifier");
  if (p.grouping) throw EvalError(std::string("Cannot specify '") + p.grouping + "' with 's'.");
  std::string body = s;
  if (p.precision >= 0) {
    size_t i = 0;
    for (int64_t k = 0; k < p.precision && i < body.size(); ++k) i += char_len(body, i);
    body.resize(i);
  }
  return pad(body, p, '<');
}

std::string format_float(double x, const Spec& p);

std::string format_int(int64_t v, const Spec& p) {
  char t = p.type ? p.type : 'd';
  if (t == 'e' || t == 'E' || t == 'f' || t == 'F' || t == 'g' || t == 'G' || t == '%') return format_float(double(v), p);
  if (p.precision >= 0) throw EvalError("Precision not allowed in integer format specifier");
  const bool negative = v < 0;
  const uint64_t m = negative ? uint64_t(0) - uint64_t(v) : uint64_t(v);
  std::string digits, prefix;
  size_t every = 3;
  switch (t) {
    case 'd':
    case 'n': digits = std::to_string(m); break;
    case 'b':
    case 'o':
    case 'x':
    case 'X': {
      const unsigned base = t == 'b' ? 2 : t == 'o' ? 8 : 16;
      const char* alphabet = t == 'X' ? "0123456789ABCDEF" : "0123456789abcdef";
      uint64_t r = m;
      do digits.insert(digits.begin(), alphabet[r % base]), r /= base;
      while (r);
      if (p.alternate) prefix = t == 'b' ? "0b" : t == 'o' ? "0o" : t == 'x' ? "0x" : "0X";
      every = 4;
      break;
    }
    case 'c': {
      if (p.sign) throw EvalError("Sign not allowed with integer format specifier 'c'");
      if (v < 0 || v > 0x10FFFF) throw EvalError("%c arg not in range(0x110000)");
      return pad(utf8_encode({char32_t(v)}), p, '<');
    }
    default: throw EvalError(std::string("Unknown format code '") + t + "' for object of type 'int'");
  }
  if (p.grouping == ',' && every == 4) throw EvalError(std::string("Cannot specify ',' with '") + t + "'.");
  const std::string signed_body = with_sign(negative, p, prefix + grouped(digits, p.grouping, every));
  const size_t sign_len = (signed_body.size() - digits.size()) - (grouped(digits, p.grouping, every).size() - digits.size());
  return pad(signed_body, p, '>', sign_len);
}

std::string format_float(double x, const Spec& p) {
  char t = p.type;
  const bool negative = std::signbit(x) && !std::isnan(x);
  const double a = std::fabs(x);
  std::string body;
  if (std::isnan(x) || std::isinf(x)) {
    const bool upper = t == 'E' || t == 'F' || t == 'G';
    body = std::isnan(x) ? (upper ? "NAN" : "nan") : (upper ? "INF" : "inf");
    if (t == '%') body += "%";
  } else if (!t && p.precision < 0) {
    body = float_repr(a);
  } else {
    const int64_t prec = p.precision < 0 ? 6 : p.precision;
    char buf[512];
    if (t == '%') {
      std::snprintf(buf, sizeof buf, "%.*f", int(prec), a * 100.0);
      body = std::string(buf) + "%";
    } else if (!t || t == 'n') {
      std::snprintf(buf, sizeof buf, "%.*g", int(prec == 0 ? 1 : prec), a);
      body = buf;
      if (!t && body.find_first_of(".e") == std::string::npos) body += ".0";
    } else if (t == 'e' || t == 'E' || t == 'f' || t == 'F' || t == 'g' || t == 'G') {
      const char f[] = {'%', '.', '*', t, 0};
      std::snprintf(buf, sizeof buf, f, int(t == 'g' || t == 'G' ? (prec == 0 ? 1 : prec) : prec), a);
      body = buf;
      if (p.alternate && body.find('.') == std::string::npos && (t == 'f' || t == 'F')) body += ".";
    } else {
      throw EvalError(std::string("Unknown format code '") + t + "' for object of type 'float'");
    }
  }
  if (p.grouping) {
    const size_t end = body.find_first_not_of("0123456789");
    body = grouped(body.substr(0, end == std::string::npos ? body.size() : end), p.grouping, 3) +
           (end == std::string::npos ? "" : body.substr(end));
  }
  const std::string signed_body = with_sign(negative, p, body);
  return pad(signed_body, p, '>', signed_body.size() - body.size());
}

// format(value, spec) for one field.
std::string format_value(const Value& v, const std::string& spec_text) {
  if (spec_text.empty()) return v.str();
  const Spec p = parse_spec(spec_text);
  if (v.is_string()) return format_string(v.text(), p);
  if (v.is_int() || v.is_bool()) return format_int(v.integer(), p);
  if (v.is_float()) {
    if (p.type == 'd' || p.type == 'b' || p.type == 'o' || p.type == 'x' || p.type == 'X' || p.type == 'c')
      throw EvalError(std::string("Unknown format code '") + p.type + "' for object of type 'float'");
    return format_float(v.number(), p);
  }
  throw EvalError("unsupported format string passed to " + std::string(v.type_name()) + ".__format__");
}

// The value a field name names: an argument, then .attr and [key] steps.
Value field_value(const std::string& name, const CallArgs& args, size_t* next_auto, int* numbering) {
  size_t i = 0;
  while (i < name.size() && name[i] != '.' && name[i] != '[') ++i;
  const std::string first = name.substr(0, i);
  Value v;
  const bool is_index = !first.empty() && first.find_first_not_of("0123456789") == std::string::npos;
  if (first.empty()) {
    if (*numbering == 2) throw EvalError("cannot switch from manual field specification to automatic field numbering");
    *numbering = 1;
    const size_t k = (*next_auto)++;
    if (k >= args.positional.size())
      throw EvalError("Replacement index " + std::to_string(k) + " out of range for positional args tuple");
    v = args.positional[k];
  } else if (is_index) {
    if (*numbering == 1) throw EvalError("cannot switch from automatic field numbering to manual field specification");
    *numbering = 2;
    const size_t k = std::stoull(first);
    if (k >= args.positional.size())
      throw EvalError("Replacement index " + std::to_string(k) + " out of range for positional args tuple");
    v = args.positional[k];
  } else {
    bool found = false;
    for (const auto& [key, val] : args.keyword)
      if (key == first) v = val, found = true;
    if (!found) throw EvalError("'" + first + "'");
  }
  while (i < name.size()) {
    if (name[i] == '.') {
      size_t e = i + 1;
      while (e < name.size() && name[e] != '.' && name[e] != '[') ++e;
      if (e == i + 1) throw EvalError("Empty attribute in format string");
      v = get_python_attribute(v, name.substr(i + 1, e - i - 1));
      if (v.is_undefined()) throw EvalError(v.undefined_hint());
      i = e;
    } else {
      const size_t close = name.find(']', i);
      if (close == std::string::npos) throw EvalError("Missing ']' in format string");
      const std::string key = name.substr(i + 1, close - i - 1);
      if (key.empty()) throw EvalError("Empty attribute in format string");
      const bool digits = key.find_first_not_of("0123456789") == std::string::npos;
      v = get_item(v, digits ? Value(int64_t(std::stoll(key))) : Value(key));
      if (v.is_undefined()) throw EvalError(digits ? "list index out of range" : "'" + key + "'");
      i = close + 1;
      if (i < name.size() && name[i] != '.' && name[i] != '[')
        throw EvalError("Only '.' or '[' may follow ']' in format field specifier");
    }
  }
  return v;
}

}  // namespace

Value str_format(const Value& self, const CallArgs& raw_args) {
  const std::string& f = self.text();
  const bool markup = self.is_markup();
  CallArgs args = raw_args;
  if (markup) {  // Markup.format escapes its arguments
    for (Value& v : args.positional) v = Value::markup(escape_unless_markup(v));
    for (auto& kv : args.keyword) kv.second = Value::markup(escape_unless_markup(kv.second));
  }
  std::string out;
  size_t next_auto = 0;
  int numbering = 0;  // 1: automatic, 2: manual
  for (size_t i = 0; i < f.size();) {
    const char c = f[i];
    if (c == '}') {
      if (i + 1 < f.size() && f[i + 1] == '}') {
        out += '}', i += 2;
        continue;
      }
      throw EvalError("Single '}' encountered in format string");
    }
    if (c != '{') {
      out += c, ++i;
      continue;
    }
    if (i + 1 < f.size() && f[i + 1] == '{') {
      out += '{', i += 2;
      continue;
    }
    // A field: up to the matching '}' (a spec may hold one level of nested fields).
    size_t j = i + 1;
    int depth = 1;
    while (j < f.size() && depth > 0) {
      if (f[j] == '{') ++depth;
      else if (f[j] == '}') --depth;
      if (depth > 0) ++j;
    }
    if (j >= f.size()) throw EvalError(i + 1 >= f.size() ? "Single '{' encountered in format string"
                                                         : "expected '}' before end of string");
    const std::string field = f.substr(i + 1, j - i - 1);
    i = j + 1;
    // name [!conversion] [:spec]; the name ends at the first ! or : outside brackets.
    size_t k = 0;
    for (bool in_bracket = false; k < field.size(); ++k) {
      if (field[k] == '[') in_bracket = true;
      else if (field[k] == ']') in_bracket = false;
      else if (!in_bracket && (field[k] == '!' || field[k] == ':')) break;
    }
    const std::string name = field.substr(0, k);
    char conversion = 0;
    std::string spec;
    if (k < field.size() && field[k] == '!') {
      if (k + 1 >= field.size()) throw EvalError("end of string while looking for conversion specifier");
      if (k + 2 < field.size() && field[k + 2] != ':') throw EvalError("expected ':' after conversion specifier");
      conversion = field[k + 1];
      k += 2;
    }
    if (k < field.size() && field[k] == ':') spec = field.substr(k + 1);
    // Nested fields in the spec ({:{width}}).
    if (spec.find('{') != std::string::npos) {
      std::string expanded;
      for (size_t s = 0; s < spec.size();) {
        if (spec[s] == '{') {
          const size_t e = spec.find('}', s);
          if (e == std::string::npos) throw EvalError("unmatched '{' in format spec");
          expanded += field_value(spec.substr(s + 1, e - s - 1), args, &next_auto, &numbering).str();
          s = e + 1;
        } else {
          expanded += spec[s++];
        }
      }
      spec = expanded;
    }
    Value v = field_value(name, args, &next_auto, &numbering);
    if (conversion == 's') v = Value(v.str());
    else if (conversion == 'r' || conversion == 'a') v = Value(v.repr());
    else if (conversion) throw EvalError(std::string("Unknown conversion specifier ") + conversion);
    out += format_value(v, spec);
  }
  return markup ? Value::markup(std::move(out)) : Value(std::move(out));
}

}  // namespace weir::jinja
