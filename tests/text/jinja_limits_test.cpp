// The limits a render runs within (RenderLimits: its output, its work, a
// stop flag) and the cap on each string or list it builds: a template given
// by a user and messages sent by remote clients must not take the server's
// memory or time, nor keep it from stopping. Also that parsing is linear in
// the template's size, and that render errors do not show a template
// file's directory.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "core/error.h"
#include "jinja_reference.h"
#include "text/chat_template.h"
#include "text/jinja/template.h"

namespace weir {
namespace {

using jinja::RenderLimits;
using jinja::Template;
using jinja::value_from_json;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The message of the error rendering `source` throws, or "(no error)".
std::string render_error(const std::string& source, const RenderLimits& limits = {}, const char* context = "{}") {
  try {
    Template(source).render(value_from_json(context), limits);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// A string grown by `~` in a loop costs its whole length at every step: the
// work budget ends it long before it takes seconds (it took 34 s for 10,000
// steps when only statements were counted).
TEST(JinjaLimits, StringGrownInALoopRunsOutOfWork) {
  const auto t0 = Clock::now();
  const std::string m = render_error(
      "{% set ns = namespace(s='') %}{% for i in range(20000) %}{% set ns.s = ns.s ~ 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
      "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx' %}{% endfor %}{{ ns.s|length }}");
  EXPECT_TRUE(has(m, "chat template: line 1:")) << m;
  EXPECT_TRUE(has(m, "exceeded its work budget of 268435456")) << m;
  EXPECT_LT(seconds_since(t0), 5.0);
  // A list grown the same way, too.
  EXPECT_TRUE(has(render_error("{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = ns.l + [i] %}"
                               "{% endfor %}"),
                  "work budget"));
}

TEST(JinjaLimits, LoopsAndStatementsRunOutOfWork) {
  const auto t0 = Clock::now();
  EXPECT_TRUE(has(render_error("{% for i in range(100000) %}{% for j in range(100000) %}{% set x = i + j %}"
                               "{% endfor %}{% endfor %}"),
                  "work budget"));
  EXPECT_LT(seconds_since(t0), 5.0);
  // Reading is work too: a search through a big string, many times over.
  EXPECT_TRUE(has(render_error("{% set s = 'a' * 10000000 %}{% for i in range(100000) %}{% if 'b' in s %}{% endif %}"
                               "{% endfor %}"),
                  "work budget"));
}

// Looking for a long needle that almost matches everywhere compared all
// of it at every place: count, split, replace, partition and `in` now take
// linear time, and find, rfind, rpartition and rsplit are charged every
// comparison they make.
TEST(JinjaLimits, SubstringSearchesAreLinearOrCounted) {
  const std::string setup = "{% set h = 'a' * 1000000 %}{% set n = 'a' * 100000 ~ 'b' %}";
  const auto t0 = Clock::now();
  EXPECT_EQ(Template(setup + "{{ h.count(n) }} {{ n in h }} {{ h.split(n)|length }} {{ h.replace(n, 'x')|length }} "
                             "{{ h.partition(n)|length }}")
                .render(value_from_json("{}")),
            "0 False 1 1000000 3");
  EXPECT_LT(seconds_since(t0), 5.0);
  for (const char* search : {"{{ h.find(n) }}", "{{ h.rfind(n) }}", "{{ h.rpartition(n) }}", "{{ h.rsplit(n, 1) }}"}) {
    const std::string m = render_error(setup + search);
    EXPECT_TRUE(has(m, "work budget")) << search << ": " << m;
  }
  EXPECT_LT(seconds_since(t0), 10.0);
}

TEST(JinjaLimits, TheWorkBudgetIsTheCallers) {
  const std::string source = "{% for i in range(1000) %}{{ i }}{% endfor %}";
  RenderLimits small;
  small.max_work = 10000;
  EXPECT_TRUE(has(render_error(source, small), "exceeded its work budget of 10000")) << render_error(source, small);
  EXPECT_EQ(render_error(source), "(no error)");
}

// join, replace, list(), *, split and padding compute the size of their
// result first and refuse it before building it: what they would build is
// far past the 64 MiB cap on one value (gigabytes, from inputs of a few MB).
TEST(JinjaLimits, BigResultsAreRefusedBeforeTheyAreBuilt) {
  const char* cases[] = {
      "{{ (['x' * 60000000] * 60)|join|length }}",
      "{{ ('x' * 1000)|join('y' * 100000) }}",
      "{{ ','.join(['x' * 60000000] * 60)|length }}",
      "{{ ('x' * 60000000)|replace('x', 'yy')|length }}",
      "{{ ('x' * 60000000).replace('x', 'yyyyyyyyyy')|length }}",
      "{{ ('abc' * 10000000).replace('', '----------')|length }}",
      "{{ ('x' * 60000000)|list|length }}",
      "{{ ('a,' * 30000000).split(',')|length }}",
      "{{ ('a ' * 30000000).split()|length }}",
      "{{ ('a\n' * 30000000).splitlines()|length }}",
      "{{ 'ab' * 100000000 }}",
      "{{ (['x'] * 100000000)|length }}",
      "{{ ['x' * 1000000] * 100000 }}",
      "{{ 'a'|center(1000000000) }}",
      "{{ 'a'.ljust(1000000000) }}",
      "{{ 'a'.zfill(1000000000) }}",
      "{{ '%1000000000s' % 'a' }}",
      "{{ ('x\n' * 1000)|indent(1000000) }}",
      "{{ 'x'|indent(1000000000) }}",
      "{{ [[[[[[[[[[[[1]]]]]]]]]]]]|tojson(indent=1000000)|length }}",
      "{{ [1]|batch(1000000000, 0)|list }}",
      "{{ [1]|slice(1000000000)|list }}",
  };
  for (const char* source : cases) {
    const auto t0 = Clock::now();
    const std::string m = render_error(source);
    EXPECT_TRUE(has(m, "over the 64 MiB limit on one value, refused")) << source << ": " << m;
    EXPECT_LT(seconds_since(t0), 5.0) << source;
  }
}

TEST(JinjaLimits, OutputIsCapped) {
  RenderLimits limits;
  limits.max_output_bytes = 1000;
  EXPECT_EQ(render_error("{{ 'x' * 1000 }}", limits), "(no error)");
  const std::string m = render_error("{{ 'x' * 600 }}{% for i in range(2) %}{{ 'y' * 300 }}{% endfor %}", limits);
  EXPECT_TRUE(has(m, "chat template: line 1:")) << m;
  EXPECT_TRUE(has(m, "the rendered text exceeded its limit of 1000 bytes")) << m;
  // The default: 16 MiB.
  EXPECT_TRUE(has(render_error("{% for i in range(100) %}{{ 'x' * 1000000 }}{% endfor %}"),
                  "exceeded its limit of 16777216 bytes"));
}

// The stop flag ends a render that would otherwise run for hours (the work
// budget set out of the way), promptly, with Cancelled.
TEST(JinjaLimits, StopFlagEndsARender) {
  const Template t("{% for i in range(100000) %}{% for j in range(100000) %}{{ 'x' if i == j }}{% endfor %}{% endfor %}");
  std::atomic<bool> stop{false};
  RenderLimits limits;
  limits.max_work = UINT64_MAX;
  limits.stop = &stop;
  std::thread stopper([&stop] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    stop = true;
  });
  const auto t0 = Clock::now();
  std::string m = "(no error)";
  try {
    t.render(value_from_json("{}"), limits);
  } catch (const Cancelled& e) {
    m = e.what();
  }
  const double took = seconds_since(t0);
  stopper.join();
  EXPECT_EQ(m, "chat template: the render was stopped");
  EXPECT_LT(took, 5.0);
}

TEST(JinjaLimits, StopFlagSetBeforehandStopsAtOnce) {
  std::atomic<bool> stop{true};
  RenderLimits limits;
  limits.stop = &stop;
  EXPECT_THROW(Template("hello").render(value_from_json("{}"), limits), Cancelled);
  stop = false;
  EXPECT_EQ(Template("hello").render(value_from_json("{}"), limits), "hello");
}

// The real templates of tests/data over a long conversation (2,000 turns,
// 1 MB of text) with tools use less than a tenth of the default budget.
TEST(JinjaLimits, RealTemplatesOverLongConversationsStayFarWithinTheBudget) {
  std::string messages = "[";
  for (int i = 0; i < 2000; ++i) {
    if (i) messages += ", ";
    messages += std::string(R"({"role": ")") + (i % 2 ? "assistant" : "user") + R"(", "content": ")" +
                std::string(500, static_cast<char>('a' + i % 26)) + "\"}";
  }
  messages += "]";
  const std::string tools = R"([{"type": "function", "function": {"name": "f", "description": "d",
      "parameters": {"type": "object", "properties": {"x": {"type": "string"}}}}}])";
  RenderLimits limits;
  limits.max_work = RenderLimits().max_work / 10;
  for (const char* file : {"chatml-tools-chat-template.jinja", "gemma3-chat-template.jinja",
                           "hermes-tools-chat-template.jinja", "llama3-chat-template.jinja",
                           "mistral-chat-template.jinja"}) {
    const Template t(test::json::read_file(test::data_dir() + "/" + file));
    const std::string context = R"({"messages": )" + messages + R"(, "tools": )" + tools +
                                R"(, "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>"})";
    std::string out;
    EXPECT_NO_THROW(out = t.render(value_from_json(context), limits)) << file;
    EXPECT_GT(out.size(), 1000000u) << file;
  }
}

