// One small template per feature of the Jinja engine, each rendered by
// Python's jinja2 too (one python3 run for the whole suite) and compared
// byte for byte; the error cases must fail in both.
#include <gtest/gtest.h>

#include <iostream>

#include "jinja_reference.h"

namespace weir {
namespace {

using test::JinjaCase;
using Cases = std::vector<JinjaCase>;

const Cases kWhitespace = {
    {"ws_trim_blocks", "{% if true %}\nyes\n{% endif %}\nafter"},
    {"ws_lstrip_blocks", "x\n    {% if true %}\n    y\n    {% endif %}\nz"},
    {"ws_lstrip_not_after_text", "a  {% if true %}b{% endif %}"},
    {"ws_lstrip_template_start", "  {% if true %}x{% endif %}"},
    {"ws_lstrip_tabs_and_unicode_space", "x\n\t \u3000{% if true %}y{% endif %}"},
    {"ws_lstrip_after_trimmed_newline", "{% if true %}\n  {% endif %}|"},
    {"ws_no_lstrip_for_output", "a\n  {{ 'b' }}"},
    {"ws_minus_both_sides", "a  \n {%- if true -%} \n b \n {%- endif -%}\n  c"},
    {"ws_minus_output", "a \n {{- 'b' -}} \n c"},
    {"ws_minus_strips_unicode_space", "a\u3000\n {{- 'b' -}} \u3000\nc"},
    {"ws_plus_disables_lstrip", "x\n  {%+ if true %}y{% endif %}"},
    {"ws_plus_disables_trim", "{% if true +%}\nx{% endif %}"},
    {"ws_comment", "a{# comment #}b\n{# line comment #}\nc"},
    {"ws_comment_minus", "a  {#- c -#}  b"},
    {"ws_comment_lstrip", "a\n   {# c #}\nb"},
    {"ws_raw", "{% raw %}{{ not evaluated }}{% if %}{% endraw %}"},
    {"ws_raw_whitespace", "  {% raw %}\n  {{ x }}\n  {% endraw %}\nq"},
    {"ws_raw_minus", "{%- raw -%}  {{x}}  {%- endraw -%}  q"},
    {"ws_trailing_newline_dropped", "a\n"},
    {"ws_one_trailing_newline_dropped", "a\n\n"},
    {"ws_crlf", "a\r\nb\r\n{% if true %}\r\nc{% endif %}\r\nd\r\n"},
    {"ws_cr_in_string", "{{ 'a\r\nb' }}"},
    {"ws_nested_blocks", "{% for i in [1, 2] %}\n  {% if i > 1 %}\n    big {{ i }}\n  {% else %}\n    small {{ i }}\n  {% endif %}\n{% endfor %}\n"},
    {"ws_output_then_block_newline", "{{ 'a' }}\n{% if true %}b{% endif %}\n"},
    {"ws_raw_in_loop", "{% for i in [1, 2] %}\n  {% raw %}{{ i }}\n  {% endraw %}\n{% endfor %}"},
    {"err_ws_raw_plus_close", "{% raw +%}x{% endraw %}"},
};

const Cases kLiterals = {
    {"lit_strings", R"({{ 'single' }} {{ "double" }} {{ 'it\'s' }} {{ "say \"hi\"" }} {{ 'a' 'b' }})"},
    {"lit_escapes", R"({{ 'tab\tnew\nline\\ \x41\u00e9\U0001F600 \101 \q' }})"},
    {"lit_ints", "{{ 42 }} {{ -7 }} {{ 1_000_000 }} {{ 0x1F }} {{ 0o17 }} {{ 0b101 }}"},
    {"lit_floats", "{{ 1.5 }} {{ 1e3 }} {{ 2.5e-3 }} {{ 0.1 + 0.2 }} {{ 1e16 }} {{ 1e15 }} {{ 1e-5 }} {{ 123.0 }}"},
    {"lit_float_repr", "{{ 1/3 }} {{ 2/3 * 3 }} {{ 1e22 }} {{ 1.5e300 * 1e10 }} {{ -0.0 }} {{ 100.0 / 7 }}"},
    {"lit_bools_none", "{{ true }} {{ false }} {{ True }} {{ none }} {{ None }} {{ False }}"},
    {"lit_list_repr", "{{ [1, 'a', none, true, 1.5, [2], {'k': 'v'}] }}"},
    {"lit_tuple_repr", "{{ (1,) }} {{ (1, 2) }} {{ () }} {{ 1, 2 }}"},
    {"lit_dict_repr", "{{ {'b': 1, 'a': {'x': [1, 2]}, 3: none} }}"},
    {"lit_string_repr_quotes", R"({{ ["it's", 'say "x"', 'both \' and "', 'back\\slash'] }})"},
    {"lit_string_repr_controls", R"({{ ['\n\r\t\x01\x7f', '\u00a0\u00ad\u3000\u200b', 'é中文😀'] }})"},
    {"lit_trailing_commas", "{{ [1, 2,] }} {{ {'a': 1,} }} {{ (1, 2,) }}"},
    {"lit_nested_braces", "{{ {'a': {'b': 1}}}}"},
};

