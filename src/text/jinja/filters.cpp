// The filters (`x | name(args)`), each as jinja2 3.1 does it with
// autoescaping off. Those that return generators in jinja2 (map, select,
// unique, batch, ...) return a Generator sequence here, so that printing
// one, taking its length or using it twice fails or behaves as in jinja2.
#include "text/jinja/filters.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "text/jinja/operators.h"
#include "text/jinja/pystr.h"
#include "text/jinja/unicode.h"

namespace weir::jinja {

namespace {

constexpr std::string_view kSupported[] = {
    "abs", "attr", "batch", "capitalize", "center", "count", "d", "default", "dictsort", "e", "escape", "first",
    "float", "forceescape", "format", "indent", "int", "items", "join", "last", "length", "list", "lower", "map",
    "max", "min", "reject", "rejectattr", "replace", "reverse", "round", "safe", "select", "selectattr", "slice",
    "sort", "string", "sum", "title", "tojson", "trim", "unique", "upper", "wordcount"};
constexpr std::string_view kUnsupported[] = {"filesizeformat", "groupby", "pprint", "random", "striptags",
                                             "truncate", "urlencode", "urlize", "wordwrap", "xmlattr"};

void no_args(std::string_view name, const CallArgs& args) { ArgBinder b(name, args, {}); }

}  // namespace

namespace filters {

Value generator(std::vector<Value> items) { return Value::list(std::move(items), SeqKind::Generator); }

Value soft_str(const Value& v) { return v.is_string() ? v : Value(v.str()); }
Value same_kind(const Value& like, std::string text) {
  return like.is_markup() ? Value::markup(std::move(text)) : Value(std::move(text));
}

int64_t int_param(const Value& v, const char* what) {
  if (v.is_int() || v.is_bool()) return v.integer();
  if (v.is_undefined()) throw EvalError(v.undefined_hint());
  throw EvalError(std::string(what) + ": '" + v.type_name() + "' object cannot be interpreted as an integer");
}

Value lookup_path(const Value& item, const Value& attribute) {
  if (!attribute.is_string()) return get_item(item, attribute);
  Value v = item;
  const std::string& path = attribute.text();
  size_t start = 0;
  for (;;) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const bool digits = !part.empty() && part.find_first_not_of("0123456789") == std::string::npos;
    v = get_item(v, digits ? Value(static_cast<int64_t>(std::stoll(part))) : Value(part));
    if (dot == std::string::npos) return v;
    start = dot + 1;
  }
}

Value lower_if_string(const Value& v) { return v.is_string() ? Value(to_lower(v.text())) : v; }

Value sort_key(const Value& item, const Value& attribute, bool case_sensitive, bool several) {
  auto one = [&](const Value& attr) {
    Value k = attr.is_none() ? item : lookup_path(item, attr);
    return case_sensitive ? k : lower_if_string(k);
  };
  if (several && attribute.is_string() && attribute.text().find(',') != std::string::npos) {
    std::vector<Value> parts;
    for (const std::string& a : pystr::split(attribute.text(), std::string(","), -1)) parts.push_back(one(Value(a)));
    return Value::tuple(std::move(parts));
  }
  return one(attribute);
}

bool less(const Value& a, const Value& b) { return compare(a, b) == -1; }

std::vector<Value> sorted(std::vector<Value> items, const std::vector<Value>& keys, bool reverse) {
  std::vector<size_t> order(items.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    return reverse ? less(keys[y], keys[x]) : less(keys[x], keys[y]);
  });
  std::vector<Value> out;
  for (size_t i : order) out.push_back(items[i]);
  return out;
}

}  // namespace filters

using namespace filters;

Support filter_support(std::string_view name) {
  if (std::find(std::begin(kSupported), std::end(kSupported), name) != std::end(kSupported)) return Support::Supported;
  if (std::find(std::begin(kUnsupported), std::end(kUnsupported), name) != std::end(kUnsupported))
    return Support::Unsupported;
  return Support::Unknown;
}