// A dict past 16 keys is found through a hash index: a client's message
// with a 200,000-key object is read in well under a second (it took 4 s
// for 40,000 when each key was looked for from the first), and keys equal
// as Python compares them (1, 1.0, True) still find each other.
TEST(JinjaLimits, BigDictsAreNotQuadratic) {
  std::string json = "{";
  for (int i = 0; i < 200000; ++i) json += (i ? ", \"k" : "\"k") + std::to_string(i) + "\": " + std::to_string(i);
  json += ", \"k7\": -7}";
  const auto t0 = Clock::now();
  const jinja::Value v = value_from_json(json);
  EXPECT_LT(seconds_since(t0), 5.0);
  ASSERT_EQ(v.dict().size(), 200000u);
  EXPECT_EQ(v.dict().find(std::string_view("k199999"))->integer(), 199999);
  EXPECT_EQ(v.dict().find(std::string_view("k7"))->integer(), -7);  // replaced where it was
  EXPECT_EQ(v.dict().begin()[7].first.text(), "k7");
  EXPECT_EQ(v.dict().find(std::string_view("k200000")), nullptr);
  const char* source =
      "{% set d = dict(range(40)|batch(2)) %}{{ d[4] }} {{ d[4.0] }} {{ d[5] is defined }} "
      "{{ (range(40)|list + [1.0, true, 0.0, false, -0.0])|unique|list|length }} "
      "{{ ([(1, 2), (1.0, 2), (true, 2.0)] * 10)|unique|list }}";
  EXPECT_EQ(Template(source).render(value_from_json("{}")), "5 5 False 40 [(1, 2)]");
}