const Cases kOperators = {
    {"op_arithmetic", "{{ 7 + 2 }} {{ 7 - 2 }} {{ 7 * 2 }} {{ 7 / 2 }} {{ 7 // 2 }} {{ 7 % 2 }} {{ 2 ** 10 }}"},
    {"op_floor_mod_signs", "{{ -7 // 2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }} {{ 10 / 4 }}"},
    {"op_pow_left_assoc", "{{ 2 ** 3 ** 2 }} {{ -2 ** 2 }} {{ 2 ** -1 }} {{ 2 ** 0.5 }}"},
    {"op_precedence", "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 10 - 2 - 3 }} {{ 2 * 3 ~ 4 }} {{ 'a' ~ 1 }}"},
    {"op_mixed_numbers", "{{ 1 + 1.5 }} {{ true + 1 }} {{ 3 * true }} {{ 1 == 1.0 }} {{ true == 1 }}"},
    {"op_string_concat", "{{ 'a' + 'b' }} {{ 'a' ~ 1 ~ none ~ true }} {{ 'ab' * 3 }} {{ 3 * 'x' }}"},
    {"op_list_concat", "{{ [1, 2] + [3] }} {{ (1,) + (2,) }} {{ [0] * 3 }}"},
    {"op_comparisons", "{{ 1 < 2 }} {{ 2 <= 2 }} {{ 'a' < 'b' }} {{ 'B' < 'a' }} {{ [1, 2] < [1, 3] }} {{ 1 < 2 < 3 }} {{ 1 < 3 < 2 }}"},
    {"op_equality", "{{ [1] == [1] }} {{ {'a': 1} == {'a': 1} }} {{ none == none }} {{ 'a' != 'b' }} {{ 1 == '1' }}"},
    {"op_in", "{{ 'b' in 'abc' }} {{ 1 in [1, 2] }} {{ 'a' in {'a': 1} }} {{ 'x' not in 'abc' }} {{ not 1 in [1] }}"},
    {"op_and_or_values", "{{ 0 or 'x' }} {{ 1 and 'y' }} {{ '' and 1 }} {{ none or [] }} {{ not '' }}"},
    {"op_conditional", "{{ 'a' if true else 'b' }}|{{ 'a' if false else 'b' }}|{{ 'a' if false }}|{{ (1 if false)|default('z') }}"},
    {"op_conditional_chain", "{% for x in [1, 2, 3] %}{{ 'one' if x == 1 else 'two' if x == 2 else 'many' }} {% endfor %}"},
    {"op_unary", "{{ -3 }} {{ +3 }} {{ -(-3) }} {{ - 2.5 }} {{ not true }} {{ -3|abs }}"},
    {"op_markup_plus_escapes", "{{ '<t>' + x|tojson }}|{{ x|tojson + '<' }}|{{ 'a' ~ x|tojson }}", R"({"x": {"a": "<&>"}})"},
    {"op_percent_format", "{{ '%s-%d-%05.2f-%x-%r' % ('a', 3, 3.14159, 255, 'q') }} {{ '%(a)s' % {'a': 1} }} {{ '%s' % 5 }}"},
    {"op_percent_mapping_like", "{{ 'a' % [1, 2] }} {{ 'v' % nothing }} {{ '%s' % [1, 2] }} {{ '%s|%5.1f|%-4d|' % ('é', 2.25, 7) }}"},
    {"op_markup_methods", "{% set m = '<a>'|safe %}{{ m.replace('a', '<') }} {{ m.strip('<') }} {{ m|trim('<>') }} {{ m.split('a') }} {{ m[0] }} {{ m|list }} {{ m * 2 }} {{ ('%s'|safe) % '<' }} {{ ('x'|safe).join(['<', '>']) }}"},
    {"err_op_str_plus_int", "{{ 'a' + 1 }}"},
    {"err_op_int_plus_str", "{{ 1 + 'a' }}"},
    {"err_op_div_zero", "{{ 1 / 0 }}"},
    {"err_op_floordiv_zero", "{{ 7 // 0 }}"},
    {"err_op_compare_types", "{{ 1 < 'a' }}"},
    {"err_op_none_less", "{{ none < 1 }}"},
    {"err_op_in_int", "{{ 1 in 'abc' }}"},
    {"err_op_neg_str", "{{ -'a' }}"},
    {"err_op_list_plus_tuple", "{{ [1] + (2,) }}"},
};

const Cases kAccess = {
    {"acc_attr_and_item", "{{ m.role }} {{ m['role'] }} {{ m.content.text }} {{ m['content']['text'] }}",
     R"({"m": {"role": "user", "content": {"text": "hi"}}})"},
    {"acc_missing_key", "[{{ m.nope }}][{{ m['nope'] }}][{{ m.nope is defined }}]", R"({"m": {"a": 1}})"},
    {"acc_index", "{{ xs[0] }} {{ xs[-1] }} {{ xs[10] }}| {{ 'abc'[1] }} {{ 'abc'[-1] }} {{ xs.0 }}", R"({"xs": [1, 2, 3]})"},
    {"acc_slices", "{{ xs[1:] }} {{ xs[:-1] }} {{ xs[::-1] }} {{ xs[::2] }} {{ xs[5:] }} {{ 'hello'[1:3] }} {{ 'héllo'[::-1] }}",
     R"({"xs": [1, 2, 3, 4]})"},
    {"acc_slice_negative_step", "{{ xs[3:0:-1] }} {{ xs[-2:] }} {{ xs[:-2:-1] }} {{ 'abcdef'[-3:] }}", R"({"xs": [1, 2, 3, 4, 5]})"},
    {"acc_method_vs_key", "{{ d['items'] }} {{ d.items()|list }} {{ d.get('items') }}", R"({"d": {"items": 5}})"},
    {"acc_none_attr", "[{{ n.x }}][{{ n[0] }}][{{ i.x }}]", R"({"n": null, "i": 3})"},
    {"acc_unicode_index", "{{ s[0] }}{{ s[1] }}{{ s|length }}{{ s[-1] }}", R"({"s": "中文😀"})"},
    {"acc_undefined_prints_empty", "[{{ nothing }}][{{ nothing|length }}][{{ nothing is defined }}][{% for x in nothing %}x{% endfor %}]"},
    {"acc_undefined_equality", "{{ nothing == nothing2 }} {{ nothing == none }} {{ nothing ~ 'q' }} {{ 'a' in nothing }}"},
    {"acc_empty_subscript", "{{ d[()] }} {{ 'x' or d[] }}", R"({"d": {"a": 1}})"},
    {"err_acc_undefined_attr", "{{ nothing.attr }}"},
    {"err_acc_undefined_item", "{{ nothing[0] }}"},
    {"err_acc_missing_then_attr", "{{ m.nope.deeper }}", R"({"m": {"a": 1}})"},
    {"err_acc_undefined_plus", "{{ nothing + 1 }}"},
    {"err_acc_call_undefined", "{{ nothing() }}"},
};

