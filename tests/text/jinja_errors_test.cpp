// What the Jinja engine refuses rather than render a prompt that could
// differ from jinja2's: each error names the construct and where it is.
// Also the JSON reader callers pass messages through, and the options.
#include <gtest/gtest.h>

#include "core/error.h"
#include "text/jinja/template.h"

namespace weir {
namespace {

using jinja::Template;
using jinja::value_from_json;

// The message of the error that parsing, or else rendering, `source` throws.
std::string error_of(const std::string& source, const char* context = "{}") {
  try {
    Template t(source);
    t.render(value_from_json(context));
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

struct Refused {
  const char* source;
  const char* construct;  // the message names it
  const char* where;      // "line L:C"
};

TEST(JinjaErrors, UnsupportedConstructsNameThemselvesAndTheirLine) {
  const Refused cases[] = {
      {"{% include 'other.jinja' %}", "include", "line 1:4"},
      {"a\n{% extends 'base' %}", "extends", "line 2:4"},
      {"{% import 'm' as m %}", "import", "line 1:4"},
      {"{% from 'm' import x %}", "from", "line 1:4"},
      {"{% block body %}{% endblock %}", "block", "line 1:4"},
      {"{% macro m() %}{% endmacro %}\n{% call m() %}x{% endcall %}", "call", "line 2:4"},
      {"{% autoescape true %}{% endautoescape %}", "autoescape", "line 1:4"},
      {"{% for x in y recursive %}{% endfor %}", "recursive", "line 1:15"},
      {"\n\n  {{ x|groupby('a') }}", "groupby", "line 3:8"},
      {"{{ 'abc'|truncate(2) }}", "truncate", "line 1:10"},
      {"{{ x|wordwrap }}", "wordwrap", "line 1:6"},
      {"{{ x|urlencode }}", "urlencode", "line 1:6"},
      {"{{ range(*xs) }}", "*args", "line 1:10"},
      {"{{ f(**kw) }}", "**kwargs", "line 1:6"},
      {"{{ x|nosuchfilter }}", "nosuchfilter", "line 1:6"},
      {"{{ x is nosuchtest }}", "nosuchtest", "line 1:6"},
      {"{% frobnicate %}", "frobnicate", "line 1:4"},
      {"{{ 12345678901234567890 }}", "64 bits", "line 1:4"},
      {"{{ '\\N{BULLET}' }}", "\\N{...}", "line 1:5"},
      // At render time:
      {"{{ 'a {x}'.format_map({}) }}", "format_map", "line 1:4"},
      {"{{ 'a'.encode() }}", "encode", "line 1:4"},
      {"x\n{{ cycler(1, 2) }}", "cycler", "line 2:4"},
      {"{{ 2 ** 70 }}", "64 bits", "line 1:6"},
      {"{{ [1, 2]|select }}", "generator", "line 1:1"},
      {"{{ range }}", "function", "line 1:1"},
      {"{{ 1.5 is sameas 1.5 }}", "sameas", "line 1:8"},
      {"{{ (-8) ** 0.5 }}", "complex", "line 1:9"},
      {"{% if true %}{{ x|nosuch }}{% endif %}", "nosuch", "line 1:19"},
      {"{% set n = 3 %}{{ n.bit_length() }}", "bit_length", "line 1:19"},
  };
  for (const Refused& c : cases) {
    const std::string m = error_of(c.source);
    EXPECT_NE(m.find(c.construct), std::string::npos) << c.source << " -> " << m;
    EXPECT_NE(m.find(c.where), std::string::npos) << c.source << " -> " << m;
  }
}

TEST(JinjaErrors, UnknownFilterInsideIfFailsOnlyWhenEvaluated) {
  // As jinja2 does: templates guard optional filters this way.
  const Template t("{% if use %}{{ x|nosuch }}{% endif %}ok");
  EXPECT_EQ(t.render(value_from_json(R"({"use": false})")), "ok");
  EXPECT_THROW(t.render(value_from_json(R"({"use": true})")), Error);
}

TEST(JinjaErrors, RuntimeErrorsNameTheLine) {
  EXPECT_NE(error_of("a\nb {{ m.content.text }}", R"({"m": {}})").find("line 2:6"), std::string::npos);
  EXPECT_NE(error_of("{{ raise_exception('bad roles') }}").find("line 1:4: bad roles"), std::string::npos);
  EXPECT_NE(error_of("{% for a, b in [1] %}{% endfor %}").find("unpack"), std::string::npos);
  EXPECT_NE(error_of("{{ x }}", "[1]").find("dict"), std::string::npos);
}

// A template that would run for hours or fill memory is refused (fuzzing
// finds such templates in seconds; a server must not hang on one).
TEST(JinjaErrors, RunawayTemplatesAreRefused) {
  EXPECT_NE(error_of("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}")
                .find("work budget"),
            std::string::npos);
  EXPECT_NE(error_of("{% set ns = namespace(s='x' * 1000000) %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}"
                     "{% endfor %}")
                .find("64 MiB"),
            std::string::npos);
  EXPECT_NE(error_of("{{ 'ab' * 100000000 }}").find("64 MiB"), std::string::npos);
  EXPECT_NE(error_of("{{ 'a'|center(1000000000) }}").find("64 MiB"), std::string::npos);
  EXPECT_NE(error_of("{% for i in range(100000) %}{{ 'x' * 10000 }}{% endfor %}").find("rendered text exceeded"),
            std::string::npos);
}

TEST(JinjaErrors, TemplateNameInMessages) {
  jinja::Options o;
  o.name = "model.gguf chat template";
  try {
    Template("{% if x %}", o);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("model.gguf chat template: line 1:", 0), 0u) << e.what();
  }
}

TEST(JinjaErrors, InvalidUtf8Template) {
  EXPECT_NE(error_of("ok\n\xff").find("line 2:1"), std::string::npos);
}

TEST(JinjaJson, ParsesValuesInOrder) {
  const jinja::Value v = value_from_json(
      R"({"z": 1, "a": [true, false, null, -2, 1.5, 1e2, "\u00e9\ud83d\ude00\n"], "m": {}})");
  ASSERT_TRUE(v.is_dict());
  EXPECT_EQ(v.repr(), "{'z': 1, 'a': [True, False, None, -2, 1.5, 100.0, 'é😀\\n'], 'm': {}}");
}

TEST(JinjaJson, ErrorsNameThePlace) {
  const char* bad[] = {"{\"a\": }", "[1, 2", "{\"a\" 1}", "\"\\ud800\"", "[1] x", "99999999999999999999", "'x'"};
  for (const char* b : bad) {
    try {
      value_from_json(b);
      ADD_FAILURE() << "accepted " << b;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("JSON: "), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("line 1:"), std::string::npos) << e.what();
    }
  }
}

TEST(JinjaOptions, WithoutTrimAndLstrip) {
  jinja::Options o;
  o.trim_blocks = false;
  o.lstrip_blocks = false;
  const Template t("a\n  {% if true %}\nb\n  {% endif %}\nc", o);
  EXPECT_EQ(t.render(value_from_json("{}")), "a\n  \nb\n  \nc");
  const Template d("a\n  {% if true %}\nb\n  {% endif %}\nc");
  EXPECT_EQ(d.render(value_from_json("{}")), "a\nb\nc");
}

TEST(JinjaValues, CallerBuiltContext) {
  jinja::Dict d;
  d.set("name", jinja::Value("weir"));
  d.set("n", jinja::Value(3));
  d.set("items", jinja::Value::list({jinja::Value(1.0), jinja::Value::none()}));
  const Template t("{{ name|upper }} {{ n * 2 }} {{ items }}");
  EXPECT_EQ(t.render(jinja::Value::dict(d)), "WEIR 6 [1.0, None]");
}

}  // namespace
}  // namespace weir
