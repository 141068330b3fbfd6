// The text filters that are more than a str method: indent, jinja2's own
// title, wordcount, tojson (Hugging Face's: json.dumps in key order, UTF-8 as is) and
// printf-style format.
#include "text/jinja/filters.h"

#include <algorithm>

#include "text/jinja/operators.h"
#include "text/jinja/pystr.h"
#include "text/jinja/unicode.h"
#include "text/jinja/work.h"

namespace weir::jinja::filters {

Value do_indent(const Value& v, const CallArgs& args) {
  ArgBinder b("indent", args, {{"width", Value(4)}, {"first", Value(false)}, {"blank", Value(false)}});
  if (!b[0].is_string()) will_build(static_cast<uint64_t>(std::max<int64_t>(0, int_param(b[0], "indent"))));
  const std::string indention = b[0].is_string() ? b[0].text() : std::string(static_cast<size_t>(std::max<int64_t>(0, int_param(b[0], "indent"))), ' ');
  // jinja2 appends "\n" to the value as it is: only strings take it.
  if (!v.is_string()) {
    if (v.is_undefined()) throw EvalError(v.undefined_hint());
    throw EvalError(std::string("indent: unsupported operand type(s) for +=: '") + v.type_name() + "' and 'str'");
  }
  const Value& s = v;
  const std::vector<std::string> lines = pystr::splitlines(s.text() + "\n", false);
  // At most the text and an indention per line: refused before it is built.
  const uint64_t most = s.text().size() + 1 + (lines.size() + 1) * uint64_t(indention.size());
  will_build(most);
  std::string rv;
  rv.reserve(most);
  if (b[2].truthy()) {
    for (size_t i = 0; i < lines.size(); ++i) rv += (i ? "\n" + indention : "") + lines[i];
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) {
      rv += '\n';
      if (!lines[i].empty()) rv += indention, rv += lines[i];
    }
  }
  if (b[1].truthy()) rv = indention + rv;
  return same_kind(s, std::move(rv));
}

Value do_title(const Value& v) {
  // jinja2's own title, not str.title(): a word starts after a run of
  // whitespace, -, (, {, [ or <; its first character is uppercased and the
  // rest lowercased.
  const Value text = soft_str(v);
  const std::string& s = text.text();
  charge_work(s.size());
  std::string out, word;
  auto flush = [&] {
    if (word.empty()) return;
    size_t i = 0;
    std::string head;
    utf8_append(head, utf8_next(word, i));
    out += to_upper(head) + to_lower(std::string_view(word).substr(i));
    word.clear();
  };
  for (size_t i = 0; i < s.size();) {
    const size_t start = i;
    const char32_t c = utf8_next(s, i);
    if (is_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<') {
      flush();
      out += s.substr(start, i - start);
    } else {
      word += s.substr(start, i - start);
    }
  }
  flush();
  return Value(std::move(out));
}

Value do_wordcount(const Value& v) {
  const Value text = soft_str(v);
  const std::string& s = text.text();
  charge_work(s.size());
  int64_t n = 0;
  bool in_word = false;
  for (size_t i = 0; i < s.size();) {
    const char32_t c = utf8_next(s, i);
    const bool w = is_alnum(c) || c == '_';
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value(n);
}

// Hugging Face's tojson (apply_chat_template replaces jinja2's with it, and
// templates are written against it): json.dumps(x, ensure_ascii=False,
// indent=None, sort_keys=False), a plain string (not HTML-escaped Markup).
Value do_tojson(const Value& v, const CallArgs& args) {
  ArgBinder b("tojson", args,
              {{"ensure_ascii", Value(false)}, {"indent", Value::none()}, {"separators", Value::none()},
               {"sort_keys", Value(false)}});
  int indent = -1;
  if (!b[1].is_none()) {
    if (!b[1].is_int()) throw EvalError("tojson: indent must be an int (a string indent is not supported)");
    if (b[1].integer() > 1 << 20) throw EvalError("tojson: an indent over 1048576 (unsupported)");
    indent = static_cast<int>(std::max<int64_t>(0, b[1].integer()));
  }
  if (!b[2].is_none()) throw EvalError("tojson: separators is not supported");
  return Value(to_json(v, b[3].truthy(), indent, b[0].truthy()));
}

Value do_format(const Value& v, const CallArgs& args) {
  if (!args.positional.empty() && !args.keyword.empty())
    throw EvalError("can't handle positional and keyword arguments at the same time");
  Value fmt = soft_str(v);
  if (!args.keyword.empty()) {
    Dict d;
    for (const auto& [k, val] : args.keyword) d.set(Value(k), val);
    return percent_format(fmt, Value::dict(std::move(d)));
  }
  return percent_format(fmt, Value::tuple(args.positional));
}

void no_args(std::string_view name, const CallArgs& args) { ArgBinder b(name, args, {}); }

}  // namespace weir::jinja::filters