const Cases kStatements = {
    {"st_if_elif_else", "{% for x in [1, 2, 3] %}{% if x == 1 %}one{% elif x == 2 %}two{% else %}other{% endif %};{% endfor %}"},
    {"st_for_loop_vars", "{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}"},
    {"st_for_prev_next", "{% for x in [1, 2, 3] %}[{{ loop.previtem }}|{{ loop.nextitem }}]{% endfor %}"},
    {"st_for_cycle_depth", "{% for x in [1, 2, 3] %}{{ loop.cycle('a', 'b') }}{{ loop.depth }}{{ loop.depth0 }}{% endfor %}"},
    {"st_for_changed", "{% for x in [1, 1, 2, 2, 1] %}{% if loop.changed(x) %}{{ x }}{% endif %}{% endfor %}"},
    {"st_for_else", "{% for x in [] %}x{% else %}empty{% endfor %}|{% for x in [1] %}x{% else %}empty{% endfor %}"},
    {"st_for_filter", "{% for m in ms if m.role != 'system' %}{{ loop.index }}/{{ loop.length }}:{{ m.role }} {% endfor %}",
     R"({"ms": [{"role": "system"}, {"role": "user"}, {"role": "assistant"}]})"},
    {"st_for_unpack", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for a, b in [(1, 2), [3, 4]] %}{{ a }}{{ b }}{% endfor %}",
     R"({"d": {"z": 1, "a": 2}})"},
    {"st_for_dict_keys", "{% for k in d %}{{ k }}{% endfor %}", R"({"d": {"z": 1, "a": 2}})"},
    {"st_for_break_continue", "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}"},
    {"st_for_nested_loop", "{% for i in [1, 2] %}{% for j in 'ab' %}{{ i }}{{ j }}{{ loop.index }} {% endfor %}{{ loop.index }}|{% endfor %}"},
    {"st_scope_for_does_not_leak", "{% set x = 1 %}{% for i in [1, 2] %}{% set x = x + 10 %}{{ x }} {% endfor %}{{ x }}"},
    {"st_scope_per_iteration", "{% for i in range(3) %}{% if i == 1 %}{% set y = 'set' %}{% endif %}[{{ y }}]{% endfor %}"},
    {"st_scope_if_leaks", "{% if true %}{% set x = 3 %}{% endif %}{{ x }}"},
    {"st_scope_nested_for", "{% for i in [1, 2] %}{% for j in [1] %}{% set y = i %}{% endfor %}[{{ y }}]{% endfor %}"},
    {"st_namespace", "{% set ns = namespace(n=0, s='') %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% set ns.s = ns.s ~ i %}{% endfor %}{{ ns.n }} {{ ns.s }}"},
    {"st_namespace_new_attr", "{% set ns = namespace() %}{% set ns.found = true %}{{ ns.found }} {{ ns.missing is defined }}"},
    {"st_namespace_repr", "{% set ns = namespace(a=1, b='x') %}{{ ns }}"},
    {"st_set_tuple", "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set c = 3, 4 %}{{ c }}"},
    {"st_set_block", "{% set x %}a{{ 1 + 1 }}b{% endset %}[{{ x }}] {{ x|length }}"},
    {"st_set_block_filter", "{% set x | upper | replace('B', '-') %}abc{% endset %}{{ x }}"},
    {"st_set_overrides_context", "{{ x }}{% set x = 'new' %}{{ x }}", R"({"x": "old"})"},
    {"st_macro", "{% macro greet(name, greeting='Hello') %}{{ greeting }}, {{ name }}!{% endmacro %}{{ greet('a') }} {{ greet('b', 'Hi') }} {{ greet(greeting='Yo', name='c') }}"},
    {"st_macro_default_uses_param", "{% macro m(a, b=2, c=a) %}{{ a }}{{ b }}{{ c }}{% endmacro %}{{ m(1) }}|{{ m(1, c=5) }}"},
    {"st_macro_missing_arg", "{% macro m(a, b) %}[{{ a }}][{{ b }}]{% endmacro %}{{ m(1) }}"},
    {"st_macro_varargs_kwargs", "{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, z=4) }}"},
    {"st_macro_sees_later_globals", "{% macro m() %}{{ x }}{% endmacro %}{% set x = 1 %}{{ m() }}"},
    {"st_macro_scope", "{% macro m() %}{% set y = 1 %}{{ y }}{% endmacro %}{{ m() }}[{{ y }}]"},
    {"st_macro_recursive", "{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(4) }}"},
    {"st_macro_in_expression", "{% macro m(x) %}<{{ x }}>{% endmacro %}{{ m(1) ~ m(2) }} {{ m(3)|upper }} {{ m(4)|length }}"},
    {"st_macro_repr", "{% macro m() %}{% endmacro %}{{ m }} {{ m is callable }}"},
    {"st_filter_block", "{% filter upper %}hello {{ 'world' }}{% endfilter %}"},
    {"st_filter_block_chain", "{% filter replace('a', 'b') | upper %}banana{% endfilter %}"},
    {"st_with", "{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}[{{ a }}]"},
    {"st_generation", "{% for m in ['a', 'b'] %}{% generation %}<{{ m }}>{% endgeneration %}{% endfor %}"},
    {"st_print", "{% print 'x' ~ 1 %}"},
    {"st_for_else_scope", "{% for x in [] %}{% else %}{% set z = 1 %}{% endfor %}[{{ z }}]"},
    {"st_macro_attributes", "{% macro m(a, b=1) %}{% endmacro %}{{ m.name }} {{ m.arguments }}"},
    {"st_loop_object", "{% for x in [1, 2] %}{{ loop }} {{ loop is callable }} {{ loop['index'] }};{% endfor %}"},
    {"err_st_unpack_trailing_comma", "{% for a, in [(1,), (2,)] %}{{ a }}{% endfor %}"},
    {"st_break_in_filter_block", "{% for i in range(3) %}{% filter upper %}a{% if i == 1 %}{% break %}{% endif %}b{% endfilter %}|{% endfor %}"},
    {"st_continue_in_with", "{% for i in range(3) %}{% with x = i %}a{% if i == 1 %}{% continue %}{% endif %}b{% endwith %}|{% endfor %}"},
    {"st_break_in_set_block", "{% for i in range(3) %}{% set x %}a{% if i == 1 %}{% break %}{% endif %}b{% endset %}{{ x }}|{% endfor %}"},
    {"st_macro_sees_definition_scope", "{% macro m() %}[{{ i }}]{% endmacro %}{% for i in [1, 2] %}{{ m() }}{% endfor %}"},
    {"st_macro_through_namespace", "{% set ns = namespace(f=none) %}{% macro m() %}x{% endmacro %}{% set ns.f = m %}{{ ns.f() }}"},
    {"err_st_break_in_generation", "{% for i in range(3) %}{% generation %}{% break %}{% endgeneration %}{% endfor %}"},
    {"err_st_macro_before_definition", "{{ m() }}{% macro m() %}x{% endmacro %}"},
    {"err_st_unpack_count", "{% for a, b in [(1, 2, 3)] %}{% endfor %}"},
    {"err_st_macro_too_many", "{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}"},
    {"err_st_macro_bad_keyword", "{% macro m(a) %}{% endmacro %}{{ m(z=2) }}"},
    {"err_st_set_attr_on_dict", "{% set d = {} %}{% set d.x = 1 %}"},
    {"err_st_for_over_int", "{% for x in 5 %}{% endfor %}"},
};

