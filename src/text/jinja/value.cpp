#include "text/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "text/jinja/pystr.h"
#include "text/jinja/unicode.h"
#include "text/jinja/work.h"

namespace weir::jinja {

Value::Value(std::string s) : kind_(Kind::String) {
  charge_work(s.size());  // every string made counts, whoever built it
  if (s.size() <= kInlineText) data_ = std::move(s);
  else data_ = std::make_shared<const std::string>(std::move(s));
}

Value Value::undefined(std::string hint) {
  Value v;
  v.data_ = std::move(hint);
  return v;
}

Value Value::none() {
  Value v;
  v.kind_ = Kind::None;
  return v;
}

Value Value::markup(std::string s) {
  Value v(std::move(s));
  v.markup_ = true;
  return v;
}

namespace {

[[noreturn]] void too_deep() {
  throw EvalError("lists or dicts nested deeper than " + std::to_string(kMaxNesting) + ": refused");
}

}  // namespace

Value Value::list(std::vector<Value> items, SeqKind kind) {
  will_build_list(items.size());  // built already, by steps that checked their inputs
  auto s = std::make_shared<Sequence>();
  s->kind = kind;
  for (const Value& item : items) {
    s->depth = std::max(s->depth, value_depth(item) + 1);
    s->holds_reference = s->holds_reference || holds_reference(item);
  }
  if (s->depth > kMaxNesting) too_deep();
  s->items = std::move(items);
  Value v;
  v.kind_ = Kind::Sequence;
  v.data_ = std::shared_ptr<const Sequence>(std::move(s));
  return v;
}

Value Value::range(int64_t start, int64_t stop, int64_t step) {
  auto s = std::make_shared<Sequence>();
  s->kind = SeqKind::Range;
  s->start = start, s->stop = stop, s->step = step;
  const uint64_t n = step > 0 ? (stop > start ? (uint64_t(stop) - uint64_t(start) - 1) / uint64_t(step) + 1 : 0)
                              : (start > stop ? (uint64_t(start) - uint64_t(stop) - 1) / (0 - uint64_t(step)) + 1 : 0);
  will_build_list(n);
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) s->items.emplace_back(i);
  Value v;
  v.kind_ = Kind::Sequence;
  v.data_ = std::shared_ptr<const Sequence>(std::move(s));
  return v;
}

Value Value::dict(Dict d) {
  if (d.depth() > kMaxNesting) too_deep();
  Value v;
  v.kind_ = Kind::Dict;
  v.data_ = std::shared_ptr<const Dict>(std::make_shared<Dict>(std::move(d)));
  return v;
}

Value Value::object(std::shared_ptr<Object> o) {
  Value v;
  v.kind_ = Kind::Object;
  v.data_ = std::move(o);
  return v;
}

Value Value::function(std::shared_ptr<const Function> f) {
  Value v;
  v.kind_ = Kind::Function;
  v.data_ = std::move(f);
  return v;
}

Value Value::function(std::string name, std::function<Value(const CallArgs&)> call) {
  auto f = std::make_shared<Function>();
  f->name = std::move(name);
  f->call = std::move(call);
  return function(std::shared_ptr<const Function>(std::move(f)));
}

bool Value::is_seq(SeqKind k) const { return kind_ == Kind::Sequence && seq().kind == k; }
SeqKind Value::seq_kind() const { return seq().kind; }

int64_t Value::integer() const {
  if (kind_ == Kind::Bool) return boolean() ? 1 : 0;
  return std::get<int64_t>(data_);
}

double Value::number() const {
  if (kind_ == Kind::Float) return std::get<double>(data_);
  return static_cast<double>(integer());
}

const void* Value::identity() const {
  switch (kind_) {
    case Kind::Sequence: return std::get<std::shared_ptr<const Sequence>>(data_).get();
    case Kind::Dict: return std::get<std::shared_ptr<const Dict>>(data_).get();
    case Kind::Object: return std::get<std::shared_ptr<Object>>(data_).get();
    case Kind::Function: return std::get<std::shared_ptr<const Function>>(data_).get();
    default: return nullptr;
  }
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::Undefined:
    case Kind::None: return false;
    case Kind::Bool: return boolean();
    case Kind::Int: return integer() != 0;
    case Kind::Float: return number() != 0.0;
    case Kind::String: return !text().empty();
    case Kind::Sequence: return seq().kind == SeqKind::Generator || !seq().items.empty();
    case Kind::Dict: return !dict().empty();
    case Kind::Object:
    case Kind::Function: return true;
  }
  return false;
}

