// The filters' shared helpers and the filters of each kind: numbers
// (filters_numbers.cpp), text (filters_text.cpp) and sequences
// (filters_sequences.cpp). filters.cpp has the list of names and dispatches.
#pragma once
#include <string>
#include <vector>

#include "text/jinja/builtins.h"

namespace weir::jinja::filters {

// What jinja2 returns as a generator: consumed once, no len(), always true.
Value generator(std::vector<Value> items);
// jinja2's soft_str: strings (Markup too) as they are, anything else as str().
Value soft_str(const Value& v);
// text as a Markup when `like` is one, else as a plain string.
Value same_kind(const Value& like, std::string text);
int64_t int_param(const Value& v, const char* what);
// jinja2's make_attrgetter: "a.b.0" looks up a, then b, then item 0, each as
// an item first and an attribute second.
Value lookup_path(const Value& item, const Value& attribute);
Value lower_if_string(const Value& v);
// The sort key of item: its attribute(s) (comma-separated when `several`),
// lowered unless case-sensitive.
Value sort_key(const Value& item, const Value& attribute, bool case_sensitive, bool several);
bool less(const Value& a, const Value& b);
// A stable sort of items by keys, as Python's sorted(key=..., reverse=...).
std::vector<Value> sorted(std::vector<Value> items, const std::vector<Value>& keys, bool reverse);

// numbers
Value do_round(const Value& v, const CallArgs& args);
Value do_int(const Value& v, const CallArgs& args);
Value do_float(const Value& v, const CallArgs& args);
// text
Value do_indent(const Value& v, const CallArgs& args);
Value do_title(const Value& v);
Value do_wordcount(const Value& v);
Value do_tojson(const Value& v, const CallArgs& args);
Value do_format(const Value& v, const CallArgs& args);
// sequences
Value select_or_reject(const Value& v, const CallArgs& args, bool keep, bool by_attribute, const char* name);
Value do_map(const Value& v, const CallArgs& args);
Value min_or_max(const Value& v, const CallArgs& args, bool want_max);
Value do_last(const Value& v);
Value do_first(const Value& v);
Value do_reverse(const Value& v);
Value do_dictsort(const Value& v, const CallArgs& args);
Value do_sort(const Value& v, const CallArgs& args);
Value do_unique(const Value& v, const CallArgs& args);
Value do_sum(const Value& v, const CallArgs& args);
Value do_join(const Value& v, const CallArgs& args);
Value do_batch(const Value& v, const CallArgs& args);
Value do_slice(const Value& v, const CallArgs& args);

}  // namespace weir::jinja::filters