// A value cannot hold itself, nor nest past 1000 levels: printing a
// namespace set into itself, or a list nested 100,000 deep by a loop, used
// to overflow the stack and end the process.
TEST(JinjaLimits, NoValueHoldsItselfOrNestsTooDeep) {
  for (const char* source : {"{% set ns = namespace() %}{% set ns.a = ns %}{{ ns }}",
                             "{% set ns = namespace(a=[]) %}{% set ns.a = [1, {'x': ns}] %}{{ ns }}",
                             "{% set ns = namespace() %}{% set ns.f = [ns].count %}",
                             "{% set a = namespace() %}{% set b = namespace(x=[a]) %}",
                             "{% for x in [1] %}{% set ns = namespace(l=loop) %}{% endfor %}"}) {
    const std::string m = render_error(source);
    EXPECT_TRUE(has(m, "a namespace cannot hold a namespace or a loop")) << source << ": " << m;
  }
  EXPECT_TRUE(has(render_error("{% for x in [1] %}{{ loop.changed(loop) }}{% endfor %}"), "loop.changed()"));
  for (const char* source : {"{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = [ns.l] %}"
                             "{% endfor %}{{ ns.l }}",
                             "{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = {'a': ns.l} %}"
                             "{% endfor %}{{ ns.l }}",
                             "{% set ns = namespace(f=none) %}{% for i in range(100000) %}{% set ns.f = [ns.f].count %}"
                             "{% endfor %}"}) {
    const std::string m = render_error(source);
    EXPECT_TRUE(has(m, "nested 1000 deep, too deep to keep")) << source << ": " << m;
  }
  // 990 levels print, compare and go to JSON (JSON from clients nests up to 512).
  EXPECT_EQ(render_error("{% set ns = namespace(l=[]) %}{% for i in range(990) %}{% set ns.l = [ns.l] %}{% endfor %}"
                         "{{ ns.l }}{{ ns.l|tojson }}{{ ns.l == ns.l }}{{ ns.l < [[]] }}"),
            "(no error)");
  // What may be kept: data, macros, methods of data.
  EXPECT_EQ(Template("{% set ns = namespace(t=[1, {'a': 2}]) %}{% macro m() %}x{% endmacro %}{% set ns.m = m %}"
                     "{% set ns.c = [1, 1].count %}{{ ns.t }}{{ ns.m() }}{{ ns.c(1) }}")
                .render(value_from_json("{}")),
            "[1, {'a': 2}]x2");
}