const char* Value::type_name() const {
  switch (kind_) {
    case Kind::Undefined: return "Undefined";
    case Kind::None: return "NoneType";
    case Kind::Bool: return "bool";
    case Kind::Int: return "int";
    case Kind::Float: return "float";
    case Kind::String: return markup_ ? "Markup" : "str";
    case Kind::Sequence:
      switch (seq().kind) {
        case SeqKind::List: return "list";
        case SeqKind::Tuple: return "tuple";
        case SeqKind::Range: return "range";
        case SeqKind::DictKeys: return "dict_keys";
        case SeqKind::DictValues: return "dict_values";
        case SeqKind::DictItems: return "dict_items";
        case SeqKind::Generator: return "generator";
      }
      return "list";
    case Kind::Dict: return "dict";
    case Kind::Object: return object().class_name.c_str();
    case Kind::Function: return function().is_macro ? "Macro" : "function";
  }
  return "?";
}

std::string float_repr(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f < 0 ? "-inf" : "inf";
  // The shortest digits that read back as f, then Python's layout: fixed
  // for exponents -4..15, else d.ddde+XX.
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, f, std::chars_format::scientific);
  std::string sci(buf, r.ptr);
  std::string out;
  size_t p = 0;
  if (sci[0] == '-') out = "-", p = 1;
  const size_t e_at = sci.find('e');
  std::string digits;
  for (size_t i = p; i < e_at; ++i)
    if (sci[i] != '.') digits.push_back(sci[i]);
  const int exp = std::atoi(sci.c_str() + e_at + 1);
  if (exp >= -4 && exp < 16) {
    if (exp < 0) {
      out += "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    } else {
      const size_t int_len = static_cast<size_t>(exp) + 1;
      if (digits.size() <= int_len) {
        out += digits + std::string(int_len - digits.size(), '0') + ".0";
      } else {
        out += digits.substr(0, int_len) + "." + digits.substr(int_len);
      }
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  char e[16];
  std::snprintf(e, sizeof e, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
  return out + e;
}

std::string string_repr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (size_t i = 0; i < s.size();) {
    const char32_t c = utf8_next(s, i);
    char buf[16];
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c >= 0x20 && c < 0x7f) {
      out.push_back(static_cast<char>(c));
    } else if (c >= 0x7f && is_printable(c)) {
      utf8_append(out, c);
    } else {
      if (c <= 0xff) std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(c));
      else if (c <= 0xffff) std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
      else std::snprintf(buf, sizeof buf, "\\U%08x", static_cast<unsigned>(c));
      out += buf;
    }
    check_built(out);
  }
  out.push_back(quote);
  charge_work(out.size());
  return out;
}

std::string html_escape(std::string_view s) {
  uint64_t size = s.size();
  for (char c : s) size += c == '&' || c == '\'' || c == '"' ? 4 : c == '<' || c == '>' ? 3 : 0;
  will_build(size);
  std::string out;
  out.reserve(size);
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '\'': out += "&#39;"; break;
      case '"': out += "&#34;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

namespace {

std::string join_repr(const std::vector<Value>& items) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += ", ";
    out += items[i].repr();
    check_built(out);
  }
  charge_work(out.size());
  return out;
}

std::string dict_repr(const Dict& d) {
  std::string out = "{";
  bool first = true;
  for (const auto& [k, v] : d) {
    if (!first) out += ", ";
    first = false;
    out += k.repr() + ": " + v.repr();
    check_built(out);
  }
  charge_work(out.size());
  return out + "}";
}

}  // namespace

