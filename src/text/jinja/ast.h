// The parsed template: expressions and statements, each with the place in
// the source it came from (for errors at render time).
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "text/jinja/position.h"
#include "text/jinja/value.h"

namespace weir::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

enum class ExprKind {
  Const,      // value
  Name,       // name
  List,       // [args...]
  Tuple,      // (args...)
  Dict,       // {args[0]: args[1], args[2]: args[3], ...}
  Attr,       // a.name
  Item,       // a[b]
  Slice,      // a[args[0]:args[1]:args[2]] (each may be null)
  Call,       // a(args..., kwargs...)
  Filter,     // a | name(args..., kwargs...); a is null in {% filter %} and block set
  Test,       // a is [not] name(args..., kwargs...)
  Not,        // not a
  Neg,        // -a
  Plus,       // +a
  Binary,     // a name b, name one of + - * / // % ** ~
  Compare,    // args[0] ops[0] args[1] ops[1] args[2] ... (== != < <= > >= in notin)
  And,        // a and b
  Or,         // a or b
  Cond,       // a if b else c (c may be null)
};

struct Expr {
  ExprKind kind = ExprKind::Const;
  Pos pos;
  Value value;
  std::string name;
  ExprPtr a, b, c;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
  bool negated = false;  // Test: `is not`
  // Filter, Test: the name is not one this engine has; fail when evaluated
  // (jinja2 does the same for filters and tests inside {% if %} blocks).
  std::string deferred_error;

  Expr() = default;
  Expr(const Expr&) = delete;
  Expr& operator=(const Expr&) = delete;
  // Frees the children without recursing (ast.cpp): a chain of 100,000 `+`
  // is a tree that deep, and the parser refuses it only once it is built.
  ~Expr();
};

// How deep the tree under e goes (e alone: 1), found without recursing;
// sets *deepest to a node at the bottom.
int tree_depth(const Expr& e, const Expr** deepest);

// Where a for loop or set puts values: a name, a tuple of targets
// (unpacking), or a namespace attribute (`set ns.x = ...`).
struct Target {
  enum class Kind { Name, Tuple, Attr } kind = Kind::Name;
  Pos pos;
  std::string name;  // Name; Attr: the namespace's variable
  std::string attr;  // Attr
  std::vector<Target> items;  // Tuple
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

enum class StmtKind {
  Text,         // text
  Output,       // {{ expr }}
  If,           // branches: (cond, body)...; else_body
  For,          // for target in expr [if cond] body [else else_body]
  Set,          // set target = expr
  SetBlock,     // set target [| filters] body endset
  Macro,        // macro name(params) body
  FilterBlock,  // filter filters body endfilter
  With,         // with assigns body endwith
  Break,
  Continue,
};

struct Param {
  std::string name;
  ExprPtr default_value;  // null: required
};

struct Stmt {
  StmtKind kind = StmtKind::Text;
  Pos pos;
  std::string text;  // Text; Macro: its name
  ExprPtr expr;      // Output; For: the iterable; Set: the value
  ExprPtr cond;      // For: the inline filter (`if cond`)
  Target target;     // For, Set, SetBlock
  std::vector<std::pair<ExprPtr, Body>> branches;  // If
  Body body, else_body;
  std::vector<ExprPtr> filters;  // SetBlock, FilterBlock: Filter nodes (a is null) in order
  std::vector<Param> params;     // Macro
  std::vector<std::pair<Target, ExprPtr>> assigns;  // With
  bool uses_varargs = false, uses_kwargs = false;  // Macro: the body names `varargs` / `kwargs`
};

}  // namespace weir::jinja
