#include "text/jinja/operators.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "text/jinja/unicode.h"
#include "text/jinja/work.h"

namespace weir::jinja {

namespace {

[[noreturn]] void unsupported_operands(std::string_view op, const Value& a, const Value& b) {
  if (a.is_undefined()) throw EvalError(a.undefined_hint());
  if (b.is_undefined()) throw EvalError(b.undefined_hint());
  throw EvalError("unsupported operand type(s) for " + std::string(op) + ": '" + a.type_name() + "' and '" +
                  b.type_name() + "'");
}

[[noreturn]] void overflow() {
  throw EvalError("integer result does not fit 64 bits (Python's ints are unbounded; unsupported here)");
}

bool is_integral(const Value& v) { return v.is_int() || v.is_bool(); }

// The result's size is checked before it is built.
Value repeat(const Value& seq, int64_t n) {
  const uint64_t unit = seq.is_string() ? seq.text().size() : seq.seq().items.size();
  const uint64_t times = n > 0 ? static_cast<uint64_t>(n) : 0;
  const uint64_t total = unit && times > UINT64_MAX / unit ? UINT64_MAX : unit * times;
  if (seq.is_string()) will_build(total);
  else will_build_list(total);
  if (seq.is_string()) {
    std::string out;
    out.reserve(total);
    for (int64_t i = 0; i < n; ++i) out += seq.text();
    return seq.is_markup() ? Value::markup(std::move(out)) : Value(std::move(out));
  }
  std::vector<Value> out;
  out.reserve(total);
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.seq().items.begin(), seq.seq().items.end());
  return Value::list(std::move(out), seq.seq_kind());
}

bool repeatable(const Value& v) {
  return v.is_string() || v.is_seq(SeqKind::List) || v.is_seq(SeqKind::Tuple);
}

// CPython's float floor division and modulo.
void float_divmod(double x, double y, double* floordiv, double* mod) {
  if (y == 0) throw EvalError("float division by zero");
  double m = std::fmod(x, y);
  double div = (x - m) / y;
  if (m != 0) {
    if ((y < 0) != (m < 0)) {
      m += y;
      div -= 1.0;
    }
  } else {
    m = std::copysign(0.0, y);
  }
  double fd;
  if (div != 0) {
    fd = std::floor(div);
    if (div - fd > 0.5) fd += 1.0;
  } else {
    fd = std::copysign(0.0, x / y);
  }
  *floordiv = fd;
  *mod = m;
}

Value add(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (is_integral(a) && is_integral(b)) {
      int64_t r;
      if (__builtin_add_overflow(a.integer(), b.integer(), &r)) overflow();
      return Value(r);
    }
    return Value(a.number() + b.number());
  }
  if (a.is_string() && b.is_string()) {
    will_build(a.text().size() + b.text().size());
    if (a.is_markup() || b.is_markup()) {
      std::string out = escape_unless_markup(a);
      const std::string tail = escape_unless_markup(b);
      will_build(out.size() + tail.size());
      return Value::markup(out + tail);
    }
    return Value(a.text() + b.text());
  }
  if (a.is_sequence() && b.is_sequence() && a.seq_kind() == b.seq_kind() &&
      (a.seq_kind() == SeqKind::List || a.seq_kind() == SeqKind::Tuple)) {
    will_build_list(a.seq().items.size() + b.seq().items.size());
    std::vector<Value> out = a.seq().items;
    out.insert(out.end(), b.seq().items.begin(), b.seq().items.end());
    return Value::list(std::move(out), a.seq_kind());
  }
  if (a.is_undefined() || b.is_undefined()) unsupported_operands("+", a, b);
  if (a.is_markup() && !b.is_string()) unsupported_operands("+", a, b);
  if (a.is_string() || a.is_seq(SeqKind::List) || a.is_seq(SeqKind::Tuple)) {
    const char* kind = a.is_string() ? "str" : a.type_name();
    throw EvalError(std::string("can only concatenate ") + kind + " (not \"" + b.type_name() + "\") to " + kind);
  }
  unsupported_operands("+", a, b);
}

Value multiply(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (is_integral(a) && is_integral(b)) {
      int64_t r;
      if (__builtin_mul_overflow(a.integer(), b.integer(), &r)) overflow();
      return Value(r);
    }
    return Value(a.number() * b.number());
  }
  if (repeatable(a) && is_integral(b)) return repeat(a, b.integer());
  if (is_integral(a) && repeatable(b)) return repeat(b, a.integer());
  if ((repeatable(a) && b.is_number()) || (a.is_number() && repeatable(b)))
    throw EvalError(std::string("can't multiply sequence by non-int of type '") +
                    (a.is_number() ? a.type_name() : b.type_name()) + "'");
  unsupported_operands("*", a, b);
}