std::string Value::repr() const {
  switch (kind_) {
    case Kind::Undefined: return "Undefined";
    case Kind::None: return "None";
    case Kind::Bool: return boolean() ? "True" : "False";
    case Kind::Int: return std::to_string(integer());
    case Kind::Float: return float_repr(number());
    case Kind::String: return markup_ ? "Markup(" + string_repr(text()) + ")" : string_repr(text());
    case Kind::Dict: return dict_repr(dict());
    case Kind::Object: {
      const Object& o = object();
      if (!o.fixed_repr.empty()) return o.fixed_repr;
      return "<" + o.class_name + " " + dict_repr(o.attrs) + ">";
    }
    case Kind::Function:
      if (function().is_macro) return "<Macro '" + function().name + "'>";
      throw EvalError("cannot print the function '" + function().name +
                      "' (jinja2 prints its address): call it");
    case Kind::Sequence: break;
  }
  const Sequence& s = seq();
  switch (s.kind) {
    case SeqKind::List: return "[" + join_repr(s.items) + "]";
    case SeqKind::Tuple:
      return "(" + join_repr(s.items) + (s.items.size() == 1 ? ",)" : ")");
    case SeqKind::Range:
      return "range(" + std::to_string(s.start) + ", " + std::to_string(s.stop) +
             (s.step != 1 ? ", " + std::to_string(s.step) : "") + ")";
    case SeqKind::DictKeys: return "dict_keys([" + join_repr(s.items) + "])";
    case SeqKind::DictValues: return "dict_values([" + join_repr(s.items) + "])";
    case SeqKind::DictItems: return "dict_items([" + join_repr(s.items) + "])";
    case SeqKind::Generator:
      throw EvalError("cannot print a generator (jinja2 prints its address): apply |list to it");
  }
  return "";
}

std::string Value::str() const {
  if (kind_ == Kind::Undefined) return "";
  if (kind_ == Kind::String) return text();
  return repr();
}

// --- comparison ------------------------------------------------------------

namespace {

// a == b for numbers, exactly (an int64 need not fit a double).
bool numbers_equal(const Value& a, const Value& b) {
  if (!a.is_float() && !b.is_float()) return a.integer() == b.integer();
  if (a.is_float() && b.is_float()) return a.number() == b.number();
  const double f = a.is_float() ? a.number() : b.number();
  const int64_t i = a.is_float() ? b.integer() : a.integer();
  if (!std::isfinite(f) || f != std::floor(f) || std::fabs(f) > 9.3e18) return false;
  return static_cast<int64_t>(f) == i;
}

int numbers_compare(const Value& a, const Value& b) {
  if (!a.is_float() && !b.is_float()) return a.integer() < b.integer() ? -1 : a.integer() > b.integer();
  if (numbers_equal(a, b)) return 0;
  const long double x = a.is_float() ? a.number() : static_cast<long double>(a.integer());
  const long double y = b.is_float() ? b.number() : static_cast<long double>(b.integer());
  if (x < y) return -1;
  if (x > y) return 1;
  return 2;  // nan: unordered
}

bool is_set_view(const Value& v) { return v.is_seq(SeqKind::DictKeys) || v.is_seq(SeqKind::DictItems); }

}  // namespace

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) return numbers_equal(a, b);
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Kind::Undefined:
    case Kind::None: return true;
    case Kind::String:
      if (a.text().size() != b.text().size()) return false;
      charge_work(a.text().size());
      return a.text() == b.text();
    case Kind::Dict: {
      if (a.dict().size() != b.dict().size()) return false;
      charge_work(a.dict().size() * kItemWork);
      for (const auto& [k, v] : a.dict()) {
        const Value* o = b.dict().find(k);
        if (!o || !equals(v, *o)) return false;
      }
      return true;
    }
    case Kind::Sequence: {
      const Sequence& x = a.seq();
      const Sequence& y = b.seq();
      if (is_set_view(a) && is_set_view(b)) {
        if (x.items.size() != y.items.size()) return false;
        for (const Value& v : x.items)
          if (!contains(b, v)) return false;
        return true;
      }
      if (x.kind != y.kind || x.kind == SeqKind::Generator || x.kind == SeqKind::DictValues)
        return &x == &y;
      if (x.items.size() != y.items.size()) return false;
      charge_work(x.items.size() * kItemWork);
      for (size_t i = 0; i < x.items.size(); ++i)
        if (!equals(x.items[i], y.items[i])) return false;
      return true;
    }
    default: return a.identity() == b.identity();
  }
}

