#include "text/jinja/parser.h"

#include <algorithm>

#include "text/jinja/builtins.h"

namespace weir::jinja {

namespace {

// Statements jinja2 has that this engine does not.
constexpr std::string_view kUnsupportedStatements[] = {
    "block", "extends", "include", "import", "from", "call", "autoescape", "trans", "pluralize"};

class Parser {
 public:
  Parser(std::vector<Token> tokens, std::string_view name) : t_(std::move(tokens)), name_(name) {}

  Body parse_template() {
    Body body = subparse({});
    if (cur().type != TokenType::End) fail(cur().pos, "unexpected " + describe_tag());
    check_depths(body);
    return body;
  }

 private:
  // --- tokens ----------------------------------------------------------
  const Token& cur() const { return t_[i_]; }
  const Token& peek(size_t n = 1) const { return t_[std::min(i_ + n, t_.size() - 1)]; }
  void next() {
    if (i_ + 1 < t_.size()) ++i_;
  }
  bool is_op(std::string_view op) const { return cur().type == TokenType::Operator && cur().text == op; }
  bool is_name(std::string_view n) const { return cur().type == TokenType::Name && cur().text == n; }
  bool skip_op(std::string_view op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(std::string_view n) {
    if (!is_name(n)) return false;
    next();
    return true;
  }
  void expect_op(std::string_view op) {
    if (!skip_op(op)) fail(cur().pos, "expected '" + std::string(op) + "', got " + describe(cur()));
  }
  void expect(TokenType type, const char* what) {
    if (cur().type != type) fail(cur().pos, std::string("expected ") + what + ", got " + describe(cur()));
    next();
  }
  std::string expect_name(const char* what) {
    if (cur().type != TokenType::Name) fail(cur().pos, std::string("expected ") + what + ", got " + describe(cur()));
    std::string n = cur().text;
    next();
    return n;
  }
  [[noreturn]] void fail(Pos pos, const std::string& message) const { fail_at(name_, pos, message); }
  std::string describe_tag() const {
    if (cur().type == TokenType::BlockBegin && peek().type == TokenType::Name) return "{% " + peek().text + " %}";
    return describe(cur());
  }

  ExprPtr node(ExprKind kind, Pos pos) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->pos = pos;
    return e;
  }

  // --- statements ------------------------------------------------------
  // Parses until a block tag named in `end_tags` (left current: its name)
  // or the end of the template.
  Body subparse(const std::vector<std::string_view>& end_tags);
  std::unique_ptr<Stmt> statement();
  std::unique_ptr<Stmt> stmt_for(Pos pos);
  std::unique_ptr<Stmt> stmt_if(Pos pos);
  std::unique_ptr<Stmt> stmt_set(Pos pos);
  std::unique_ptr<Stmt> stmt_macro(Pos pos);
  std::unique_ptr<Stmt> stmt_filter(Pos pos);
  std::unique_ptr<Stmt> stmt_with(Pos pos);
  // Parses a body up to one of `ends` and returns which one it stopped at
  // (the tag's name is consumed; the caller parses the rest of that tag).
  std::string body_until(Body& body, const std::vector<std::string_view>& ends, const std::string& opener, Pos pos);
  Target assign_target(bool allow_tuple, bool allow_attr, std::string_view end_name);
  Target target_item(bool allow_attr);
  std::vector<ExprPtr> filter_chain();