const Cases kFilters = {
    {"f_trim", "[{{ '  a b \n'|trim }}][{{ 'xxaxx'|trim('x') }}][{{ '\u3000a\u00a0'|trim }}]"},
    {"f_case", "{{ 'hello WORLD'|upper }} {{ 'Hello'|lower }} {{ 'hello WORLD'|capitalize }} {{ 'straße ǆ'|upper }}"},
    {"f_title", "{{ 'hello-world (foo) it\\'s a[b]c{d}<e>f\tg'|title }}"},
    {"f_length_count", "{{ 'héllo'|length }} {{ [1, 2]|count }} {{ {'a': 1}|length }}"},
    {"f_first_last", "{{ [1, 2, 3]|first }} {{ [1, 2, 3]|last }} {{ 'abc'|first }} {{ 'abc'|last }} [{{ []|first }}]"},
    {"f_join", "{{ [1, 2, 3]|join }} {{ ['a', 'b']|join(', ') }} {{ ms|join('/', attribute='role') }} {{ [1, none]|join('-') }}",
     R"({"ms": [{"role": "a"}, {"role": "b"}]})"},
    {"f_default", "[{{ u|default('d') }}][{{ none|default('d') }}][{{ ''|default('d') }}][{{ ''|default('d', true) }}][{{ 0|d('z', boolean=true) }}]"},
    {"f_tojson", "{{ d|tojson }}", R"({"d": {"b": [1, 2.5, null, true], "a": "x\"y", "c": {"z": 1, "y": []}}})"},
    {"f_tojson_indent", "{{ d|tojson(indent=2) }}", R"({"d": {"b": [1, {}], "a": "s", "e": []}})"},
    {"f_tojson_escapes", "{{ s|tojson }}", R"({"s": "<a href='x'>&amp; é 中 😀 \u0001 \u007f</a>"})"},
    {"f_tojson_scalars", "{{ 1|tojson }} {{ 1.5|tojson }} {{ none|tojson }} {{ true|tojson }} {{ 'x'|tojson }} {{ (1, 2)|tojson }}"},
    {"f_string", "{{ 1|string }} {{ [1]|string }} {{ none|string ~ 'x' }} {{ (1|string) is string }}"},
    {"f_int", "{{ '3.7'|int }} {{ 'abc'|int }} {{ none|int }} {{ true|int }} {{ ' 12 '|int }} {{ '1e3'|int }} {{ '0x1A'|int(base=16) }} {{ '1_0'|int }} {{ 3.9|int }} {{ -3.9|int }} {{ 'x'|int(7) }}"},
    {"f_float", "{{ '3.5'|float }} {{ 'x'|float }} {{ 3|float }} {{ ' 1e3 '|float }} {{ 'inf'|float }} {{ '-nan'|float }} {{ '1_0.5'|float }}"},
    {"f_list", "{{ 'abc'|list }} {{ {'a': 1, 'b': 2}|list }} {{ (1, 2)|list }} {{ range(3)|list }}"},
    {"f_items", "{% for k, v in d|items %}{{ k }}{{ v }}{% endfor %}|{{ d|items|list }}", R"({"d": {"b": 1, "a": 2}})"},
    {"f_replace", "{{ 'aaa'|replace('a', 'b') }} {{ 'aaa'|replace('a', 'b', 2) }} {{ 'ab'|replace('', '-') }}"},
    {"f_safe_escape", "{{ '<b>'|safe }} {{ '<b> & \"q\" \\'s\\''|escape }} {{ '<x>'|e }} {{ ('<a>'|safe)|e }}"},
    {"f_indent", "[{{ 'a\nb\n\nc'|indent }}][{{ 'a\nb'|indent(2, true) }}][{{ 'a\n\nb\n'|indent(2, blank=true) }}][{{ 'a\nb'|indent('> ') }}]"},
    {"f_map", "{{ ms|map(attribute='role')|list }} {{ ['a', 'b']|map('upper')|join }} {{ ms|map(attribute='x', default='-')|list }}",
     R"({"ms": [{"role": "u"}, {"role": "a"}]})"},
    {"f_map_nested_attr", "{{ ms|map(attribute='f.name')|join(',') }} {{ ms|map(attribute='l.0')|list }}",
     R"({"ms": [{"f": {"name": "x"}, "l": [1]}, {"f": {"name": "y"}, "l": [2]}]})"},
    {"f_select_reject", "{{ [1, 2, 3, 4]|select('odd')|list }} {{ [1, 2, 3, 4]|reject('odd')|list }} {{ [0, 1, '', 'a']|select|list }} {{ [1, 5, 9]|select('gt', 4)|list }}"},
    {"f_selectattr", "{{ ms|selectattr('role', 'equalto', 'user')|map(attribute='c')|join }} {{ ms|rejectattr('role', 'eq', 'user')|list|length }} {{ ms|selectattr('tool')|list|length }}",
     R"({"ms": [{"role": "user", "c": "a"}, {"role": "bot", "c": "b", "tool": 1}, {"role": "user", "c": "c"}]})"},
    {"f_unique", "{{ ['a', 'A', 'b', 'a']|unique|list }} {{ ['a', 'A']|unique(case_sensitive=true)|list }} {{ [1, 1.0, true, 2]|unique|list }}"},
    {"f_reverse", "{{ [1, 2, 3]|reverse|list }} {{ 'abc'|reverse }} {{ (1, 2)|reverse|join }}"},
    {"f_sort", "{{ [3, 1, 2]|sort }} {{ ['b', 'A', 'a', 'C']|sort }} {{ ['b', 'A', 'a', 'C']|sort(case_sensitive=true) }} {{ [3, 1, 2]|sort(reverse=true) }}"},
    {"f_sort_attribute", "{{ ms|sort(attribute='n')|map(attribute='id')|join }} {{ ms|sort(attribute='g,n')|map(attribute='id')|join }}",
     R"({"ms": [{"id": "a", "n": 2, "g": 1}, {"id": "b", "n": 1, "g": 2}, {"id": "c", "n": 3, "g": 1}]})"},
    {"f_dictsort", "{{ {'b': 1, 'A': 2, 'a': 3}|dictsort }} {{ {'b': 1, 'a': 2}|dictsort(by='value', reverse=true) }}"},
    {"f_abs_round", "{{ -3|abs }} {{ -2.5|abs }} {{ 2.5|round }} {{ 3.5|round }} {{ 2.55|round(1) }} {{ 2.4|round(0, 'ceil') }} {{ 7|round }} {{ -2.5|round(0, 'floor') }} {{ 1.23456|round(3) }}"},
    {"f_wordcount_center", "{{ 'one two  three, four'|wordcount }} [{{ 'ab'|center(7) }}] [{{ 'abc'|center(6) }}]"},
    {"f_sum_min_max", "{{ [1, 2, 3]|sum }} {{ [1, 2, 3]|min }} {{ [1, 2, 3]|max }} {{ ms|sum(attribute='n') }} {{ ['b', 'A']|min }} {{ ['b', 'A']|max }} [{{ []|max }}] {{ [1.5, 2]|sum(start=10) }}",
     R"({"ms": [{"n": 2}, {"n": 5}]})"},
    {"f_batch_slice", "{{ [1, 2, 3, 4, 5]|batch(2)|list }} {{ [1, 2, 3]|batch(2, 'x')|list }} {{ [1, 2, 3, 4, 5]|slice(2)|list }} {{ [1, 2, 3]|slice(2, 0)|list }}"},
    {"f_format", "{{ '%s is %d'|format('x', 3) }} {{ '%(a)s'|format(a='k') }}"},
    {"f_attr", "{% set ns = namespace(a=5) %}{{ ns|attr('a') }} [{{ d|attr('a') }}] {{ d|attr('items') is callable }}", R"({"d": {"a": 1}})"},
    {"f_chain", "{{ '  Hello  '|trim|lower|replace('l', 'L')|center(9) }}"},
    {"f_on_undefined", "[{{ u|upper }}][{{ u|trim }}][{{ u|join(',') }}][{{ u|list }}][{{ u|first }}][{{ u|string }}]"},
    {"f_in_loop_header", "{% for m in ms|selectattr('role', 'ne', 'system') %}{{ m.role }}{% endfor %}",
     R"({"ms": [{"role": "system"}, {"role": "user"}]})"},
    {"f_generator_truthy", "{{ 'yes' if ([]|select) else 'no' }} {{ 'yes' if [] else 'no' }}"},
    {"f_generator_consumed_once", "{% set g = [1, 2, 3]|select('odd') %}{{ g|list }}{{ g|list }}"},
    {"f_int_infinite_default", "{{ 'inf'|int }} {{ '-inf'|int(7) }} {{ 'nan'|int }}"},
    {"f_round_int_negative", "{{ 7|round(-1) }} {{ 15|round(-1) }} {{ 25|round(-1) }} {{ -15|round(-1) }} {{ 1234|round(-2) }} {{ 17|round(-1, 'floor') }}"},
    {"f_select_map_on_false", "{{ false|map('string')|list }} {{ none|select|list }} {{ 0|selectattr('x')|list }} {{ ''|reject|list }}"},
    {"f_markup_iterates_plain", "{{ ('ab'|safe)|list }} {{ ('ab'|safe)|reverse|list }} {{ ('ab'|safe)|unique|list }}"},
    {"err_f_indent_non_string", "{{ [1, 2]|indent }}"},
    {"err_f_map_true", "{{ true|map('string')|list }}"},
    {"err_f_length_of_generator", "{{ [1, 2]|select|length }}"},
    {"err_f_tojson_undefined", "{{ u|tojson }}"},
    {"err_f_int_undefined", "{{ u|int }}"},
    {"err_f_round_method", "{{ 1.5|round(0, 'up') }}"},
    {"f_tojson_ascii_sorted", "{{ d|tojson(ensure_ascii=true, sort_keys=true) }}", R"({"d": {"b": "é", "a": "😀"}})"},
    {"err_f_sum_strings", "{{ ['a', 'b']|sum }}"},
    {"err_f_unknown", "{{ 1|nosuchfilter }}"},
    {"err_f_items_of_list", "{{ [1]|items|list }}"},
    {"err_f_dictsort_by", "{{ {'a': 1}|dictsort(by='x') }}"},
};

