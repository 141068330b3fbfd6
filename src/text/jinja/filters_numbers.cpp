// The number filters: int, float and round, with Python's parsing of
// numbers in strings and its rounding (ties to even, correctly rounded).
#include "text/jinja/filters.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "text/jinja/pystr.h"

namespace weir::jinja::filters {

namespace {

// Python's int(str, base).
std::optional<int64_t> parse_int(std::string_view text, int base) {
  const std::string s = pystr::strip(text, std::nullopt, true, true);
  size_t i = 0;
  bool negative = false;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) negative = s[i++] == '-';
  auto has_prefix = [&](char p) { return i + 1 < s.size() && s[i] == '0' && (s[i + 1] | 0x20) == p; };
  if (base == 0) {
    base = has_prefix('x') ? 16 : has_prefix('o') ? 8 : has_prefix('b') ? 2 : 10;
    if (base == 10 && i + 1 < s.size() && s[i] == '0' && s.find_first_not_of("0_", i) != std::string::npos)
      return std::nullopt;
  }
  const bool prefixed = (base == 16 && has_prefix('x')) || (base == 8 && has_prefix('o')) || (base == 2 && has_prefix('b'));
  if (prefixed) {
    i += 2;
    if (i < s.size() && s[i] == '_') ++i;
  }
  std::string digits;
  bool last_underscore = true;
  for (; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '_') {
      if (last_underscore) return std::nullopt;
      last_underscore = true;
      continue;
    }
    int d = c >= '0' && c <= '9' ? c - '0' : (c | 0x20) >= 'a' && (c | 0x20) <= 'z' ? (c | 0x20) - 'a' + 10 : 99;
    if (d >= base) return std::nullopt;
    digits.push_back(c);
    last_underscore = false;
  }
  if (digits.empty() || last_underscore) return std::nullopt;
  errno = 0;
  const unsigned long long u = std::strtoull(digits.c_str(), nullptr, base);
  if (errno == ERANGE || u > static_cast<unsigned long long>(INT64_MAX) + (negative ? 1 : 0))
    throw EvalError("int: " + std::string(text) + " does not fit 64 bits (unsupported)");
  return negative ? static_cast<int64_t>(0 - u) : static_cast<int64_t>(u);
}

// Python's float(str).
std::optional<double> parse_float(std::string_view text) {
  std::string s = pystr::strip(text, std::nullopt, true, true);
  std::string lower = s;
  for (char& c : lower) c = static_cast<char>(c | (c >= 'A' && c <= 'Z' ? 0x20 : 0));
  std::string_view body = lower;
  const bool negative = !body.empty() && body[0] == '-';
  if (!body.empty() && (body[0] == '+' || body[0] == '-')) body.remove_prefix(1);
  if (body == "inf" || body == "infinity") return negative ? -INFINITY : INFINITY;
  if (body == "nan") return NAN;
  // digits [. digits] [e [sign] digits], underscores only between digits.
  std::string clean;
  size_t i = 0;
  auto digit_run = [&] {
    size_t n = 0;
    while (i < body.size()) {
      if (body[i] >= '0' && body[i] <= '9') {
        clean.push_back(body[i++]);
        ++n;
      } else if (body[i] == '_' && n > 0 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '9') {
        ++i;
      } else {
        break;
      }
    }
    return n;
  };
  size_t mantissa = digit_run();
  if (i < body.size() && body[i] == '.') {
    clean.push_back('.');
    ++i;
    mantissa += digit_run();
  }
  if (mantissa == 0) return std::nullopt;
  if (i < body.size() && body[i] == 'e') {
    clean.push_back('e');
    ++i;
    if (i < body.size() && (body[i] == '+' || body[i] == '-')) clean.push_back(body[i++]);
    if (digit_run() == 0) return std::nullopt;
  }
  if (i != body.size()) return std::nullopt;
  const double d = std::strtod(clean.c_str(), nullptr);
  return negative ? -d : d;
}

// Python's round(x, ndigits) for a float: correctly rounded, ties to even.
double round_float(double x, int64_t ndigits) {
  if (!std::isfinite(x) || ndigits > 300) return x;
  if (ndigits < 0) throw EvalError("round: negative precision on a float is not supported");
  std::vector<char> buf(static_cast<size_t>(ndigits) + 400);
  std::snprintf(buf.data(), buf.size(), "%.*f", static_cast<int>(ndigits), x);
  return std::strtod(buf.data(), nullptr);
}

}  // namespace

Value do_round(const Value& v, const CallArgs& args) {
  ArgBinder b("round", args, {{"precision", Value(0)}, {"method", Value("common")}});
  const Value& method = b[1];
  if (!method.is_string() || (method.text() != "common" && method.text() != "ceil" && method.text() != "floor"))
    throw EvalError("method must be common, ceil or floor");
  const int64_t precision = int_param(b[0], "round");
  if (!v.is_number()) {
    if (v.is_undefined()) throw EvalError("type Undefined doesn't define __round__ method");
    throw EvalError(std::string("type ") + v.type_name() + " doesn't define __round__ method");
  }
  if (method.text() == "common") {
    if (v.is_float()) return Value(round_float(v.number(), precision));
    if (precision >= 0) return Value(v.integer());
    // Python rounds an int to tens, hundreds, ... with ties to even.
    if (precision < -18) return Value(0);
    int64_t p = 1;
    for (int64_t k = 0; k < -precision; ++k) p *= 10;
    const int64_t x = v.integer();
    int64_t q = x / p, r = x % p;
    if (r < 0) r += p, q -= 1;
    if (2 * r > p || (2 * r == p && (q & 1))) q += 1;
    int64_t out;
    if (__builtin_mul_overflow(q, p, &out)) throw EvalError("round: the result does not fit 64 bits (unsupported)");
    return Value(out);
  }
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double scaled = v.number() * scale;
  const double r = method.text() == "ceil" ? std::ceil(scaled) : std::floor(scaled);
  return Value(r / scale);
}

Value do_int(const Value& v, const CallArgs& args) {
  ArgBinder b("int", args, {{"default", Value(0)}, {"base", Value(10)}});
  if (v.is_undefined()) throw EvalError(v.undefined_hint());
  if (v.is_int() || v.is_bool()) return Value(v.integer());
  if (v.is_float()) {
    const double f = v.number();
    if (!std::isfinite(f)) return b[0];
    if (std::fabs(f) >= 9.2e18) throw EvalError("int: the value does not fit 64 bits (unsupported)");
    return Value(static_cast<int64_t>(std::trunc(f)));
  }
  if (v.is_string()) {
    const int64_t base = int_param(b[1], "int");
    if (auto i = parse_int(v.text(), static_cast<int>(base))) return Value(*i);
    if (auto f = parse_float(v.text())) {
      if (!std::isfinite(*f)) return b[0];
      if (std::fabs(*f) >= 9.2e18) throw EvalError("int: the value does not fit 64 bits (unsupported)");
      return Value(static_cast<int64_t>(std::trunc(*f)));
    }
  }
  return b[0];
}

Value do_float(const Value& v, const CallArgs& args) {
  ArgBinder b("float", args, {{"default", Value(0.0)}});
  if (v.is_undefined()) throw EvalError(v.undefined_hint());
  if (v.is_number()) return Value(v.number());
  if (v.is_string())
    if (auto f = parse_float(v.text())) return Value(*f);
  return b[0];
}

}  // namespace weir::jinja::filters