  // --- expressions ------------------------------------------------------
  ExprPtr tuple(bool with_condexpr = true, bool explicit_parens = false, std::string_view end_name = {});
  ExprPtr expression(bool with_condexpr = true) {
    const DepthGuard guard(this);
    return with_condexpr ? condexpr() : or_expr();
  }
  // Bounds the parser's recursion: a template nested deeper than this fails
  // instead of overflowing the stack.
  struct DepthGuard {
    explicit DepthGuard(Parser* p) : p_(p) {
      if (++p_->depth_ > kMaxDepth) p_->fail(p_->cur().pos, "nested deeper than " + std::to_string(kMaxDepth) + " levels");
    }
    ~DepthGuard() { --p_->depth_; }
    Parser* p_;
  };
  static constexpr int kMaxDepth = 400;
  // Expression trees deeper than this fail: a left-to-right chain (`a + b +
  // c ...`, `x|f|g ...`, `a.b.c ...`) is parsed by a loop, not recursion, so
  // the guard above does not see its depth, but evaluating it recurses.
  static constexpr int kMaxTreeDepth = 500;
  void check_depth(const ExprPtr& e) const {
    const Expr* deepest = nullptr;
    if (e && tree_depth(*e, &deepest) > kMaxTreeDepth)
      fail(deepest->pos, "an expression nested deeper than " + std::to_string(kMaxTreeDepth) +
                             " levels (a chain of that many operators, filters or attributes?)");
  }
  void check_depths(const Body& body) const {
    for (const auto& s : body) {
      check_depth(s->expr);
      check_depth(s->cond);
      for (const auto& [cond, b] : s->branches) check_depth(cond), check_depths(b);
      check_depths(s->body);
      check_depths(s->else_body);
      for (const ExprPtr& f : s->filters) check_depth(f);
      for (const Param& p : s->params) check_depth(p.default_value);
      for (const auto& kv : s->assigns) check_depth(kv.second);
    }
  }
  ExprPtr condexpr();
  ExprPtr or_expr();
  ExprPtr and_expr();
  ExprPtr not_expr();
  ExprPtr compare();
  ExprPtr math1();
  ExprPtr concat();
  ExprPtr math2();
  ExprPtr pow();
  ExprPtr unary(bool with_filter = true);
  ExprPtr primary();
  ExprPtr postfix(ExprPtr e);
  ExprPtr filter_expr(ExprPtr e);
  ExprPtr subscript(ExprPtr e);
  void call_args(Expr& e);
  ExprPtr filter(ExprPtr e);
  ExprPtr test(ExprPtr e);
  bool tuple_end(std::string_view end_name) const {
    return cur().type == TokenType::VarEnd || cur().type == TokenType::BlockEnd || cur().type == TokenType::End ||
           is_op(")") || (!end_name.empty() && is_name(end_name));
  }