const Cases kTests = {
    {"t_defined", "{{ x is defined }} {{ y is defined }} {{ x is undefined }} {{ y is not defined }}", R"({"x": null})"},
    {"t_types", "{{ 'a' is string }} {{ 1 is number }} {{ 1.5 is number }} {{ true is number }} {{ 1 is integer }} {{ true is integer }} {{ 1.0 is float }} {{ true is boolean }}"},
    {"t_none_true_false", "{{ none is none }} {{ x is none }} {{ true is true }} {{ 1 is true }} {{ false is false }} {{ 0 is false }}", R"({"x": 0})"},
    {"t_containers", "{{ d is mapping }} {{ l is mapping }} {{ l is iterable }} {{ 'a' is iterable }} {{ 1 is iterable }} {{ d is sequence }} {{ l is sequence }} {{ 's' is sequence }} {{ 1 is sequence }}",
     R"({"d": {}, "l": []})"},
    {"t_undefined_kinds", "{{ u is iterable }} {{ u is sequence }} {{ u is mapping }} {{ u is none }} {{ u is string }}"},
    {"t_callable", "{% macro m() %}{% endmacro %}{{ m is callable }} {{ range is callable }} {{ 'a'.upper is callable }} {{ 1 is callable }} {{ namespace is callable }}"},
    {"t_numbers", "{{ 4 is even }} {{ 3 is odd }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(4) }} {{ 3.0 is odd }}"},
    {"t_comparisons", "{{ 3 is eq 3 }} {{ 3 is equalto 4 }} {{ 3 is ne 4 }} {{ 3 is lt 4 }} {{ 3 is le 3 }} {{ 3 is gt 4 }} {{ 3 is ge 3 }} {{ 3 is greaterthan 2 }} {{ 3 is lessthan 2 }}"},
    {"t_in_sameas", "{{ 2 is in [1, 2] }} {{ 'x' is in 'abc' }} {{ none is sameas none }} {{ true is sameas true }} {{ l is sameas l }} {{ l is sameas [] }}", R"({"l": []})"},
    {"t_lower_upper", "{{ 'abc' is lower }} {{ 'aBc' is lower }} {{ 'ABC' is upper }} {{ '123' is upper }} {{ 'É' is upper }}"},
    {"t_filter_test", "{{ 'upper' is filter }} {{ 'nope' is filter }} {{ 'odd' is test }}"},
    {"t_escaped", "{{ 'a' is escaped }} {{ ('a'|safe) is escaped }} {{ (x|tojson) is escaped }}", R"({"x": 1})"},
    {"t_not_precedence", "{{ not 'a' is string }} {{ 'a' is not string }} {{ not x is defined and true }}"},
    {"t_test_arg_forms", "{{ x is divisibleby 3 and x is not divisibleby 2 }} {{ 1 if x is odd else 2 }}", R"({"x": 9})"},
    {"t_undefined_callable", "{{ nothing is callable }} {{ nothing is iterable }} {{ nothing is sequence }}"},
    {"err_t_unknown", "{{ 1 is nosuchtest }}"},
    {"err_t_odd_string", "{{ 'a' is odd }}"},
};

