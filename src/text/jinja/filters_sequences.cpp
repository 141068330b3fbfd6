// The filters over sequences: select/reject(attr), map, sort, dictsort,
// unique, min/max, sum, join, first/last, reverse, batch, slice.
#include "text/jinja/filters.h"

#include <algorithm>

#include "text/jinja/operators.h"
#include "text/jinja/unicode.h"
#include "text/jinja/work.h"

namespace weir::jinja::filters {

// select, reject, selectattr, rejectattr.
Value select_or_reject(const Value& v, const CallArgs& args, bool keep, bool by_attribute, const char* name) {
  CallArgs rest;
  Value attribute;
  size_t i = 0;
  if (by_attribute) {
    if (args.positional.empty()) throw EvalError(std::string(name) + ": missing the attribute");
    attribute = args.positional[i++];
  }
  std::string test;
  if (i < args.positional.size()) {
    if (!args.positional[i].is_string()) throw EvalError(std::string(name) + ": the test name must be a string");
    test = args.positional[i++].text();
    if (test_support(test) != Support::Supported) throw EvalError("no test named '" + test + "'");
  }
  for (; i < args.positional.size(); ++i) rest.positional.push_back(args.positional[i]);
  rest.keyword = args.keyword;
  if (test.empty() && !rest.keyword.empty()) throw EvalError(std::string(name) + ": keyword arguments need a test");
  std::vector<Value> out;
  if (!v.truthy()) return generator({});  // jinja2 skips a false value without iterating it
  for (const Value& item : iterate(v)) {
    const Value x = by_attribute ? lookup_path(item, attribute) : item;
    const bool pass = test.empty() ? x.truthy() : apply_test(test, x, rest);
    if (pass == keep) out.push_back(item);
  }
  return generator(std::move(out));
}

Value do_map(const Value& v, const CallArgs& args) {
  std::vector<Value> out;
  if (!v.truthy()) return generator({});  // jinja2 skips a false value without iterating it
  const Value* attribute = nullptr;
  const Value* def = nullptr;
  for (const auto& [k, val] : args.keyword) {
    if (k == "attribute") attribute = &val;
    else if (k == "default") def = &val;
  }
  if (attribute) {
    if (!args.positional.empty() || args.keyword.size() > (def ? 2u : 1u))
      throw EvalError("map: unexpected arguments with attribute=");
    for (const Value& item : iterate(v)) {
      Value x = lookup_path(item, *attribute);
      out.push_back(x.is_undefined() && def ? *def : x);
    }
    return generator(std::move(out));
  }
  if (args.positional.empty()) throw EvalError("map requires a filter argument");
  if (!args.positional[0].is_string()) throw EvalError("map: the filter name must be a string");
  const std::string filter = args.positional[0].text();
  if (filter_support(filter) != Support::Supported) throw EvalError("no filter named '" + filter + "'");
  CallArgs rest;
  rest.positional.assign(args.positional.begin() + 1, args.positional.end());
  rest.keyword = args.keyword;
  for (const Value& item : iterate(v)) out.push_back(apply_filter(filter, item, rest));
  return generator(std::move(out));
}

Value min_or_max(const Value& v, const CallArgs& args, bool want_max) {
  ArgBinder b(want_max ? "max" : "min", args, {{"case_sensitive", Value(false)}, {"attribute", Value::none()}});
  const std::vector<Value> items = iterate(v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  Value best_key = sort_key(items[0], b[1], b[0].truthy(), false);
  for (size_t i = 1; i < items.size(); ++i) {
    Value k = sort_key(items[i], b[1], b[0].truthy(), false);
    if (want_max ? less(best_key, k) : less(k, best_key)) best = i, best_key = std::move(k);
  }
  return items[best];
}

Value do_last(const Value& v) {
  if (v.is_seq(SeqKind::Generator)) throw EvalError("'generator' object is not reversible");
  if (v.is_dict() || v.is_string() || v.is_sequence() || v.is_undefined()) {
    const std::vector<Value> items = iterate(v);
    if (!items.empty()) return items.back();
    return Value::undefined("No last item, sequence was empty.");
  }
  throw EvalError(std::string("'") + v.type_name() + "' object is not reversible");
}

Value do_first(const Value& v) {
  if (v.is_seq(SeqKind::Generator)) {
    const Sequence& s = v.seq();
    if (s.consumed < s.items.size()) return s.items[s.consumed++];
  } else {
    const std::vector<Value> items = iterate(v);
    if (!items.empty()) return items.front();
  }
  return Value::undefined("No first item, sequence was empty.");
}

Value do_reverse(const Value& v) {
  if (v.is_string()) {
    std::vector<char32_t> cps = utf8_decode(v.text());
    std::reverse(cps.begin(), cps.end());
    return same_kind(v, utf8_encode(cps));
  }
  if (v.is_seq(SeqKind::Generator)) {
    std::vector<Value> items = iterate(v);
    std::reverse(items.begin(), items.end());
    return Value::list(std::move(items));
  }
  if (v.is_sequence() || v.is_dict() || v.is_undefined()) {
    std::vector<Value> items = iterate(v);
    std::reverse(items.begin(), items.end());
    return generator(std::move(items));
  }
  throw EvalError("argument must be iterable");
}

Value do_dictsort(const Value& v, const CallArgs& args) {
  ArgBinder b("dictsort", args, {{"case_sensitive", Value(false)}, {"by", Value("key")}, {"reverse", Value(false)}});
  if (!v.is_dict()) {
    if (v.is_undefined()) throw EvalError(v.undefined_hint());
    throw EvalError(std::string("dictsort: '") + v.type_name() + "' object has no attribute 'items'");
  }
  size_t pos;
  if (b[1].is_string() && b[1].text() == "key") pos = 0;
  else if (b[1].is_string() && b[1].text() == "value") pos = 1;
  else throw EvalError("You can only sort by either \"key\" or \"value\"");
  std::vector<Value> items, keys;
  for (const auto& [k, val] : v.dict()) {
    items.push_back(Value::tuple({k, val}));
    const Value& key = pos == 0 ? k : val;
    keys.push_back(b[0].truthy() ? key : lower_if_string(key));
  }
  return Value::list(sorted(std::move(items), keys, b[2].truthy()));
}

Value do_sort(const Value& v, const CallArgs& args) {
  ArgBinder b("sort", args, {{"reverse", Value(false)}, {"case_sensitive", Value(false)}, {"attribute", Value::none()}});
  std::vector<Value> items = iterate(v), keys;
  for (const Value& item : items) keys.push_back(sort_key(item, b[2], b[1].truthy(), true));
  return Value::list(sorted(std::move(items), keys, b[0].truthy()));
}

Value do_unique(const Value& v, const CallArgs& args) {
  ArgBinder b("unique", args, {{"case_sensitive", Value(false)}, {"attribute", Value::none()}});
  Dict seen;  // used as a set
  std::vector<Value> out;
  for (const Value& item : iterate(v)) {
    Value key = sort_key(item, b[1], b[0].truthy(), false);
    if (seen.find(key)) continue;
    seen.set(std::move(key), Value::none());
    out.push_back(item);
  }
  return generator(std::move(out));
}

Value do_sum(const Value& v, const CallArgs& args) {
  ArgBinder b("sum", args, {{"attribute", Value::none()}, {"start", Value(0)}});
  Value total = b[1];
  if (total.is_string()) throw EvalError("sum() can't sum strings [use ''.join(seq) instead]");
  for (const Value& item : iterate(v)) total = binary_op("+", total, b[0].is_none() ? item : lookup_path(item, b[0]));
  return total;
}

Value do_join(const Value& v, const CallArgs& args) {
  ArgBinder b("join", args, {{"d", Value("")}, {"attribute", Value::none()}});
  const std::string sep = b[0].str();
  // The pieces as strings (shared, not copied), then the result's size:
  // refused before it is built when too big.
  std::vector<Value> pieces;
  uint64_t size = 0;
  for (const Value& item : iterate(v)) {
    const Value x = b[1].is_none() ? item : lookup_path(item, b[1]);
    pieces.push_back(x.is_string() ? x : Value(x.str()));
    size += (pieces.size() > 1 ? sep.size() : 0) + pieces.back().text().size();
    if (size > kMaxTextBytes) refuse_size(size);
  }
  will_build(size);
  std::string out;
  out.reserve(size);
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (i) out += sep;
    out += pieces[i].text();
  }
  return Value(std::move(out));
}

Value do_batch(const Value& v, const CallArgs& args) {
  ArgBinder b("batch", args, {{"linecount", Value(), true}, {"fill_with", Value::none()}});
  const int64_t n = int_param(b[0], "batch");
  if (n < 1) throw EvalError("batch: linecount must be at least 1 (unsupported otherwise)");
  const std::vector<Value> items = iterate(v);
  // The last row is filled up to n: check that before building it.
  if (!b[1].is_none()) will_build_list(std::max<uint64_t>(uint64_t(n), items.size()));
  std::vector<Value> out, row;
  for (const Value& item : items) {
    if (static_cast<int64_t>(row.size()) == n) out.push_back(Value::list(std::move(row))), row.clear();
    row.push_back(item);
  }
  if (!row.empty()) {
    if (!b[1].is_none())
      while (static_cast<int64_t>(row.size()) < n) row.push_back(b[1]);
    out.push_back(Value::list(std::move(row)));
  }
  return generator(std::move(out));
}

Value do_slice(const Value& v, const CallArgs& args) {
  ArgBinder b("slice", args, {{"slices", Value(), true}, {"fill_with", Value::none()}});
  const int64_t slices = int_param(b[0], "slice");
  if (slices < 1) throw EvalError("slice: slices must be at least 1 (unsupported otherwise)");
  const std::vector<Value> seq = iterate(v);
  will_build_list(uint64_t(slices));  // the slices, before making them
  const auto length = static_cast<int64_t>(seq.size());
  const int64_t per = length / slices, with_extra = length % slices;
  int64_t offset = 0;
  std::vector<Value> out;
  for (int64_t k = 0; k < slices; ++k) {
    const int64_t start = offset + k * per;
    if (k < with_extra) ++offset;
    const int64_t end = offset + (k + 1) * per;
    std::vector<Value> part(seq.begin() + start, seq.begin() + end);
    if (!b[1].is_none() && k >= with_extra) part.push_back(b[1]);
    out.push_back(Value::list(std::move(part)));
  }
  return generator(std::move(out));
}

}  // namespace weir::jinja::filters