Value power(const Value& a, const Value& b) {
  if (!a.is_number() || !b.is_number()) unsupported_operands("** or pow()", a, b);
  if (is_integral(a) && is_integral(b) && b.integer() >= 0) {
    int64_t base = a.integer(), e = b.integer(), r = 1;
    while (e > 0) {
      if (e & 1)
        if (__builtin_mul_overflow(r, base, &r)) overflow();
      e >>= 1;
      if (e && __builtin_mul_overflow(base, base, &base)) overflow();
    }
    return Value(r);
  }
  const double x = a.number(), y = b.number();
  if (x == 0 && y < 0) throw EvalError("0.0 cannot be raised to a negative power");
  if (x < 0 && y != std::floor(y))
    throw EvalError("a negative number to a fractional power is complex in Python (unsupported)");
  const double r = std::pow(x, y);
  if (std::isinf(r) && std::isfinite(x) && std::isfinite(y)) throw EvalError("(34, 'Numerical result out of range')");
  return Value(r);
}

}  // namespace

std::string escape_unless_markup(const Value& v) {
  if (v.is_markup()) return v.text();
  return html_escape(v.str());
}

Value binary_op(std::string_view op, const Value& a, const Value& b) {
  if (op == "~") {
    // Strings as they are (shared, not copied); the rest printed first.
    const Value s = a.is_string() ? a : Value(a.str());
    const Value t = b.is_string() ? b : Value(b.str());
    will_build(s.text().size() + t.text().size());
    std::string out;
    out.reserve(s.text().size() + t.text().size());
    out += s.text();
    out += t.text();
    return Value(std::move(out));
  }
  if (op == "+") return add(a, b);
  if (op == "*") return multiply(a, b);
  if (op == "**") return power(a, b);
  if (op == "%" && a.is_string()) return percent_format(a, b);
  if (!a.is_number() || !b.is_number()) unsupported_operands(op, a, b);
  const bool ints = is_integral(a) && is_integral(b);
  if (op == "-") {
    if (ints) {
      int64_t r;
      if (__builtin_sub_overflow(a.integer(), b.integer(), &r)) overflow();
      return Value(r);
    }
    return Value(a.number() - b.number());
  }
  if (op == "/") {
    if (b.number() == 0) throw EvalError(ints ? "division by zero" : "float division by zero");
    return Value(a.number() / b.number());
  }
  if (op == "//" || op == "%") {
    if (ints) {
      const int64_t x = a.integer(), y = b.integer();
      if (y == 0) throw EvalError("integer division or modulo by zero");
      if (x == INT64_MIN && y == -1) overflow();
      int64_t q = x / y, r = x % y;
      if (r != 0 && ((r < 0) != (y < 0))) r += y, q -= 1;
      return Value(op == "//" ? q : r);
    }
    double fd, m;
    if (b.number() == 0) throw EvalError(op == "//" ? "float floor division by zero" : "float modulo");
    float_divmod(a.number(), b.number(), &fd, &m);
    return Value(op == "//" ? fd : m);
  }
  throw EvalError("unknown operator " + std::string(op));
}

Value negate(const Value& v) {
  if (v.is_float()) return Value(-v.number());
  if (v.is_int() || v.is_bool()) {
    if (v.integer() == INT64_MIN) overflow();
    return Value(-v.integer());
  }
  if (v.is_undefined()) throw EvalError(v.undefined_hint());
  throw EvalError(std::string("bad operand type for unary -: '") + v.type_name() + "'");
}

Value unary_plus(const Value& v) {
  if (v.is_float()) return v;
  if (v.is_int() || v.is_bool()) return Value(v.integer());
  if (v.is_undefined()) throw EvalError(v.undefined_hint());
  throw EvalError(std::string("bad operand type for unary +: '") + v.type_name() + "'");
}

// --- printf-style formatting ----------------------------------------------------

namespace {

std::string pad(std::string body, bool left, size_t width, char fill = ' ') {
  const size_t len = utf8_length(body);
  if (len >= width) return body;
  will_build(body.size() + (width - len));
  const std::string p(width - len, fill);
  return left ? body + p : p + body;
}

}  // namespace