const Cases kMethods = {
    {"m_format_fields", "{{ '{} of {}'.format('a', 3) }}|{{ '{1}{0}{1}'.format('x', 'y') }}|{{ '{n} is {v}'.format(n='k', v=2.5) }}|{{ '{{}} {}'.format(1) }}|{{ '{0[0]}-{0[1]}'.format(['p', 'q']) }}|{{ '{d[k]}'.format(d={'k': 'v'}) }}"},
    {"m_format_specs", "[{{ '{:>6}'.format('ab') }}][{{ '{:<6}|'.format('ab') }}][{{ '{:^7}'.format('ab') }}][{{ '{:*^7}'.format('ab') }}][{{ '{:.2}'.format('abcdef') }}][{{ '{:06.2f}'.format(3.14159) }}][{{ '{:+d}'.format(5) }}][{{ '{:x} {:X} {:#b} {:o}'.format(255, 255, 5, 8) }}][{{ '{:,}'.format(1234567) }}][{{ '{:e}'.format(12345.678) }}][{{ '{:.1%}'.format(0.256) }}][{{ '{:>{w}}'.format('r', w=4) }}]"},
    {"m_format_floats", "{{ '{}'.format(1.0) }} {{ '{:.3}'.format(2.0) }} {{ '{:g}'.format(0.0001) }} {{ '{:.2f}'.format(-0.5) }} {{ '{:08.3f}'.format(-3.5) }} {{ '{:=+8}'.format(12) }} {{ '{:05}'.format(-42) }}"},
    {"m_format_conversions", "{{ '{!r}'.format('a') }} {{ '{!s}'.format(none) }} {{ '{}'.format(true) }} {{ '{}'.format([1, 'b']) }} {{ '{:5}|'.format(true) }} {{ '{:d}'.format(true) }}"},
    {"m_format_tool_line", "{% for t in tools %}{{ '- {name}: {description}\n'.format(name=t.name, description=t.description) }}{% endfor %}", R"({"tools": [{"name": "get_weather", "description": "Weather in a city"}, {"name": "add", "description": "Sum"}]})"},
    {"err_m_format_missing_index", "{{ '{} {}'.format(1) }}"},
    {"err_m_format_missing_key", "{{ '{x}'.format(y=1) }}"},
    {"err_m_format_single_brace", "{{ 'a } b'.format() }}"},
    {"err_m_format_mixed_numbering", "{{ '{} {0}'.format(1) }}"},
    {"err_m_format_bad_spec", "{{ '{:d}'.format('s') }}"},
    {"m_strip", "[{{ '  a  '.strip() }}][{{ '  a  '.lstrip() }}][{{ '  a  '.rstrip() }}][{{ 'xyax'.strip('xy') }}][{{ '\n\tz\n'.strip() }}]"},
    {"m_split", "{{ 'a,b,,c'.split(',') }} {{ '  a  b c '.split() }} {{ 'a b c'.split(' ', 1) }} {{ 'a  b c  '.split(none, 1) }} {{ 'a,b,c'.rsplit(',', 1) }} {{ '  a b c  '.rsplit(none, 1) }}"},
    {"m_split_think", "{{ c.split('</think>')[-1] }}|{{ c.split('</think>')[0] }}", R"({"c": "<think>\nhmm\n</think>\n\nanswer"})"},
    {"m_splitlines", "{{ 'a\nb\r\nc\rd\n'.splitlines() }} {{ 'a\nb\n'.splitlines(true) }} {{ ''.splitlines() }}"},
    {"m_startswith_endswith", "{{ 'hello'.startswith('he') }} {{ 'hello'.endswith('lo') }} {{ 'hello'.startswith(('x', 'h')) }} {{ 'hello'.endswith(('x',)) }} {{ 'hello'.startswith('l', 2) }}"},
    {"m_case", "{{ 'ab cD'.upper() }} {{ 'AB'.lower() }} {{ 'hello world it\\'s'.title() }} {{ 'hELLO'.capitalize() }} {{ 'ΣΑΣ ΟΔΟΣ'.lower() }}"},
    {"m_replace_find", "{{ 'aaa'.replace('a', 'b', 2) }} {{ 'héllo'.find('l') }} {{ 'hello'.rfind('l') }} {{ 'hello'.find('z') }} {{ 'hello'.index('e') }} {{ 'hello'.count('l') }} {{ 'hello'.find('l', 3) }}"},
    {"m_join_pad", "{{ '-'.join(['a', 'b']) }} {{ 'ab'.center(6, '*') }} {{ 'ab'.ljust(4, '.') }} {{ 'ab'.rjust(4) }} {{ '42'.zfill(5) }} {{ '-42'.zfill(5) }}"},
    {"m_partition_affix", "{{ 'a=b=c'.partition('=') }} {{ 'a=b=c'.rpartition('=') }} {{ 'abc'.removeprefix('a') }} {{ 'abc'.removesuffix('c') }}"},
    {"m_is_methods", "{{ '123'.isdigit() }} {{ 'abc'.isalpha() }} {{ 'a1'.isalnum() }} {{ ' \t'.isspace() }} {{ ''.isspace() }} {{ 'abc'.islower() }} {{ 'ABC'.isupper() }} {{ 'é'.isascii() }}"},
    {"m_dict", "{{ d.keys()|list }} {{ d.values()|list }} {{ d.items()|list }} {{ d.get('a') }} {{ d.get('z') }} {{ d.get('z', 0) }} {{ d.keys() }} {{ d.items() }}",
     R"({"d": {"a": 1, "b": [2]}})"},
    {"m_list", "{{ l.index(2) }} {{ l.count(1) }} {{ (1, 2).index(2) }}", R"({"l": [1, 2, 1]})"},
    {"m_unsafe_attribute_prints_empty", "[{{ l.append }}][{{ d.update }}]", R"({"l": [], "d": {}})"},
    {"m_find_edges", "{{ 'abc'.find('', 5) }} {{ 'abc'.count('', 5) }} {{ 'abc'.find('', 3) }} {{ 'abc'.count('', 3) }} {{ 'abc'.rfind('c', -1) }} {{ 'abc'.find('a', -10, 1) }} {{ 'aaaa'.count('aa') }}"},
    {"m_swapcase", "{{ 'aAßǅΣ x'.swapcase() }}"},
    {"err_m_get_unhashable", "{{ d.get(['x']) }}", R"({"d": {"a": 1}})"},
    {"err_m_append", "{% set ns = namespace(l=[]) %}{{ ns.l.append(1) }}"},
    {"err_m_dict_pop", "{{ d.pop('a') }}", R"({"d": {"a": 1}})"},
    {"err_m_index_missing", "{{ [1].index(5) }}"},
    {"err_m_split_empty_sep", "{{ 'a'.split('') }}"},
};