  std::vector<Token> t_;
  size_t i_ = 0;
  std::string_view name_;
  int depth_ = 0;        // expressions and blocks being parsed, nested
  int if_depth_ = 0;     // inside {% if %}: unknown filters and tests fail when evaluated
  int loop_depth_ = 0;   // inside {% for %} (not through a macro): break/continue allowed
  std::vector<Stmt*> macros_;  // the macros being parsed, innermost last
  std::vector<std::pair<std::string, Pos>> open_;  // open blocks, for "missing end" errors
};

Body Parser::subparse(const std::vector<std::string_view>& end_tags) {
  const DepthGuard guard(this);
  Body body;
  for (;;) {
    const Token& t = cur();
    if (t.type == TokenType::End) {
      if (!open_.empty())
        fail(t.pos, "unexpected end of template: the {% " + open_.back().first + " %} at line " +
                        std::to_string(open_.back().second.line) + ":" + std::to_string(open_.back().second.col) +
                        " is not closed");
      return body;
    }
    if (t.type == TokenType::Text) {
      auto s = std::make_unique<Stmt>();
      s->kind = StmtKind::Text;
      s->pos = t.pos;
      s->text = t.text;
      body.push_back(std::move(s));
      next();
      continue;
    }
    if (t.type == TokenType::VarBegin) {
      auto s = std::make_unique<Stmt>();
      s->kind = StmtKind::Output;
      s->pos = t.pos;
      next();
      s->expr = tuple();
      expect(TokenType::VarEnd, "'}}'");
      body.push_back(std::move(s));
      continue;
    }
    if (t.type == TokenType::BlockBegin) {
      if (peek().type == TokenType::Name &&
          std::find(end_tags.begin(), end_tags.end(), peek().text) != end_tags.end()) {
        next();
        return body;
      }
      auto s = statement();
      if (s) body.push_back(std::move(s));
      continue;
    }
    fail(t.pos, "unexpected " + describe(t));
  }
}

std::unique_ptr<Stmt> Parser::statement() {
  const Pos pos = cur().pos;
  next();  // {%
  if (cur().type != TokenType::Name) fail(cur().pos, "expected a statement name after '{%', got " + describe(cur()));
  const std::string word = cur().text;
  const Pos word_pos = cur().pos;
  next();
  if (word == "for") return stmt_for(pos);
  if (word == "if") return stmt_if(pos);
  if (word == "set") return stmt_set(pos);
  if (word == "macro") return stmt_macro(pos);
  if (word == "filter") return stmt_filter(pos);
  if (word == "with") return stmt_with(pos);
  if (word == "print") {
    auto s = std::make_unique<Stmt>();
    s->kind = StmtKind::Output;
    s->pos = pos;
    s->expr = tuple();
    expect(TokenType::BlockEnd, "'%}'");
    return s;
  }
  if (word == "break" || word == "continue") {
    if (loop_depth_ == 0) fail(word_pos, "{% " + word + " %} outside a for loop");
    auto s = std::make_unique<Stmt>();
    s->kind = word == "break" ? StmtKind::Break : StmtKind::Continue;
    s->pos = pos;
    expect(TokenType::BlockEnd, "'%}'");
    return s;
  }
  if (word == "generation") {
    // Hugging Face's extension marks the assistant's part; rendered as is,
    // in a scope of its own (it is a call block there).
    auto s = std::make_unique<Stmt>();
    s->kind = StmtKind::With;
    s->pos = pos;
    expect(TokenType::BlockEnd, "'%}'");
    const int saved_loop = loop_depth_;  // its body is a function: no break or continue out of it
    loop_depth_ = 0;
    body_until(s->body, {"endgeneration"}, "generation", pos);
    loop_depth_ = saved_loop;
    expect(TokenType::BlockEnd, "'%}'");
    return s;
  }
  for (std::string_view u : kUnsupportedStatements)
    if (word == u) fail(word_pos, "unsupported statement {% " + word + " %}");
  if (word.rfind("end", 0) == 0 || word == "else" || word == "elif") {
    std::string where = "outside any block";
    if (!open_.empty())
      where = "inside the {% " + open_.back().first + " %} at line " + std::to_string(open_.back().second.line) +
              ":" + std::to_string(open_.back().second.col);
    fail(word_pos, "unexpected {% " + word + " %} " + where);
  }
  fail(word_pos, "unknown statement {% " + word + " %}");
}

std::string Parser::body_until(Body& body, const std::vector<std::string_view>& ends, const std::string& opener,
                               Pos pos) {
  open_.emplace_back(opener, pos);
  body = subparse(ends);
  open_.pop_back();
  // subparse returned at the end tag's name.
  std::string which = cur().text;
  next();
  return which;
}

std::unique_ptr<Stmt> Parser::stmt_for(Pos pos) {
  auto s = std::make_unique<Stmt>();
  s->kind = StmtKind::For;
  s->pos = pos;
  s->target = assign_target(true, false, "in");
  if (!skip_name("in")) fail(cur().pos, "expected 'in' in {% for %}, got " + describe(cur()));
  s->expr = tuple(false, false, "recursive");
  if (skip_name("if")) s->cond = expression();
  if (is_name("recursive")) fail(cur().pos, "unsupported recursive for loop");
  expect(TokenType::BlockEnd, "'%}'");
  ++loop_depth_;
  std::string end = body_until(s->body, {"endfor", "else"}, "for", pos);
  --loop_depth_;
  if (end == "else") {
    expect(TokenType::BlockEnd, "'%}'");
    body_until(s->else_body, {"endfor"}, "for", pos);
  }
  expect(TokenType::BlockEnd, "'%}'");
  return s;
}

std::unique_ptr<Stmt> Parser::stmt_if(Pos pos) {
  auto s = std::make_unique<Stmt>();
  s->kind = StmtKind::If;
  s->pos = pos;
  ++if_depth_;
  for (;;) {
    ExprPtr cond = tuple(false);
    expect(TokenType::BlockEnd, "'%}'");
    Body body;
    const std::string end = body_until(body, {"elif", "else", "endif"}, "if", pos);
    s->branches.emplace_back(std::move(cond), std::move(body));
    if (end == "elif") continue;
    if (end == "else") {
      expect(TokenType::BlockEnd, "'%}'");
      body_until(s->else_body, {"endif"}, "if", pos);
    }
    break;
  }
  --if_depth_;
  expect(TokenType::BlockEnd, "'%}'");
  return s;
}

std::unique_ptr<Stmt> Parser::stmt_set(Pos pos) {
  auto s = std::make_unique<Stmt>();
  s->pos = pos;
  s->target = assign_target(true, true, {});
  if (skip_op("=")) {
    s->kind = StmtKind::Set;
    s->expr = tuple();
    expect(TokenType::BlockEnd, "'%}'");
    return s;
  }
  s->kind = StmtKind::SetBlock;
  if (s->target.kind == Target::Kind::Tuple) fail(s->target.pos, "a block {% set %} takes one name");
  s->filters = filter_chain();
  expect(TokenType::BlockEnd, "'%}'");
  body_until(s->body, {"endset"}, "set", pos);
  expect(TokenType::BlockEnd, "'%}'");
  return s;
}

std::vector<ExprPtr> Parser::filter_chain() {
  std::vector<ExprPtr> out;
  while (skip_op("|")) out.push_back(filter(nullptr));
  return out;
}

std::unique_ptr<Stmt> Parser::stmt_macro(Pos pos) {
  auto s = std::make_unique<Stmt>();
  s->kind = StmtKind::Macro;
  s->pos = pos;
  s->text = expect_name("a macro name");
  expect_op("(");
  while (!is_op(")")) {
    if (!s->params.empty()) expect_op(",");
    if (is_op(")")) break;
    Param p;
    p.name = expect_name("a parameter name");
    if (skip_op("=")) p.default_value = expression();
    else if (!s->params.empty() && s->params.back().default_value)
      fail(cur().pos, "parameter '" + p.name + "' without a default follows one with a default");
    s->params.push_back(std::move(p));
  }
  expect_op(")");
  expect(TokenType::BlockEnd, "'%}'");
  macros_.push_back(s.get());
  const int saved_loop = loop_depth_;
  loop_depth_ = 0;
  body_until(s->body, {"endmacro"}, "macro", pos);
  loop_depth_ = saved_loop;
  macros_.pop_back();
  expect(TokenType::BlockEnd, "'%}'");
  return s;
}

std::unique_ptr<Stmt> Parser::stmt_filter(Pos pos) {
  auto s = std::make_unique<Stmt>();
  s->kind = StmtKind::FilterBlock;
  s->pos = pos;
  s->filters.push_back(filter(nullptr));
  for (auto& f : filter_chain()) s->filters.push_back(std::move(f));
  expect(TokenType::BlockEnd, "'%}'");
  body_until(s->body, {"endfilter"}, "filter", pos);
  expect(TokenType::BlockEnd, "'%}'");
  return s;
}

std::unique_ptr<Stmt> Parser::stmt_with(Pos pos) {
  auto s = std::make_unique<Stmt>();
  s->kind = StmtKind::With;
  s->pos = pos;
  while (cur().type != TokenType::BlockEnd) {
    if (!s->assigns.empty()) expect_op(",");
    Target t = assign_target(false, false, {});
    expect_op("=");
    s->assigns.emplace_back(std::move(t), expression());
  }
  expect(TokenType::BlockEnd, "'%}'");
  body_until(s->body, {"endwith"}, "with", pos);
  expect(TokenType::BlockEnd, "'%}'");
  return s;
}

Target Parser::target_item(bool allow_attr) {
  Target t;
  t.pos = cur().pos;
  if (skip_op("(")) {
    t = assign_target(true, false, {});
    expect_op(")");
    return t;
  }
  t.name = expect_name("a variable name");
  if (allow_attr && skip_op(".")) {
    t.kind = Target::Kind::Attr;
    t.attr = expect_name("an attribute name");
  }
  return t;
}

Target Parser::assign_target(bool allow_tuple, bool allow_attr, std::string_view end_name) {
  const Pos pos = cur().pos;
  Target first = target_item(allow_attr);
  if (!allow_tuple || !is_op(",")) return first;
  Target t;
  t.kind = Target::Kind::Tuple;
  t.pos = pos;
  t.items.push_back(std::move(first));
  while (skip_op(",")) {
    if (tuple_end(end_name) || is_op("=") || is_op("|"))
      fail(cur().pos, "expected a name after ',' in an assignment target, got " + describe(cur()));
    t.items.push_back(target_item(false));
  }
  for (const Target& item : t.items)
    if (item.kind == Target::Kind::Attr) fail(item.pos, "a namespace attribute cannot be unpacked into");
  return t;
}

// --- expressions ------------------------------------------------------------

ExprPtr Parser::tuple(bool with_condexpr, bool explicit_parens, std::string_view end_name) {
  const Pos pos = cur().pos;
  std::vector<ExprPtr> items;
  bool is_tuple = false;
  for (;;) {
    if (!items.empty()) expect_op(",");
    if (tuple_end(end_name)) break;
    items.push_back(expression(with_condexpr));
    if (is_op(",")) is_tuple = true;
    else break;
  }
  if (!is_tuple) {
    if (!items.empty()) return std::move(items[0]);
    if (!explicit_parens) fail(cur().pos, "expected an expression, got " + describe(cur()));
  }
  auto e = node(ExprKind::Tuple, pos);
  e->args = std::move(items);
  return e;
}

ExprPtr Parser::condexpr() {
  ExprPtr e = or_expr();
  while (is_name("if")) {
    const Pos pos = cur().pos;
    next();
    auto c = node(ExprKind::Cond, pos);
    c->b = or_expr();
    if (skip_name("else")) c->c = condexpr();
    c->a = std::move(e);
    e = std::move(c);
  }
  return e;
}

ExprPtr Parser::or_expr() {
  ExprPtr left = and_expr();
  while (is_name("or")) {
    auto e = node(ExprKind::Or, cur().pos);
    next();
    e->a = std::move(left);
    e->b = and_expr();
    left = std::move(e);
  }
  return left;
}

ExprPtr Parser::and_expr() {
  ExprPtr left = not_expr();
  while (is_name("and")) {
    auto e = node(ExprKind::And, cur().pos);
    next();
    e->a = std::move(left);
    e->b = not_expr();
    left = std::move(e);
  }
  return left;
}

ExprPtr Parser::not_expr() {
  const DepthGuard guard(this);
  if (is_name("not")) {
    auto e = node(ExprKind::Not, cur().pos);
    next();
    e->a = not_expr();
    return e;
  }
  return compare();
}

ExprPtr Parser::compare() {
  const Pos pos = cur().pos;
  ExprPtr first = math1();
  std::vector<std::string> ops;
  std::vector<ExprPtr> operands;
  for (;;) {
    if (cur().type == TokenType::Operator &&
        (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == ">" || cur().text == "<=" ||
         cur().text == ">=")) {
      ops.push_back(cur().text);
      next();
    } else if (is_name("in")) {
      ops.push_back("in");
      next();
    } else if (is_name("not") && peek().type == TokenType::Name && peek().text == "in") {
      ops.push_back("notin");
      next();
      next();
    } else {
      break;
    }
    operands.push_back(math1());
  }
  if (ops.empty()) return first;
  auto e = node(ExprKind::Compare, pos);
  e->args.push_back(std::move(first));
  for (auto& o : operands) e->args.push_back(std::move(o));
  e->ops = std::move(ops);
  return e;
}

ExprPtr Parser::math1() {
  ExprPtr left = concat();
  while (is_op("+") || is_op("-")) {
    auto e = node(ExprKind::Binary, cur().pos);
    e->name = cur().text;
    next();
    e->a = std::move(left);
    e->b = concat();
    left = std::move(e);
  }
  return left;
}

ExprPtr Parser::concat() {
  ExprPtr left = math2();
  while (is_op("~")) {
    auto e = node(ExprKind::Binary, cur().pos);
    e->name = "~";
    next();
    e->a = std::move(left);
    e->b = math2();
    left = std::move(e);
  }
  return left;
}

ExprPtr Parser::math2() {
  ExprPtr left = pow();
  while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
    auto e = node(ExprKind::Binary, cur().pos);
    e->name = cur().text;
    next();
    e->a = std::move(left);
    e->b = pow();
    left = std::move(e);
  }
  return left;
}

ExprPtr Parser::pow() {
  ExprPtr left = unary();
  while (is_op("**")) {
    auto e = node(ExprKind::Binary, cur().pos);
    e->name = "**";
    next();
    e->a = std::move(left);
    e->b = unary();
    left = std::move(e);
  }
  return left;
}

ExprPtr Parser::unary(bool with_filter) {
  const DepthGuard guard(this);
  ExprPtr e;
  if (is_op("-") || is_op("+")) {
    e = node(is_op("-") ? ExprKind::Neg : ExprKind::Plus, cur().pos);
    next();
    e->a = unary(false);
  } else {
    e = primary();
  }
  e = postfix(std::move(e));
  if (with_filter) e = filter_expr(std::move(e));
  return e;
}

ExprPtr Parser::primary() {
  const Token& t = cur();
  const Pos pos = t.pos;
  if (t.type == TokenType::Name) {
    const std::string& n = t.text;
    ExprPtr e = node(ExprKind::Const, pos);
    if (n == "true" || n == "True") e->value = Value(true);
    else if (n == "false" || n == "False") e->value = Value(false);
    else if (n == "none" || n == "None") e->value = Value::none();
    else {
      e->kind = ExprKind::Name;
      e->name = n;
      if (!macros_.empty() && n == "varargs") macros_.back()->uses_varargs = true;
      if (!macros_.empty() && n == "kwargs") macros_.back()->uses_kwargs = true;
    }
    next();
    return e;
  }
  if (t.type == TokenType::String) {
    std::string s;
    while (cur().type == TokenType::String) {
      s += cur().text;
      next();
    }
    ExprPtr e = node(ExprKind::Const, pos);
    e->value = Value(std::move(s));
    return e;
  }
  if (t.type == TokenType::Int || t.type == TokenType::Float) {
    ExprPtr e = node(ExprKind::Const, pos);
    e->value = t.type == TokenType::Int ? Value(t.int_value) : Value(t.float_value);
    next();
    return e;
  }
  if (skip_op("(")) {
    ExprPtr e = tuple(true, true);
    expect_op(")");
    return e;
  }
  if (skip_op("[")) {
    ExprPtr e = node(ExprKind::List, pos);
    while (!is_op("]")) {
      if (!e->args.empty()) expect_op(",");
      if (is_op("]")) break;
      e->args.push_back(expression());
    }
    expect_op("]");
    return e;
  }
  if (skip_op("{")) {
    ExprPtr e = node(ExprKind::Dict, pos);
    while (!is_op("}")) {
      if (!e->args.empty()) expect_op(",");
      if (is_op("}")) break;
      e->args.push_back(expression());
      expect_op(":");
      e->args.push_back(expression());
    }
    expect_op("}");
    return e;
  }
  fail(pos, "expected an expression, got " + describe(t));
}

ExprPtr Parser::postfix(ExprPtr e) {
  for (;;) {
    if (is_op(".") || is_op("[")) e = subscript(std::move(e));
    else if (is_op("(")) {
      auto c = node(ExprKind::Call, e->pos);
      c->a = std::move(e);
      call_args(*c);
      e = std::move(c);
    } else {
      return e;
    }
  }
}

ExprPtr Parser::filter_expr(ExprPtr e) {
  for (;;) {
    if (skip_op("|")) e = filter(std::move(e));
    else if (is_name("is")) e = test(std::move(e));
    else if (is_op("(")) {
      auto c = node(ExprKind::Call, cur().pos);
      c->a = std::move(e);
      call_args(*c);
      e = std::move(c);
    } else {
      return e;
    }
  }
}

ExprPtr Parser::subscript(ExprPtr e) {
  const Pos pos = e->pos;  // errors point at the start of the expression
  if (skip_op(".")) {
    if (cur().type == TokenType::Name) {
      auto a = node(ExprKind::Attr, pos);
      a->a = std::move(e);
      a->name = cur().text;
      next();
      return a;
    }
    if (cur().type == TokenType::Int) {
      auto a = node(ExprKind::Item, pos);
      a->a = std::move(e);
      a->b = node(ExprKind::Const, cur().pos);
      a->b->value = Value(cur().int_value);
      next();
      return a;
    }
    fail(cur().pos, "expected a name or number after '.', got " + describe(cur()));
  }
  expect_op("[");
  // One index, a slice, or several indexes (a tuple key).
  std::vector<ExprPtr> parts;
  bool is_slice = false;
  std::vector<ExprPtr> keys;
  for (;;) {
    if (is_op("]") && keys.empty()) break;  // x[] is x[()] in jinja2
    ExprPtr start;
    if (!is_op(":")) start = expression();
    if (is_op(":")) {
      if (!keys.empty()) fail(cur().pos, "unsupported slice inside a tuple subscript");
      is_slice = true;
      next();
      parts.push_back(std::move(start));
      parts.push_back(is_op("]") || is_op(":") ? nullptr : expression());
      if (skip_op(":")) parts.push_back(is_op("]") ? nullptr : expression());
      else parts.push_back(nullptr);
      break;
    }
    keys.push_back(std::move(start));
    if (!skip_op(",")) break;
    if (is_op("]")) break;
  }
  expect_op("]");
  if (is_slice) {
    auto s = node(ExprKind::Slice, pos);
    s->a = std::move(e);
    s->args = std::move(parts);
    return s;
  }
  auto it = node(ExprKind::Item, pos);
  it->a = std::move(e);
  if (keys.size() == 1) {
    it->b = std::move(keys[0]);
  } else {
    it->b = node(ExprKind::Tuple, pos);
    it->b->args = std::move(keys);
  }
  return it;
}

void Parser::call_args(Expr& e) {
  expect_op("(");
  bool any = false;
  while (!is_op(")")) {
    if (any) expect_op(",");
    if (is_op(")")) break;
    any = true;
    if (is_op("*") || is_op("**")) fail(cur().pos, "unsupported *args or **kwargs in a call");
    if (cur().type == TokenType::Name && peek().type == TokenType::Operator && peek().text == "=") {
      std::string key = cur().text;
      next();
      next();
      e.kwargs.emplace_back(std::move(key), expression());
    } else {
      if (!e.kwargs.empty()) fail(cur().pos, "a positional argument follows a keyword argument");
      e.args.push_back(expression());
    }
  }
  expect_op(")");
}

ExprPtr Parser::filter(ExprPtr e) {
  auto f = node(ExprKind::Filter, cur().pos);
  f->a = std::move(e);
  f->name = expect_name("a filter name");
  while (is_op(".") && peek().type == TokenType::Name) {
    next();
    f->name += "." + cur().text;
    next();
  }
  switch (filter_support(f->name)) {
    case Support::Supported: break;
    case Support::Unsupported: fail(f->pos, "unsupported filter '" + f->name + "'");
    case Support::Unknown:
      if (if_depth_ == 0) fail(f->pos, "unknown filter '" + f->name + "'");
      f->deferred_error = "unknown filter '" + f->name + "'";
  }
  if (is_op("(")) call_args(*f);
  return f;
}

ExprPtr Parser::test(ExprPtr e) {
  auto t = node(ExprKind::Test, cur().pos);
  next();  // is
  t->negated = skip_name("not");
  t->a = std::move(e);
  t->name = expect_name("a test name");
  switch (test_support(t->name)) {
    case Support::Supported: break;
    case Support::Unsupported: fail(t->pos, "unsupported test '" + t->name + "'");
    case Support::Unknown:
      if (if_depth_ == 0) fail(t->pos, "unknown test '" + t->name + "'");
      t->deferred_error = "unknown test '" + t->name + "'";
  }
  if (is_op("(")) {
    call_args(*t);
  } else if ((cur().type == TokenType::Name || cur().type == TokenType::String || cur().type == TokenType::Int ||
              cur().type == TokenType::Float || is_op("(") || is_op("[") || is_op("{")) &&
             !is_name("else") && !is_name("or") && !is_name("and")) {
    if (is_name("is")) fail(cur().pos, "tests cannot be chained with another 'is'");
    t->args.push_back(postfix(primary()));
  }
  return t;
}

}  // namespace

Body parse(std::vector<Token> tokens, std::string_view name) { return Parser(std::move(tokens), name).parse_template(); }

}  // namespace weir::jinja
