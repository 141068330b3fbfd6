// Attribute and item access (`obj.name`, `obj[key]`, `obj[a:b:c]`) as
// jinja2's sandbox does it, and the str, list and dict methods templates
// call. The sandbox refuses the methods that change a list or dict (append,
// pop, update, ...): they give an undefined value that fails when called,
// as in Hugging Face's ImmutableSandboxedEnvironment.
#include <algorithm>
#include <optional>

#include "text/jinja/builtins.h"
#include "text/jinja/operators.h"
#include "text/jinja/pystr.h"
#include "text/jinja/str_format.h"
#include "text/jinja/unicode.h"
#include "text/jinja/work.h"

namespace weir::jinja {

namespace {

template <size_t N>
bool one_of(std::string_view name, const std::string_view (&names)[N]) {
  return std::find(std::begin(names), std::end(names), name) != std::end(names);
}

constexpr std::string_view kStrMethods[] = {"strip", "lstrip", "rstrip", "split", "rsplit", "splitlines", "startswith",
                               "endswith", "upper", "lower", "title", "capitalize", "replace", "find", "rfind",
                               "index", "rindex", "count", "join", "center", "ljust", "rjust", "zfill", "partition",
                               "rpartition", "removeprefix", "removesuffix", "swapcase", "isspace", "isalnum", "isalpha",
                               "isdigit", "isascii", "isprintable", "islower", "isupper", "format"};
// Python has these; this engine does not.
constexpr std::string_view kStrUnsupported[] = {"casefold", "encode", "expandtabs", "format_map", "isdecimal",
                                   "isidentifier", "isnumeric", "istitle", "maketrans", "translate",
                                   "escape", "striptags", "unescape"};
// markupsafe.Markup's versions of these escape their string arguments
// (all of its str methods return Markup).
constexpr std::string_view kMarkupEscaping[] = {"replace", "ljust", "rjust", "center"};
constexpr std::string_view kListMethods[] = {"index", "count", "copy"};
constexpr std::string_view kListMutating[] = {"append", "clear", "pop", "reverse", "insert", "sort", "extend", "remove"};
constexpr std::string_view kDictMethods[] = {"items", "keys", "values", "get", "copy"};
constexpr std::string_view kDictMutating[] = {"clear", "pop", "popitem", "setdefault", "update"};
constexpr std::string_view kNumberAttrs[] = {"real", "imag", "numerator", "denominator", "bit_length", "bit_count", "conjugate",
                                "to_bytes", "from_bytes", "as_integer_ratio", "is_integer", "hex", "fromhex"};
constexpr std::string_view kMacroAttrs[] = {"defaults", "catch_kwargs", "catch_varargs", "caller"};
constexpr std::string_view kRangeAttrs[] = {"start", "stop", "step", "index", "count"};

Value unsafe(const Value& obj, std::string_view name) {
  return Value::undefined("access to attribute '" + std::string(name) + "' of '" + obj.type_name() +
                          "' object is unsafe.");
}

[[noreturn]] void unsupported(const Value& obj, std::string_view name) {
  throw EvalError("unsupported " + std::string(obj.type_name()) + " attribute '" + std::string(name) + "'");
}

std::optional<std::string> opt_str(const Value& v, const std::string& what) {
  if (v.is_none() || v.is_undefined()) return std::nullopt;
  if (!v.is_string()) throw EvalError(what + " must be None or str, not " + v.type_name());
  return v.text();
}

const std::string& str_arg(const Value& v, const std::string& what) {
  if (!v.is_string()) {
    if (v.is_undefined()) throw EvalError(v.undefined_hint());
    throw EvalError(what + ": must be str, not " + v.type_name());
  }
  return v.text();
}

int64_t int_arg(const Value& v, const std::string& what) {
  if (v.is_int() || v.is_bool()) return v.integer();
  if (v.is_undefined()) throw EvalError(v.undefined_hint());
  throw EvalError(what + ": '" + v.type_name() + "' object cannot be interpreted as an integer");
}

std::optional<int64_t> opt_int(const Value& v, const std::string& what) {
  if (v.is_none()) return std::nullopt;
  return int_arg(v, what);
}

// s[start:end] by code points (for the start/end arguments of some methods).
std::string slice_text(const std::string& s, std::optional<int64_t> start, std::optional<int64_t> end) {
  const std::vector<char32_t> cps = utf8_decode(s);
  const auto len = static_cast<int64_t>(cps.size());
  auto clamp = [len](int64_t i) { return std::clamp<int64_t>(i < 0 ? i + len : i, 0, len); };
  const int64_t b = start ? clamp(*start) : 0, e = end ? clamp(*end) : len;
  if (b >= e) return "";
  return utf8_encode(std::vector<char32_t>(cps.begin() + b, cps.begin() + e));
}

template <typename Pred>
bool all_chars(const std::string& s, Pred pred, bool empty_result) {
  if (s.empty()) return empty_result;
  charge_work(s.size());
  for (size_t i = 0; i < s.size();)
    if (!pred(utf8_next(s, i))) return false;
  return true;
}

Value str_method(const Value& self, const std::string& name, const CallArgs& args) {
  const std::string& s = self.text();
  const bool markup = self.is_markup();
  // Markup's escaping wrappers escape string arguments first.
  CallArgs escaped;
  const CallArgs* a = &args;
  if (markup && one_of(name, kMarkupEscaping)) {
    escaped = args;
    for (Value& v : escaped.positional)
      if (v.is_string()) v = Value::markup(escape_unless_markup(v));
    for (auto& kv : escaped.keyword)
      if (kv.second.is_string()) kv.second = Value::markup(escape_unless_markup(kv.second));
    a = &escaped;
  }
  auto wrap = [markup](std::string text) { return markup ? Value::markup(std::move(text)) : Value(std::move(text)); };
  auto wrap_list = [&](const std::vector<std::string>& parts, SeqKind kind) {
    std::vector<Value> out;
    for (const auto& p : parts) out.push_back(wrap(p));
    return Value::list(std::move(out), kind);
  };
  const std::string fn = "str." + name;
  if (name == "format") return str_format(self, args);  // (escapes its own arguments on Markup)

  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    ArgBinder b(fn, *a, {{"chars", Value::none()}});
    return wrap(pystr::strip(s, opt_str(b[0], fn + " arg"), name != "rstrip", name != "lstrip"));
  }
  if (name == "split" || name == "rsplit") {
    ArgBinder b(fn, *a, {{"sep", Value::none()}, {"maxsplit", Value(-1)}});
    const auto sep = opt_str(b[0], fn + " sep");
    if (sep && sep->empty()) throw EvalError("empty separator");
    const int64_t maxsplit = int_arg(b[1], fn);
    return wrap_list(name == "split" ? pystr::split(s, sep, maxsplit) : pystr::rsplit(s, sep, maxsplit), SeqKind::List);
  }
  if (name == "splitlines") {
    ArgBinder b(fn, *a, {{"keepends", Value(false)}});
    return wrap_list(pystr::splitlines(s, b[0].truthy()), SeqKind::List);
  }
  if (name == "startswith" || name == "endswith") {
    ArgBinder b(fn, *a, {{"prefix", Value(), true}, {"start", Value::none()}, {"end", Value::none()}});
    const std::string text = b.given(1) || b.given(2) ? slice_text(s, opt_int(b[1], fn), opt_int(b[2], fn)) : s;
    std::vector<Value> options;
    if (b[0].is_seq(SeqKind::Tuple)) options = b[0].seq().items;
    else if (b[0].is_string()) options = {b[0]};
    else
      throw EvalError(name + " first arg must be str or a tuple of str, not " + b[0].type_name());
    for (const Value& o : options) {
      const std::string& p = str_arg(o, fn);
      charge_work(std::min(p.size(), text.size()));
      const bool hit = name == "startswith" ? text.compare(0, p.size(), p) == 0 && text.size() >= p.size()
                                            : text.size() >= p.size() && text.compare(text.size() - p.size(), p.size(), p) == 0;
      if (hit) return Value(true);
    }
    return Value(false);
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize" || name == "swapcase") {
    ArgBinder b(fn, *a, {});
    if (name == "swapcase") return wrap(swap_case(s));
    if (name == "upper") return wrap(to_upper(s));
    if (name == "lower") return wrap(to_lower(s));
    if (name == "title") return wrap(to_title(s));
    return wrap(to_capitalized(s));
  }
  if (name == "replace") {
    ArgBinder b(fn, *a, {{"old", Value(), true}, {"new", Value(), true}, {"count", Value(-1)}});
    return wrap(pystr::replace(s, str_arg(b[0], fn), str_arg(b[1], fn), int_arg(b[2], fn)));
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex") {
    ArgBinder b(fn, *a, {{"sub", Value(), true}, {"start", Value::none()}, {"end", Value::none()}});
    const int64_t at = pystr::find(s, str_arg(b[0], fn), opt_int(b[1], fn), opt_int(b[2], fn), name[0] == 'r');
    if (at < 0 && (name == "index" || name == "rindex")) throw EvalError("substring not found");
    return Value(at);
  }
  if (name == "count") {
    ArgBinder b(fn, *a, {{"sub", Value(), true}, {"start", Value::none()}, {"end", Value::none()}});
    const std::optional<int64_t> start = opt_int(b[1], fn);
    if (start && *start > static_cast<int64_t>(utf8_length(s))) return Value(0);
    const std::string text = b.given(1) || b.given(2) ? slice_text(s, start, opt_int(b[2], fn)) : s;
    return Value(pystr::count(text, str_arg(b[0], fn)));
  }
  if (name == "join") {
    ArgBinder b(fn, *a, {{"iterable", Value(), true}});
    // The pieces (shared, not copied), then the result's size: refused
    // before it is built when too big.
    std::vector<Value> pieces;
    uint64_t size = 0;
    for (const Value& item : iterate(b[0])) {
      if (!item.is_string())
        throw EvalError("sequence item " + std::to_string(pieces.size()) + ": expected str instance, " +
                        item.type_name() + " found");
      pieces.push_back(markup ? Value(escape_unless_markup(item)) : item);
      size += (pieces.size() > 1 ? s.size() : 0) + pieces.back().text().size();
      if (size > kMaxTextBytes) refuse_size(size);
    }
    will_build(size);
    std::string out;
    out.reserve(size);
    for (size_t i = 0; i < pieces.size(); ++i) {
      if (i) out += s;
      out += pieces[i].text();
    }
    return wrap(std::move(out));
  }
  if (name == "center" || name == "ljust" || name == "rjust") {
    ArgBinder b(fn, *a, {{"width", Value(), true}, {"fillchar", Value(" ")}});
    const std::string& fill = str_arg(b[1], fn);
    if (utf8_length(fill) != 1) throw EvalError("The fill character must be exactly one character long");
    const int64_t w = int_arg(b[0], fn);
    if (name == "center") return wrap(pystr::center(s, w, fill));
    return wrap(name == "ljust" ? pystr::ljust(s, w, fill) : pystr::rjust(s, w, fill));
  }
  if (name == "zfill") {
    ArgBinder b(fn, *a, {{"width", Value(), true}});
    return wrap(pystr::zfill(s, int_arg(b[0], fn)));
  }
  if (name == "partition" || name == "rpartition") {
    ArgBinder b(fn, *a, {{"sep", Value(), true}});
    const std::string& sep = str_arg(b[0], fn);
    if (sep.empty()) throw EvalError("empty separator");
    const size_t at = name == "partition" ? pystr::find_bytes(s, sep) : pystr::rfind_bytes(s, sep, s.size());
    if (at == std::string::npos)
      return wrap_list(name == "partition" ? std::vector<std::string>{s, "", ""} : std::vector<std::string>{"", "", s},
                       SeqKind::Tuple);
    return wrap_list({s.substr(0, at), sep, s.substr(at + sep.size())}, SeqKind::Tuple);
  }
  if (name == "removeprefix" || name == "removesuffix") {
    ArgBinder b(fn, *a, {{"affix", Value(), true}});
    const std::string& p = str_arg(b[0], fn);
    if (name == "removeprefix") return wrap(s.compare(0, p.size(), p) == 0 ? s.substr(p.size()) : s);
    const bool ends = s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
    return wrap(ends ? s.substr(0, s.size() - p.size()) : s);
  }
  ArgBinder b(fn, *a, {});
  if (name == "isspace") return Value(all_chars(s, is_space, false));
  if (name == "isalnum") return Value(all_chars(s, is_alnum, false));
  if (name == "isalpha") return Value(all_chars(s, is_alpha, false));
  if (name == "isdigit") return Value(all_chars(s, is_digit, false));
  if (name == "isascii") return Value(all_chars(s, [](char32_t c) { return c < 0x80; }, true));
  if (name == "isprintable") return Value(all_chars(s, is_printable, true));
  if (name == "islower") return Value(pystr::is_lower(s));
  if (name == "isupper") return Value(pystr::is_upper(s));
  throw EvalError("unsupported str method '" + name + "'");
}

Value list_method(const Value& self, const std::string& name, const CallArgs& args) {
  const auto& items = self.seq().items;
  const std::string fn = std::string(self.type_name()) + "." + name;
  if (name == "copy") {
    ArgBinder b(fn, args, {});
    return Value::list(items);
  }
  if (name == "count") {
    ArgBinder b(fn, args, {{"value", Value(), true}});
    return Value(static_cast<int64_t>(std::count_if(items.begin(), items.end(), [&](const Value& v) { return equals(v, b[0]); })));
  }
  ArgBinder b(fn, args, {{"value", Value(), true}, {"start", Value(0)}, {"stop", Value(INT64_MAX)}});
  const auto len = static_cast<int64_t>(items.size());
  auto clamp = [len](int64_t i) { return std::clamp<int64_t>(i < 0 ? i + len : i, 0, len); };
  for (int64_t i = clamp(int_arg(b[1], fn)); i < clamp(int_arg(b[2], fn)); ++i)
    if (equals(items[static_cast<size_t>(i)], b[0])) return Value(i);
  throw EvalError(b[0].repr() + " is not in " + self.type_name());
}

Value dict_method(const Value& self, const std::string& name, const CallArgs& args) {
  const Dict& d = self.dict();
  const std::string fn = "dict." + name;
  if (name == "get") {
    ArgBinder b(fn, args, {{"key", Value(), true}, {"default", Value::none()}});
    const Value* v = d.find(b[0]);
    return v ? *v : b[1];
  }
  ArgBinder b(fn, args, {});
  if (name == "copy") return self;
  std::vector<Value> out;
  for (const auto& [k, v] : d) {
    if (name == "keys") out.push_back(k);
    else if (name == "values") out.push_back(v);
    else out.push_back(Value::tuple({k, v}));
  }
  return Value::list(std::move(out), name == "keys"     ? SeqKind::DictKeys
                                     : name == "values" ? SeqKind::DictValues
                                                        : SeqKind::DictItems);
}

Value bind(const Value& self, const std::string& name, Value (*method)(const Value&, const std::string&, const CallArgs&)) {
  auto f = std::make_shared<Function>();
  f->name = std::string(self.type_name()) + "." + name;
  f->call = [self, name, method](const CallArgs& args) { return method(self, name, args); };
  f->depth = value_depth(self) + 1;
  f->holds_reference = holds_reference(self);
  return Value::function(std::shared_ptr<const Function>(std::move(f)));
}

// Python's getattr(obj, name) for what templates reach; nullopt when Python
// has no such attribute.
std::optional<Value> python_attribute(const Value& obj, std::string_view name_view) {
  const std::string name(name_view);
  if (!name.empty() && name[0] == '_') return unsafe(obj, name);
  switch (obj.kind()) {
    case Kind::String:
      if (one_of(name, kStrMethods)) return bind(obj, name, str_method);
      if (one_of(name, kStrUnsupported)) unsupported(obj, name);
      return std::nullopt;
    case Kind::Sequence:
      if (obj.is_seq(SeqKind::List) || obj.is_seq(SeqKind::Tuple)) {
        if (one_of(name, kListMethods) && !(obj.is_seq(SeqKind::Tuple) && name == "copy"))
          return bind(obj, name, list_method);
        if (obj.is_seq(SeqKind::List) && one_of(name, kListMutating)) return unsafe(obj, name);
      }
      if (obj.is_seq(SeqKind::Range) && one_of(name, kRangeAttrs)) unsupported(obj, name);
      if (obj.is_seq(SeqKind::DictKeys) || obj.is_seq(SeqKind::DictItems))
        if (name == "mapping" || name == "isdisjoint") unsupported(obj, name);
      return std::nullopt;
    case Kind::Dict:
      if (one_of(name, kDictMethods)) return bind(obj, name, dict_method);
      if (one_of(name, kDictMutating)) return unsafe(obj, name);
      if (name == "fromkeys") unsupported(obj, name);
      return std::nullopt;
    case Kind::Object:
      if (const Value* v = obj.object().attrs.find(std::string_view(name))) return *v;
      return std::nullopt;
    case Kind::Bool:
    case Kind::Int:
    case Kind::Float:
      if (one_of(name, kNumberAttrs)) unsupported(obj, name);
      return std::nullopt;
    case Kind::Function:
      if (obj.function().is_macro) {
        if (name == "name") return Value(obj.function().name);
        if (name == "arguments") {
          std::vector<Value> names;
          for (const std::string& p : obj.function().params) names.emplace_back(p);
          return Value::tuple(std::move(names));
        }
        if (one_of(name, kMacroAttrs)) unsupported(obj, name);
      }
      return std::nullopt;
    default: return std::nullopt;
  }
}

// "'dict object' has no attribute 'x'": jinja2's words for what is missing.
std::string no_attribute(const Value& obj, const std::string& what) {
  std::string m = "'";
  m += obj.type_name();
  m += " object' ";
  m += what;
  return m;
}

Value missing_attribute(const Value& obj, std::string_view name) {
  return Value::undefined(no_attribute(obj, "has no attribute '" + std::string(name) + "'"));
}

}  // namespace