// Evaluating or freeing a deep expression tree recursed once per level: a
// chain of 100,000 `+` (or filters, or attributes) in a 200 KB template
// ended the process. The parser refuses trees deeper than 500 levels, and
// a render nesting statements and expressions deeper than 1000 (through
// macro calls) fails.
TEST(JinjaLimits, LongChainsAndDeepRecursionFailCleanly) {
  auto chain = [](const std::string& first, const std::string& link, int n) {
    std::string s = "{{ " + first;
    for (int i = 0; i < n; ++i) s += link;
    return s + " }}";
  };
  for (const std::string& source : {chain("1", " + 1", 100000), chain("'a'", " ~ 'a'", 100000),
                                    chain("x", ".a", 100000), chain("x", "|trim", 100000),
                                    chain("1", " and 1", 100000), chain("x", "[0]", 100000)}) {
    try {
      Template t(source);
      FAIL() << "parsed a chain of 100,000";
    } catch (const Error& e) {
      EXPECT_TRUE(has(e.what(), "an expression nested deeper than 500 levels")) << e.what();
    }
  }
  EXPECT_EQ(Template(chain("1", " + 1", 400)).render(value_from_json("{}")), "401");
  // A macro that calls itself without end stops at 200 calls; one that
  // nests deep expressions at every call, at 1000 levels.
  EXPECT_TRUE(has(render_error("{% macro m(n) %}{{ m(n + 1) }}{% endmacro %}{{ m(0) }}"),
                  "macro calls nested deeper than 200"));
  const std::string deep = "{% macro m(n) %}{% if n > 0 %}" + chain("m(n - 1)|length", " + 0", 400) +
                           "{% endif %}{% endmacro %}{{ m(150) }}";
  EXPECT_TRUE(has(render_error(deep), "nested deeper than 1000 through macro calls")) << render_error(deep);
  // A recursion 60 calls deep with a few levels at each is fine.
  EXPECT_EQ(Template("{% macro m(n) %}{% if n > 0 %}{{ m(n - 1) ~ (n % 10) }}{% endif %}{% endmacro %}{{ m(60)|length }}")
                .render(value_from_json("{}")),
            "60");
}

// A 210 KB template, as one line (as GGUF files often hold them) or many,
// parses in milliseconds: it took 10 s when each token's column was counted
// from the start of its line.
TEST(JinjaLimits, A210KBTemplateParsesFast) {
  const std::string body = test::json::read_file(test::data_dir() + "/chatml-tools-chat-template.jinja");
  std::string one_line;
  while (one_line.size() < 210000)
    for (char c : body) one_line.push_back(c == '\n' ? ' ' : c);
  std::string blocks;
  while (blocks.size() < 210000) blocks += "{% if x %}{{ x }}{% endif %}{# note #}";
  for (const std::string* source : {&one_line, &blocks}) {
    const auto t0 = Clock::now();
    const Template t(*source);
    EXPECT_LT(seconds_since(t0), 5.0);  // ~0.02 s on a 2-core VM (Release)
  }
  // And the one-line template still renders.
  EXPECT_NO_THROW(Template(one_line).render(value_from_json(R"({"messages": [{"role": "user", "content": "hi"}]})")));
}

// weir serve sends render errors to its clients: they name a template file
// by its name, not its directory. Syntax errors, which go to whoever loads
// the file, keep the path.
TEST(JinjaLimits, RenderErrorsDoNotShowTheTemplatesDirectory) {
  const Vocab v;
  const ChatTemplate t("{{ raise_exception('no ' ~ messages[0].role) }}", "/srv/secret/dir/t.jinja", v);
  try {
    t.render(value_from_json(R"([{"role": "user", "content": "hi"}])"), true);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "t.jinja: line 1:4: no user");
  }
  RenderLimits limits;
  limits.max_work = 100;
  try {
    t.render(value_from_json(R"([{"role": "user", "content": "hi"}])"), true, jinja::Value(), limits);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("t.jinja: line 1:", 0), 0u) << e.what();
  }
  try {
    ChatTemplate("{% if %}", "/srv/secret/dir/t.jinja", v);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("/srv/secret/dir/t.jinja: line 1:", 0), 0u) << e.what();
  }
  // Names without a directory stay as they are.
  const ChatTemplate builtin("{{ raise_exception('x') }}", "built-in gemma", v);
  EXPECT_THROW(builtin.render(value_from_json("[]"), true), Error);
}

}  // namespace
}  // namespace weir