Value apply_filter(std::string_view name, const Value& v, const CallArgs& args) {
  if (name == "abs") {
    no_args(name, args);
    if (v.is_float()) return Value(std::fabs(v.number()));
    if (v.is_int() || v.is_bool()) return v.integer() < 0 ? negate(v) : Value(v.integer());
    if (v.is_undefined()) throw EvalError(v.undefined_hint());
    throw EvalError(std::string("bad operand type for abs(): '") + v.type_name() + "'");
  }
  if (name == "attr") {
    ArgBinder b(name, args, {{"name", Value(), true}});
    return get_python_attribute(v, b[0].str());
  }
  if (name == "batch") return do_batch(v, args);
  if (name == "capitalize" || name == "lower" || name == "upper") {
    no_args(name, args);
    const Value s = soft_str(v);
    return same_kind(s, name == "capitalize" ? to_capitalized(s.text()) : name == "lower" ? to_lower(s.text()) : to_upper(s.text()));
  }
  if (name == "center") {
    ArgBinder b(name, args, {{"width", Value(80)}});
    const Value s = soft_str(v);
    return same_kind(s, pystr::center(s.text(), int_param(b[0], "center"), " "));
  }
  if (name == "count" || name == "length") {
    no_args(name, args);
    return Value(length(v));
  }
  if (name == "d" || name == "default") {
    ArgBinder b(name, args, {{"default_value", Value("")}, {"boolean", Value(false)}});
    if (v.is_undefined() || (b[1].truthy() && !v.truthy())) return b[0];
    return v;
  }
  if (name == "dictsort") return do_dictsort(v, args);
  if (name == "e" || name == "escape") {
    no_args(name, args);
    return v.is_markup() ? v : Value::markup(html_escape(v.str()));
  }
  if (name == "forceescape") {
    no_args(name, args);
    return Value::markup(html_escape(v.str()));
  }
  if (name == "first") return no_args(name, args), do_first(v);
  if (name == "float") return do_float(v, args);
  if (name == "format") return do_format(v, args);
  if (name == "indent") return do_indent(v, args);
  if (name == "int") return do_int(v, args);
  if (name == "items") {
    no_args(name, args);
    if (v.is_undefined()) return generator({});
    if (!v.is_dict()) throw EvalError("Can only get item pairs from a mapping.");
    std::vector<Value> out;
    for (const auto& [k, val] : v.dict()) out.push_back(Value::tuple({k, val}));
    return generator(std::move(out));
  }
  if (name == "join") return do_join(v, args);
  if (name == "last") return no_args(name, args), do_last(v);
  if (name == "list") return no_args(name, args), Value::list(iterate(v));
  if (name == "map") return do_map(v, args);
  if (name == "max" || name == "min") return min_or_max(v, args, name == "max");
  if (name == "reject") return select_or_reject(v, args, false, false, "reject");
  if (name == "rejectattr") return select_or_reject(v, args, false, true, "rejectattr");
  if (name == "select") return select_or_reject(v, args, true, false, "select");
  if (name == "selectattr") return select_or_reject(v, args, true, true, "selectattr");
  if (name == "replace") {
    ArgBinder b(name, args, {{"old", Value(), true}, {"new", Value(), true}, {"count", Value::none()}});
    const int64_t count = b[2].is_none() ? -1 : int_param(b[2], "replace");
    return Value(pystr::replace(v.str(), b[0].str(), b[1].str(), count));
  }
  if (name == "reverse") return no_args(name, args), do_reverse(v);
  if (name == "round") return do_round(v, args);
  if (name == "safe") return no_args(name, args), Value::markup(v.str());
  if (name == "slice") return do_slice(v, args);
  if (name == "sort") return do_sort(v, args);
  if (name == "string") return no_args(name, args), soft_str(v);
  if (name == "sum") return do_sum(v, args);
  if (name == "title") return no_args(name, args), do_title(v);
  if (name == "tojson") return do_tojson(v, args);
  if (name == "trim") {
    ArgBinder b(name, args, {{"chars", Value::none()}});
    const Value s = soft_str(v);
    std::optional<std::string> chars;
    if (!b[0].is_none()) {
      if (!b[0].is_string()) throw EvalError(std::string("strip arg must be None or str, not ") + b[0].type_name());
      chars = b[0].text();
    }
    return same_kind(s, pystr::strip(s.text(), chars, true, true));
  }
  if (name == "unique") return do_unique(v, args);
  if (name == "wordcount") return no_args(name, args), do_wordcount(v);
  throw EvalError("unknown filter '" + std::string(name) + "'");
}

}  // namespace weir::jinja