const Cases kGlobals = {
    {"g_range", "{{ range(3)|list }} {{ range(1, 7, 2)|list }} {{ range(5, 0, -2)|list }} {{ range(3) }} {{ range(0, 10, 3) }} {{ range(3)|length }}"},
    {"g_range_loop", "{% for i in range(2, 5) %}{{ i }}{% endfor %}"},
    {"g_dict", "{{ dict(a=1, b='x') }} {{ dict() }} {{ dict([('k', 1)]) }} {{ dict({'a': 1}, b=2) }}"},
    {"g_namespace_from_dict", "{% set ns = namespace({'a': 1}, b=2) %}{{ ns.a }}{{ ns.b }}"},
    {"g_raise_not_called", "{{ raise_exception('no') if false else 'fine' }}"},
    {"g_strftime_year", "{{ strftime_now('%Y')|length }}"},
    {"err_g_raise_exception", "{% if true %}{{ raise_exception('Conversation roles must alternate') }}{% endif %}"},
    {"err_g_range_step_zero", "{{ range(1, 2, 0) }}"},
    {"err_g_range_too_big", "{{ range(200000)|length }}"},
};

const Cases kSyntaxErrors = {
    {"err_syn_unclosed_if", "{% if true %}x"},
    {"err_syn_unclosed_for", "{% for x in y %}x"},
    {"err_syn_bad_end", "{% if true %}x{% endfor %}"},
    {"err_syn_unclosed_var", "{{ x "},
    {"err_syn_unclosed_comment", "{# x"},
    {"err_syn_unclosed_string", "{{ 'abc }}"},
    {"err_syn_empty_output", "{{ }}"},
    {"err_syn_unknown_tag", "{% frobnicate %}"},
    {"err_syn_do_not_enabled", "{% do x %}"},
    {"err_syn_break_outside_loop", "{% break %}"},
    {"err_syn_leading_zero", "{{ 007 }}"},
    {"err_syn_bad_test_name", "{{ 3 is == 3 }}"},
    {"err_syn_missing_endraw", "{% raw %}x"},
    {"err_syn_positional_after_kw", "{{ range(stop=3, 1) }}"},
};