int compare(const Value& a, const Value& b, const char* op) {
  if (a.is_number() && b.is_number()) return numbers_compare(a, b);
  if (a.is_string() && b.is_string()) {
    // UTF-8 bytes sort as the code points do, as Python compares str.
    charge_work(std::min(a.text().size(), b.text().size()));
    const int c = a.text().compare(b.text());
    return c < 0 ? -1 : c > 0;
  }
  const bool ordered_seqs = a.is_sequence() && b.is_sequence() && a.seq_kind() == b.seq_kind() &&
                            (a.seq_kind() == SeqKind::List || a.seq_kind() == SeqKind::Tuple);
  if (ordered_seqs) {
    const auto& x = a.seq().items;
    const auto& y = b.seq().items;
    charge_work(std::min(x.size(), y.size()) * kItemWork);
    for (size_t i = 0; i < x.size() && i < y.size(); ++i)
      if (!equals(x[i], y[i])) return compare(x[i], y[i], op);
    return x.size() < y.size() ? -1 : x.size() > y.size();
  }
  if (a.is_undefined() || b.is_undefined())
    throw EvalError(a.is_undefined() ? a.undefined_hint() : b.undefined_hint());
  throw EvalError(std::string("'") + op + "' not supported between instances of '" + a.type_name() +
                  "' and '" + b.type_name() + "'");
}

// --- iteration ---------------------------------------------------------------

std::vector<Value> iterate(const Value& v) {
  switch (v.kind()) {
    case Kind::Undefined: return {};
    case Kind::String: {
      const std::string& s = v.text();
      will_build_list(utf8_length(s));
      std::vector<Value> out;
      for (size_t i = 0; i < s.size();) {
        const size_t start = i;
        utf8_next(s, i);
        out.emplace_back(s.substr(start, i - start));  // plain str, even from a Markup
      }
      return out;
    }
    case Kind::Sequence: {
      const Sequence& s = v.seq();
      will_build_list(s.items.size() - s.consumed);
      if (s.kind != SeqKind::Generator) return s.items;
      std::vector<Value> rest(s.items.begin() + static_cast<std::ptrdiff_t>(s.consumed), s.items.end());
      s.consumed = s.items.size();
      return rest;
    }
    case Kind::Dict: {
      will_build_list(v.dict().size());
      std::vector<Value> keys;
      for (const auto& kv : v.dict()) keys.push_back(kv.first);
      return keys;
    }
    default: throw EvalError(std::string("'") + v.type_name() + "' object is not iterable");
  }
}

int64_t length(const Value& v) {
  switch (v.kind()) {
    case Kind::Undefined: return 0;
    case Kind::String: return static_cast<int64_t>(utf8_length(v.text()));
    case Kind::Dict: return static_cast<int64_t>(v.dict().size());
    case Kind::Sequence:
      if (v.seq_kind() != SeqKind::Generator) return static_cast<int64_t>(v.seq().items.size());
      break;
    default: break;
  }
  throw EvalError(std::string("object of type '") + v.type_name() + "' has no len()");
}

bool contains(const Value& haystack, const Value& needle) {
  switch (haystack.kind()) {
    case Kind::String:
      if (!needle.is_string())
        throw EvalError(std::string("'in <string>' requires string as left operand, not ") + needle.type_name());
      return pystr::find_bytes(haystack.text(), needle.text()) != std::string::npos;
    case Kind::Dict: return haystack.dict().find(needle) != nullptr;  // throws when unhashable
    case Kind::Sequence: {
      const Sequence& s = haystack.seq();
      if (s.kind == SeqKind::DictItems && !(needle.is_seq(SeqKind::Tuple) && needle.seq().items.size() == 2))
        return false;
      charge_work((s.items.size() - s.consumed) * kItemWork);
      if (s.kind == SeqKind::Generator) {
        while (s.consumed < s.items.size())
          if (equals(s.items[s.consumed++], needle)) return true;
        return false;
      }
      for (const Value& v : s.items)
        if (equals(v, needle)) return true;
      return false;
    }
    case Kind::Undefined: return false;
    default:
      throw EvalError(std::string("argument of type '") + haystack.type_name() + "' is not iterable");
  }
}

// --- dict ----------------------------------------------------------------------

