// Jinja2 templates as LLM chat templates use them (tokenizer.chat_template),
// rendered byte for byte as Python's jinja2 3.1 renders them in Hugging
// Face's apply_chat_template: an ImmutableSandboxedEnvironment with
// trim_blocks, lstrip_blocks and the loop controls, plus raise_exception()
// and strftime_now(), and Hugging Face's tojson (json.dumps in key order,
// UTF-8 as is; not jinja2's sorted, HTML-escaped one).
//
// What is supported: if/elif/else, for (else, inline `if`, unpacking, loop.*,
// break/continue), set (names, tuples, ns.attr, blocks), macro, filter
// blocks, with, raw, HF's generation; expressions with jinja2's precedence,
// the filters, tests and str/list/dict methods templates use. Anything else
// (include, call blocks, an unknown filter, a Python method not listed)
// fails with weir::Error naming the construct and its line:column rather
// than render a prompt that differs from jinja2's.
//
// A render runs within RenderLimits (render_limits.h): its output's size,
// its work (statements, and the bytes it builds and reads), a stop flag.
//
// Layout: lexer.h (text, tags, whitespace control), parser.h (the tree in
// ast.h), render.h (evaluation and scoping), builtins.h (filters, tests,
// methods), operators.h (Python's arithmetic), value.h (Python's values),
// unicode.h (Python's str Unicode behaviour), work.h (counting the work).
#pragma once
#include <memory>
#include <string>
#include <string_view>

#include "text/jinja/render_limits.h"
#include "text/jinja/value.h"

namespace weir::jinja {

struct Stmt;

struct Options {
  // What Hugging Face's apply_chat_template sets.
  bool trim_blocks = true;    // drop the first newline after a block tag
  bool lstrip_blocks = true;  // drop spaces before a block tag on its line
  std::string name = "chat template";  // where errors say they are
  // What render errors call the template; empty: `name`. Render errors can
  // reach a remote client (weir serve sends them back), parse errors only
  // whoever loads the template: a template read from a file can keep its
  // path in `name` and give only the file's name here.
  std::string render_name;
};

class Template {
 public:
  // Parses. Throws weir::Error "<name>: line L:C: ..." for syntax errors and
  // for anything unsupported.
  explicit Template(std::string source, Options options = {});

  // Renders with the variables of `context` (a dict: messages, tools,
  // add_generation_prompt, bos_token, ...). Throws weir::Error
  // "<render name>: line L:C: ..." for raise_exception(msg) (the message is
  // msg), an undefined value used where jinja2 raises, type errors, and a
  // limit passed ("the render exceeded its work budget of N ...", "the
  // rendered text exceeded its limit of N bytes", "... over the 64 MiB
  // limit on one value"); weir::Cancelled "<render name>: the render was
  // stopped" when limits.stop is set.
  std::string render(const Value& context, const RenderLimits& limits = {}) const;

  const std::string& source() const { return source_; }

 private:
  std::string source_;
  Options options_;
  std::shared_ptr<const std::vector<std::unique_ptr<Stmt>>> body_;
};

// JSON text to a Value (objects keep their key order). Throws weir::Error
// naming the line:column of bad JSON.
Value value_from_json(std::string_view json);

}  // namespace weir::jinja