// What gpt-oss's chat template (the Harmony format) leans on: a dict's
// missing key read with [] falls back to the attribute in Jinja, so
// d['items'] is the dict's items method (defined, true, with no 'type'); the
// type tests its render_typescript_type combines; tojson of every JSON type
// and of strings with quotes, controls and non-ASCII; slicing by loop.index;
// 'in' on strings, dicts and none; string + none or a list refused; a
// macro's default argument and its own 'set' of an undefined global.
const Cases kGptOss = {
    {"go_missing_key_falls_back_to_method",
     "[{{ d['items'] is defined }}][{% if d['items'] %}t{% endif %}][{{ d['items']['type'] is defined }}]"
     "[{{ d['keys'] is callable }}][{{ d['nope'] is defined }}][{{ d.items is defined }}]",
     R"({"d": {"type": "array"}})"},
    {"go_method_item_then_attr", "[{{ d['items'].type }}][{{ d['items']['type'] == 'string' }}]", R"({"d": {"a": 1}})"},
    {"go_type_tests",
     "{% for t in ts %}{{ t is defined and t is iterable and t is not string and t is not mapping and t[0] is defined }};{% endfor %}",
     R"({"ts": ["string", ["string", "null"], [], {"a": 1}, 3, null, ["object"]]})"},
    {"go_type_list_join", "{{ t|join(' | ') }} {{ t|length }} {{ t[0] }}", R"({"t": ["string", "null"]})"},
    {"go_enum_join", R"({{ '"' + e|join('" | "') + '"' }} {{ '"' + n|join('" | "') + '"' }})",
     R"({"e": ["celsius", "fahrenheit"], "n": [1, 2.5, true, null]})"},
    {"go_tojson_values", "{% for v in vs %}{{ v|tojson }};{% endfor %}",
     R"({"vs": [10, 0.5, 1.0, -0.0, 1e20, 1e-07, 123456789012345678, false, null, "x", {"lang": "en", "n": [1, {}]}, []]})"},
    {"go_tojson_strings", "{% for v in vs %}{{ v|tojson }};{% endfor %}",
     R"({"vs": ["{\"city\": \"Paris\"}", "tab\tnl\ncr\r\u0001\u001f\u007f", "é中😀\u2028\u00a0", "back\\slash /", ""]})"},
    {"go_slice_by_loop_index", "{% for m in ms %}[{% for f in ms[loop.index:] %}{{ f }}{% endfor %}]{% endfor %}",
     R"({"ms": ["a", "b", "c"]})"},
    {"go_in_dict_and_string", "{{ 'content' in m }} {{ 'thinking' in m }} {{ '<|x|>' in m.content }} {{ 'tool_calls' not in m }}",
     R"({"m": {"role": "assistant", "content": "a <|x|> b"}})"},
    {"go_conditional_expression", "{{ (c.t if c.t is defined else 'json') + '|' }}{{ (d.t if d.t is defined else 'json') }}",
     R"({"c": {"t": "code"}, "d": {}})"},
    {"go_macro_default_and_global_set",
     "{% macro m(a, b=false) %}{% if g is not defined %}{% set g = 'dflt' %}{% endif %}{{ g }}{{ b }}{% endmacro %}{{ m(1) }}|{{ m(1, true) }}",
     R"({})"},
    {"go_macro_reads_global", "{% macro m() %}{% if g is not defined %}{% set g = 'dflt' %}{% endif %}{{ g }}{% endmacro %}{{ m() }}",
     R"({"g": "given"})"},
    {"go_set_in_loop_stays_in_loop",
     "{% set found = false %}{% for v in vs %}{% if v.type == 'object' %}{% set found = true %}{% endif %}{% endfor %}{{ found }}",
     R"({"vs": [{"type": "object"}, {"type": "string"}]})"},
    {"go_namespace_none", "{% set ns = namespace(name=none) %}{{ ns.name is none }}{% set ns.name = 'f' %}{{ ns.name }}"},
    {"go_output_between_tags", "{{- 'a' -}}\n    {{ 'b' }}\n    {%- if true %}\n        {{- 'c' }}\n    {% endif -%}\n|"},
    {"err_go_in_none", "{{ 'x' in m.content }}", R"({"m": {"content": null}})"},
    {"err_go_str_plus_none", "{{ 'a' + n }}", R"({"n": null})"},
    {"err_go_str_plus_list", "{{ 'a' + l }}", R"({"l": [{"type": "text"}]})"},
    {"err_go_str_plus_int", "{{ '// default: ' + d }}", R"({"d": 3})"},
    {"err_go_str_plus_undefined", "{{ '// ' + t.description }}", R"({"t": {}})"},
};

const std::vector<const Cases*> kGroups = {&kWhitespace, &kLiterals, &kOperators, &kAccess, &kStatements,
                                           &kFilters,    &kTests,    &kMethods,   &kGlobals, &kSyntaxErrors, &kGptOss};

class JinjaFeatures : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    Cases all;
    for (const Cases* g : kGroups) all.insert(all.end(), g->begin(), g->end());
    results_ = new std::map<std::string, test::JinjaResult>(test::render_with_jinja2(all));
  }
  static void TearDownTestSuite() {
    delete results_;
    results_ = nullptr;
  }

  static void check(const Cases& cases, const char* group) {
    ASSERT_FALSE(results_->empty()) << "no results from jinja2";
    size_t agree = 0, errors = 0;
    for (const JinjaCase& c : cases) {
      const auto it = results_->find(c.name);
      ASSERT_NE(it, results_->end()) << c.name;
      // Cases named err_* are the ones jinja2 must reject.
      EXPECT_EQ(!it->second.ok, c.name.rfind("err_", 0) == 0)
          << c.name << ": jinja2 " << (it->second.ok ? "rendered it" : "failed: " + it->second.error);
      if (test::expect_same_as_jinja2(c, it->second)) ++agree;
      if (!it->second.ok) ++errors;
    }
    std::cout << "[ jinja2   ] " << group << ": " << agree << "/" << cases.size() << " cases agree (" << errors
              << " of them errors in both)\n";
  }

  static std::map<std::string, test::JinjaResult>* results_;
};

std::map<std::string, test::JinjaResult>* JinjaFeatures::results_ = nullptr;

TEST_F(JinjaFeatures, Whitespace) { check(kWhitespace, "whitespace control"); }
TEST_F(JinjaFeatures, Literals) { check(kLiterals, "literals and printing"); }
TEST_F(JinjaFeatures, Operators) { check(kOperators, "operators"); }
TEST_F(JinjaFeatures, Access) { check(kAccess, "attributes, items, undefined"); }
TEST_F(JinjaFeatures, Statements) { check(kStatements, "statements and scoping"); }
TEST_F(JinjaFeatures, Filters) { check(kFilters, "filters"); }
TEST_F(JinjaFeatures, Tests) { check(kTests, "tests"); }
TEST_F(JinjaFeatures, Methods) { check(kMethods, "methods"); }
TEST_F(JinjaFeatures, Globals) { check(kGlobals, "globals"); }
TEST_F(JinjaFeatures, SyntaxErrors) { check(kSyntaxErrors, "syntax errors"); }
TEST_F(JinjaFeatures, GptOssTemplate) { check(kGptOss, "what gpt-oss's template uses"); }

TEST(JinjaFeatureTable, HasAtLeast150Cases) {
  size_t n = 0;
  for (const Cases* g : kGroups) n += g->size();
  EXPECT_GE(n, 150u);
}

}  // namespace
}  // namespace weir