bool hashable(const Value& v) {
  if (v.is_dict() || v.is_object()) return false;
  if (v.is_sequence()) {
    if (v.is_seq(SeqKind::Range)) return true;
    if (!v.is_seq(SeqKind::Tuple)) return false;
    for (const Value& item : v.seq().items)
      if (!hashable(item)) return false;
  }
  return true;
}

namespace {

void check_hashable(const Value& key) {
  if (!hashable(key)) throw EvalError(std::string("unhashable type: '") + key.type_name() + "'");
}

}  // namespace

uint64_t key_hash(const Value& v) {
  switch (v.kind()) {
    case Kind::String:
      charge_work(v.text().size());
      return std::hash<std::string_view>()(v.text());
    case Kind::Bool:
    case Kind::Int:
    case Kind::Float: {
      // Equal numbers are the same double (an int that equals a float is
      // one a double holds exactly); 0.0 and -0.0 alike.
      const double d = v.number();
      return d == 0 ? 0 : std::hash<double>()(d);
    }
    case Kind::Sequence: {  // a tuple or range: its items
      uint64_t h = 0xcbf29ce484222325ull;
      charge_work(v.seq().items.size() * kItemWork);
      for (const Value& item : v.seq().items) h = (h ^ key_hash(item)) * 0x100000001b3ull;
      return h;
    }
    default: return std::hash<const void*>()(v.identity());  // None and undefined: null, all alike
  }
}

uint32_t value_depth(const Value& v) {
  switch (v.kind()) {
    case Kind::Sequence: return v.seq().depth;
    case Kind::Dict: return v.dict().depth();
    case Kind::Object: return v.object().attrs.depth() + 1;
    case Kind::Function: return v.function().depth;
    default: return 0;
  }
}

bool holds_reference(const Value& v) {
  switch (v.kind()) {
    case Kind::Object: return true;
    case Kind::Function: return v.function().holds_reference;
    case Kind::Sequence: return v.seq().holds_reference;
    case Kind::Dict: return v.dict().holds_reference();
    default: return false;
  }
}

std::ptrdiff_t Dict::position(const Value& key, std::string_view text_key, bool by_text) const {
  auto matches = [&](const Value& k) {
    return by_text ? k.is_string() && k.text() == text_key : equals(k, key);
  };
  if (index_.empty()) {
    charge_work(items_.size() * kItemWork);
    for (size_t i = 0; i < items_.size(); ++i)
      if (matches(items_[i].first)) return static_cast<std::ptrdiff_t>(i);
    return -1;
  }
  const uint64_t h = by_text ? (charge_work(text_key.size()), std::hash<std::string_view>()(text_key)) : key_hash(key);
  const auto [first, last] = index_.equal_range(h);
  for (auto it = first; it != last; ++it) {
    charge_work(kItemWork);
    if (matches(items_[it->second].first)) return static_cast<std::ptrdiff_t>(it->second);
  }
  return -1;
}

const Value* Dict::find(const Value& key) const {
  check_hashable(key);
  const std::ptrdiff_t i = key.is_string() ? position(key, key.text(), true) : position(key, {}, false);
  return i < 0 ? nullptr : &items_[static_cast<size_t>(i)].second;
}

const Value* Dict::find(std::string_view key) const {
  const std::ptrdiff_t i = position(Value(), key, true);
  return i < 0 ? nullptr : &items_[static_cast<size_t>(i)].second;
}

void Dict::set(Value key, Value value) {
  check_hashable(key);
  depth_ = std::max(depth_, std::max(value_depth(key), value_depth(value)) + 1);
  holds_reference_ = holds_reference_ || jinja::holds_reference(key) || jinja::holds_reference(value);
  const std::ptrdiff_t i = key.is_string() ? position(key, key.text(), true) : position(key, {}, false);
  if (i >= 0) {
    items_[static_cast<size_t>(i)].second = std::move(value);
    return;
  }
  if (!index_.empty()) index_.emplace(key_hash(key), items_.size());
  items_.emplace_back(std::move(key), std::move(value));
  if (index_.empty() && items_.size() >= kIndexFrom)
    for (size_t k = 0; k < items_.size(); ++k) index_.emplace(key_hash(items_[k].first), k);
}

}  // namespace weir::jinja