Value percent_format(const Value& format, const Value& args) {
  const std::string& f = format.text();
  const bool markup = format.is_markup();
  std::vector<Value> positional;
  const Dict* mapping = nullptr;
  if (args.is_seq(SeqKind::Tuple)) will_build_list(args.seq().items.size()), positional = args.seq().items;
  else if (args.is_dict()) mapping = &args.dict(), positional = {args};
  else positional = {args};
  size_t next_arg = 0;
  bool used_mapping = false;
  std::string out;
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i] != '%') {
      out.push_back(f[i]);
      continue;
    }
    if (++i >= f.size()) throw EvalError("incomplete format");
    Value arg;
    bool have_arg = false;
    if (f[i] == '(') {
      const size_t close = f.find(')', i);
      if (close == std::string::npos) throw EvalError("incomplete format key");
      if (!mapping) throw EvalError("format requires a mapping");
      const Value* v = mapping->find(std::string_view(f).substr(i + 1, close - i - 1));
      if (!v) throw EvalError("'" + f.substr(i + 1, close - i - 1) + "'");
      arg = *v;
      have_arg = used_mapping = true;
      i = close + 1;
    }
    std::string flags;
    while (i < f.size() && std::string_view("-+ #0").find(f[i]) != std::string_view::npos) flags.push_back(f[i++]);
    if (i < f.size() && f[i] == '*') throw EvalError("'*' widths in % formats are not supported");
    size_t width = 0;
    // Past kMaxTextBytes a width only fails (pad refuses it): saturate there.
    while (i < f.size() && f[i] >= '0' && f[i] <= '9')
      width = std::min(width * 10 + static_cast<size_t>(f[i++] - '0'), kMaxTextBytes + 1);
    int precision = -1;
    if (i < f.size() && f[i] == '.') {
      ++i;
      precision = 0;
      while (i < f.size() && f[i] >= '0' && f[i] <= '9')
        precision = std::min(precision * 10 + (f[i++] - '0'), 1 << 30);
    }
    while (i < f.size() && (f[i] == 'l' || f[i] == 'h' || f[i] == 'L')) ++i;
    if (i >= f.size()) throw EvalError("incomplete format");
    const char type = f[i];
    if (type == '%') {
      out.push_back('%');
      continue;
    }
    if (!have_arg) {
      if (next_arg >= positional.size()) throw EvalError("not enough arguments for format string");
      arg = positional[next_arg++];
    }
    const bool left = flags.find('-') != std::string::npos;
    std::string piece;
    switch (type) {
      case 's':
      case 'r':
      case 'a': {
        std::string s = type == 's' ? arg.str() : arg.repr();
        if (arg.is_undefined() && type == 's') s = "";
        if (precision >= 0) {
          const std::vector<char32_t> cps = utf8_decode(s);
          if (cps.size() > static_cast<size_t>(precision))
            s = utf8_encode(std::vector<char32_t>(cps.begin(), cps.begin() + precision));
        }
        if (markup && !arg.is_markup()) s = html_escape(s);
        piece = pad(s, left, width);
        break;
      }
      case 'd':
      case 'i':
      case 'u':
      case 'x':
      case 'X':
      case 'o':
      case 'c':
      case 'e':
      case 'E':
      case 'f':
      case 'F':
      case 'g':
      case 'G': {
        if (type == 'c') {
          if (arg.is_string() && utf8_length(arg.text()) == 1) piece = pad(arg.text(), left, width);
          else if (arg.is_int()) {
            std::string s;
            utf8_append(s, static_cast<char32_t>(arg.integer()));
            piece = pad(s, left, width);
          } else {
            throw EvalError("%c requires int or char");
          }
          break;
        }
        if (!arg.is_number()) {
          if (arg.is_undefined()) throw EvalError(arg.undefined_hint());
          throw EvalError(std::string("%") + type + " format: a real number is required, not " + arg.type_name());
        }
        // The number is written into buf below, so it must fit.
        if (width > 400 || precision > 400)
          throw EvalError("a width or precision over 400 in a % format of a number (unsupported)");
        std::string spec = "%" + flags + (width ? std::to_string(width) : "") +
                           (precision >= 0 ? "." + std::to_string(precision) : "");
        char buf[512];
        if (type == 'd' || type == 'i' || type == 'u' || type == 'x' || type == 'X' || type == 'o') {
          if (arg.is_float() && (type == 'x' || type == 'X' || type == 'o'))
            throw EvalError(std::string("%") + type + " format: an integer is required, not float");
          double d = arg.number();
          if (arg.is_float() && !std::isfinite(d)) throw EvalError("cannot convert float infinity or NaN to integer");
          const long long n = arg.is_float() ? static_cast<long long>(std::trunc(d)) : static_cast<long long>(arg.integer());
          const char t = type == 'i' || type == 'u' ? 'd' : type;
          if (flags.find('#') != std::string::npos && type == 'o') {
            // Python writes 0o17 where C writes 017.
            std::snprintf(buf, sizeof buf, "%llo", n < 0 ? -static_cast<unsigned long long>(n) : static_cast<unsigned long long>(n));
            std::string body = std::string(n < 0 ? "-" : "") + "0o" + buf;
            piece = pad(body, left, width);
            break;
          }
          if (n < 0 && t != 'd') {
            std::snprintf(buf, sizeof buf, (spec + "ll" + t).c_str(), -n);
            piece = std::string(buf);
            piece.insert(piece.find_first_not_of(' '), "-");
            if (!left && utf8_length(piece) > width && piece[0] == ' ') piece.erase(0, 1);
            break;
          }
          std::snprintf(buf, sizeof buf, (spec + "ll" + t).c_str(), n);
        } else {
          std::snprintf(buf, sizeof buf, (spec + type).c_str(), arg.number());
        }
        piece = buf;
        break;
      }
      default: throw EvalError(std::string("unsupported format character '") + type + "'");
    }
    out += piece;
    check_built(out);
  }
  charge_work(out.size());
  // Python takes any non-tuple with __getitem__ (a list, a dict) as a
  // mapping, so unused arguments are no error then.
  const bool mapping_like = mapping || args.is_seq(SeqKind::List) || args.is_seq(SeqKind::Range) || args.is_undefined();
  if (!used_mapping && !mapping_like && next_arg < positional.size())
    throw EvalError("not all arguments converted during string formatting");
  return markup ? Value::markup(std::move(out)) : Value(std::move(out));
}

}  // namespace weir::jinja