Value get_attribute(const Value& obj, std::string_view name) {
  if (obj.is_undefined()) throw EvalError(obj.undefined_hint());
  if (auto v = python_attribute(obj, name)) return *v;
  if (obj.is_dict())
    if (const Value* v = obj.dict().find(name)) return *v;
  return missing_attribute(obj, name);
}

Value get_python_attribute(const Value& obj, std::string_view name) {
  if (obj.is_undefined()) throw EvalError(obj.undefined_hint());
  if (auto v = python_attribute(obj, name)) return *v;
  return missing_attribute(obj, name);
}

namespace {

// Python's index into a sequence of length len; nullopt when out of range.
std::optional<size_t> index_of(const Value& key, size_t len) {
  int64_t i = key.integer();
  if (i < 0) i += static_cast<int64_t>(len);
  if (i < 0 || i >= static_cast<int64_t>(len)) return std::nullopt;
  return static_cast<size_t>(i);
}

}  // namespace

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) throw EvalError(obj.undefined_hint());
  const bool int_key = key.is_int() || key.is_bool();
  if (obj.is_dict()) {
    if (hashable(key))
      if (const Value* v = obj.dict().find(key)) return *v;
  } else if (obj.is_string() && int_key) {
    const std::vector<char32_t> cps = utf8_decode(obj.text());
    if (auto i = index_of(key, cps.size())) {
      std::string c;
      utf8_append(c, cps[*i]);
      return obj.is_markup() ? Value::markup(std::move(c)) : Value(std::move(c));
    }
  } else if (int_key && (obj.is_seq(SeqKind::List) || obj.is_seq(SeqKind::Tuple) || obj.is_seq(SeqKind::Range))) {
    if (auto i = index_of(key, obj.seq().items.size())) return obj.seq().items[*i];
  }
  if (key.is_string()) {
    if (auto v = python_attribute(obj, key.text())) return *v;
    return missing_attribute(obj, key.text());
  }
  return Value::undefined(no_attribute(obj, "has no attribute " + key.repr()));
}

Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  if (obj.is_undefined()) throw EvalError(obj.undefined_hint());
  const bool sliceable = obj.is_string() || obj.is_seq(SeqKind::List) || obj.is_seq(SeqKind::Tuple) ||
                         obj.is_seq(SeqKind::Range);
  auto is_index = [](const Value& v) { return v.is_none() || v.is_int() || v.is_bool(); };
  if (!sliceable || !is_index(start) || !is_index(stop) || !is_index(step))
    return Value::undefined(no_attribute(obj, "cannot be sliced with these indexes"));
  const int64_t st = step.is_none() ? 1 : step.integer();
  if (st == 0) throw EvalError("slice step cannot be zero");
  std::vector<char32_t> cps;
  int64_t len;
  if (obj.is_string()) {
    cps = utf8_decode(obj.text());
    len = static_cast<int64_t>(cps.size());
  } else {
    len = static_cast<int64_t>(obj.seq().items.size());
  }
  // Python's slice.indices().
  auto bound = [&](const Value& v, int64_t def) {
    if (v.is_none()) return def;
    int64_t i = v.integer();
    if (i < 0) {
      i += len;
      if (i < 0) i = st < 0 ? -1 : 0;
    } else if (i >= len) {
      i = st < 0 ? len - 1 : len;
    }
    return i;
  };
  const int64_t b = bound(start, st < 0 ? len - 1 : 0);
  const int64_t e = bound(stop, st < 0 ? -1 : len);
  std::vector<size_t> picks;
  for (int64_t i = b; st > 0 ? i < e : i > e; i += st) picks.push_back(static_cast<size_t>(i));
  if (obj.is_string()) {
    std::string out;
    for (size_t i : picks) utf8_append(out, cps[i]);
    return obj.is_markup() ? Value::markup(std::move(out)) : Value(std::move(out));
  }
  const Sequence& s = obj.seq();
  if (s.kind == SeqKind::Range) {
    return Value::range(s.start + b * s.step, s.start + e * s.step, s.step * st);
  }
  std::vector<Value> out;
  for (size_t i : picks) out.push_back(s.items[i]);
  return Value::list(std::move(out), s.kind);
}

}  // namespace weir::jinja
