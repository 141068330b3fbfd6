#include "text/jinja/render.h"

#include <optional>

#include "text/jinja/builtins.h"
#include "text/jinja/operators.h"
#include "text/jinja/position.h"
#include "text/jinja/work.h"

namespace weir::jinja {

const Value* Scope::find(const std::string& name) const {
  for (const Scope* s = this; s; s = s->parent_.get()) {
    const auto it = s->vars_.find(name);
    if (it != s->vars_.end()) return &it->second;
  }
  return nullptr;
}

namespace {

using ScopePtr = std::shared_ptr<Scope>;

// Deeper macro calls than this fail (a runaway recursion would otherwise
// end the process).
constexpr int kMaxCallDepth = 200;
// Statements and expressions being evaluated, one inside the other, through
// macro calls too: past this the render fails rather than overflow the
// stack. A level takes ~0.7 KB of stack (several KB under ASan, as the
// fuzz targets run), so 1000 fit in 1 MB (8 MB under ASan); real templates
// stay under 100, and jinja2 stops near 150 nested macro calls.
constexpr int kMaxNestedEvaluation = 1000;

class Renderer {
 public:
  // `output`: the rendered text, held to limits.max_output_bytes (the text
  // of macros and blocks, built apart, to kMaxTextBytes).
  Renderer(std::string_view name, const RenderLimits& limits, const std::string& output)
      : name_(name), limits_(limits), output_(&output), meter_(limits, name) {}

  enum class Flow { Normal, Break, Continue };

  Flow exec(const Body& body, const ScopePtr& scope, std::string& out);

 private:
  void emit(std::string& out, std::string_view text);
  Flow exec(const Stmt& s, const ScopePtr& scope, std::string& out);
  Flow exec_for(const Stmt& s, const ScopePtr& scope, std::string& out);
  Flow exec_set(const Stmt& s, const ScopePtr& scope);
  void define_macro(const Stmt& s, const ScopePtr& scope);
  Value call_macro(const Stmt& s, const ScopePtr& defined_in, const CallArgs& args);
  Value apply_filters(const std::vector<ExprPtr>& filters, Value v, const ScopePtr& scope);
  void assign(const Target& t, const Value& v, Scope& scope, const ScopePtr& lookup);

  Value eval(const Expr& e, const ScopePtr& scope);
  Value eval_inner(const Expr& e, const ScopePtr& scope);
  CallArgs eval_args(const Expr& e, const ScopePtr& scope);
  Value eval_compare(const Expr& e, const ScopePtr& scope);

  std::string_view name_;
  const RenderLimits& limits_;
  const std::string* output_;
  WorkMeter meter_;  // this thread's while the render runs
  int depth_ = 0;    // macro calls
  int nested_ = 0;   // statements and expressions being evaluated (kMaxNestedEvaluation)

  // Counts one level of nested_ while it lives.
  struct Nesting {
    explicit Nesting(Renderer* r) : r_(r) {
      if (++r_->nested_ > kMaxNestedEvaluation)
        throw EvalError("statements and expressions nested deeper than " + std::to_string(kMaxNestedEvaluation) +
                        " through macro calls (a runaway recursion?)");
    }
    ~Nesting() { --r_->nested_; }
    Renderer* r_;
  };
};

// Appends text to out, counted as work, within out's limit.
void Renderer::emit(std::string& out, std::string_view text) {
  if (&out == output_) {
    if (out.size() + text.size() > limits_.max_output_bytes)
      throw EvalError("the rendered text exceeded its limit of " + std::to_string(limits_.max_output_bytes) + " bytes");
  } else if (out.size() + text.size() > kMaxTextBytes) {
    refuse_size(out.size() + text.size());
  }
  meter_.charge(text.size());
  out += text;
}

Renderer::Flow Renderer::exec(const Body& body, const ScopePtr& scope, std::string& out) {
  for (const auto& s : body) {
    const Flow f = exec(*s, scope, out);
    if (f != Flow::Normal) return f;
  }
  return Flow::Normal;
}

Renderer::Flow Renderer::exec(const Stmt& s, const ScopePtr& scope, std::string& out) {
  try {
    const Nesting nesting(this);
    meter_.charge(kStatementWork);
    switch (s.kind) {
      case StmtKind::Text: emit(out, s.text); return Flow::Normal;
      case StmtKind::Output: {
        const Value v = eval(*s.expr, scope);
        if (v.is_string()) emit(out, v.text());
        else emit(out, v.str());
        return Flow::Normal;
      }
      case StmtKind::If:
        for (const auto& [cond, body] : s.branches)
          if (eval(*cond, scope).truthy()) return exec(body, scope, out);
        return exec(s.else_body, scope, out);
      case StmtKind::For: return exec_for(s, scope, out);
      case StmtKind::Set:
      case StmtKind::SetBlock: return exec_set(s, scope);
      case StmtKind::Macro: define_macro(s, scope); return Flow::Normal;
      case StmtKind::FilterBlock: {
        std::string body;
        // A break or continue inside leaves the loop with the body dropped.
        const Flow f = exec(s.body, std::make_shared<Scope>(scope), body);
        if (f != Flow::Normal) return f;
        emit(out, apply_filters(s.filters, Value(std::move(body)), scope).str());
        return Flow::Normal;
      }
      case StmtKind::With: {
        auto inner = std::make_shared<Scope>(scope);
        for (const auto& [target, expr] : s.assigns) assign(target, eval(*expr, scope), *inner, inner);
        return exec(s.body, inner, out);
      }
      case StmtKind::Break: return Flow::Break;
      case StmtKind::Continue: return Flow::Continue;
    }
  } catch (const EvalError& e) {
    fail_at(name_, s.pos, e.what());
  }
  return Flow::Normal;
}

Renderer::Flow Renderer::exec_for(const Stmt& s, const ScopePtr& scope, std::string& out) {
  std::vector<Value> items = iterate(eval(*s.expr, scope));
  if (s.cond) {
    std::vector<Value> kept;
    for (Value& item : items) {
      auto probe = std::make_shared<Scope>(scope);
      assign(s.target, item, *probe, probe);
      if (eval(*s.cond, probe).truthy()) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) return exec(s.else_body, std::make_shared<Scope>(scope), out);
  const auto n = static_cast<int64_t>(items.size());
  // loop.changed() remembers its last argument across iterations.
  auto last_changed = std::make_shared<std::optional<std::vector<Value>>>();
  for (int64_t i = 0; i < n; ++i) {
    meter_.charge(kStatementWork);
    auto inner = std::make_shared<Scope>(scope);
    assign(s.target, items[static_cast<size_t>(i)], *inner, inner);
    auto loop = std::make_shared<Object>();
    loop->class_name = "LoopContext";
    loop->fixed_repr = "<LoopContext " + std::to_string(i + 1) + "/" + std::to_string(n) + ">";
    Dict& a = loop->attrs;
    a.set("index", Value(i + 1));
    a.set("index0", Value(i));
    a.set("revindex", Value(n - i));
    a.set("revindex0", Value(n - i - 1));
    a.set("first", Value(i == 0));
    a.set("last", Value(i == n - 1));
    a.set("length", Value(n));
    a.set("depth", Value(1));
    a.set("depth0", Value(0));
    a.set("previtem", i > 0 ? items[static_cast<size_t>(i - 1)] : Value::undefined("there is no previous item"));
    a.set("nextitem", i + 1 < n ? items[static_cast<size_t>(i + 1)] : Value::undefined("there is no next item"));
    a.set("cycle", Value::function("loop.cycle", [i](const CallArgs& args) {
            if (!args.keyword.empty()) throw EvalError("loop.cycle() takes no keyword arguments");
            if (args.positional.empty()) throw EvalError("no items for cycling given");
            return args.positional[static_cast<size_t>(i) % args.positional.size()];
          }));
    a.set("changed", Value::function("loop.changed", [last_changed](const CallArgs& args) {
            if (last_changed->has_value() && (*last_changed)->size() == args.positional.size()) {
              bool same = true;
              for (size_t k = 0; k < args.positional.size(); ++k)
                same = same && equals((**last_changed)[k], args.positional[k]);
              if (same) return Value(false);
            }
            for (const Value& v : args.positional)  // kept in the loop, it could hold the loop
              if (holds_reference(v)) throw EvalError("loop.changed() of a namespace or loop (unsupported)");
            *last_changed = args.positional;
            return Value(true);
          }));
    inner->set("loop", Value::object(std::move(loop)));
    if (exec(s.body, inner, out) == Flow::Break) break;
  }
  return Flow::Normal;
}

Renderer::Flow Renderer::exec_set(const Stmt& s, const ScopePtr& scope) {
  if (s.kind == StmtKind::Set) {
    assign(s.target, eval(*s.expr, scope), *scope, scope);
    return Flow::Normal;
  }
  std::string body;
  const Flow f = exec(s.body, std::make_shared<Scope>(scope), body);
  if (f != Flow::Normal) return f;  // as in a filter block
  assign(s.target, apply_filters(s.filters, Value(std::move(body)), scope), *scope, scope);
  return Flow::Normal;
}

Value Renderer::apply_filters(const std::vector<ExprPtr>& filters, Value v, const ScopePtr& scope) {
  for (const auto& f : filters) {
    try {
      if (!f->deferred_error.empty()) throw EvalError(f->deferred_error);
      v = apply_filter(f->name, v, eval_args(*f, scope));
    } catch (const EvalError& e) {
      fail_at(name_, f->pos, e.what());
    }
  }
  return v;
}

void Renderer::assign(const Target& t, const Value& v, Scope& scope, const ScopePtr& lookup) {
  switch (t.kind) {
    case Target::Kind::Name: scope.set(t.name, v); return;
    case Target::Kind::Attr: {
      const Value* ns = lookup->find(t.name);
      if (!ns || !ns->is_object() || !ns->object().assignable)
        throw EvalError("cannot assign attribute on non-namespace object ('" + t.name + "." + t.attr + "')");
      if (holds_reference(v)) throw EvalError(no_reference_in_namespace(t.name + "." + t.attr));
      if (value_depth(v) >= kMaxNesting)
        throw EvalError(t.name + "." + t.attr + ": lists or dicts nested " + std::to_string(value_depth(v)) +
                        " deep, too deep to keep in a namespace");
      ns->object().attrs.set(Value(t.attr), v);
      return;
    }
    case Target::Kind::Tuple: {
      if (!(v.is_string() || v.is_sequence() || v.is_dict() || v.is_undefined()))
        throw EvalError(std::string("cannot unpack non-iterable ") + v.type_name() + " object");
      const std::vector<Value> items = iterate(v);
      if (items.size() < t.items.size())
        throw EvalError("not enough values to unpack (expected " + std::to_string(t.items.size()) + ", got " +
                        std::to_string(items.size()) + ")");
      if (items.size() > t.items.size())
        throw EvalError("too many values to unpack (expected " + std::to_string(t.items.size()) + ")");
      for (size_t i = 0; i < items.size(); ++i) assign(t.items[i], items[i], scope, lookup);
      return;
    }
  }
}

void Renderer::define_macro(const Stmt& s, const ScopePtr& scope) {
  auto f = std::make_shared<Function>();
  f->name = s.text;
  f->is_macro = true;
  for (const Param& p : s.params) f->params.push_back(p.name);
  // The scope holds the macro and the macro the scope: a cycle that lives
  // as long as the render, which is all a macro can.
  std::weak_ptr<Scope> weak = scope;
  f->call = [this, &s, weak](const CallArgs& args) {
    ScopePtr defined_in = weak.lock();
    if (!defined_in) throw EvalError("macro '" + s.text + "' called after its scope ended");
    return call_macro(s, defined_in, args);
  };
  scope->set(s.text, Value::function(std::shared_ptr<const Function>(std::move(f))));
}

Value Renderer::call_macro(const Stmt& s, const ScopePtr& defined_in, const CallArgs& args) {
  if (depth_ >= kMaxCallDepth) throw EvalError("macro calls nested deeper than " + std::to_string(kMaxCallDepth));
  auto inner = std::make_shared<Scope>(defined_in);
  const size_t n = s.params.size();
  if (args.positional.size() > n && !s.uses_varargs)
    throw EvalError("macro '" + s.text + "' takes not more than " + std::to_string(n) + " argument(s)");
  std::vector<bool> given(n, false);
  std::vector<Value> values(n);
  for (size_t i = 0; i < n && i < args.positional.size(); ++i) values[i] = args.positional[i], given[i] = true;
  Dict extra_kwargs;
  for (const auto& [key, v] : args.keyword) {
    size_t i = 0;
    while (i < n && s.params[i].name != key) ++i;
    if (i == n) {
      if (!s.uses_kwargs) throw EvalError("macro '" + s.text + "' takes no keyword argument '" + key + "'");
      extra_kwargs.set(Value(key), v);
      continue;
    }
    if (given[i]) throw EvalError("macro '" + s.text + "' got multiple values for argument '" + key + "'");
    values[i] = v, given[i] = true;
  }
  // Defaults are evaluated in order, seeing the parameters before them.
  for (size_t i = 0; i < n; ++i) {
    if (!given[i]) {
      values[i] = s.params[i].default_value ? eval(*s.params[i].default_value, inner)
                                            : Value::undefined("parameter '" + s.params[i].name + "' was not provided");
    }
    inner->set(s.params[i].name, values[i]);
  }
  if (s.uses_varargs) {
    std::vector<Value> rest;
    for (size_t i = n; i < args.positional.size(); ++i) rest.push_back(args.positional[i]);
    inner->set("varargs", Value::tuple(std::move(rest)));
  }
  if (s.uses_kwargs) inner->set("kwargs", Value::dict(std::move(extra_kwargs)));
  std::string out;
  ++depth_;
  try {
    exec(s.body, inner, out);
  } catch (...) {
    --depth_;
    throw;
  }
  --depth_;
  return Value(std::move(out));
}

// --- expressions -------------------------------------------------------------

Value Renderer::eval(const Expr& e, const ScopePtr& scope) {
  try {
    const Nesting nesting(this);
    meter_.charge(kExpressionWork);
    return eval_inner(e, scope);
  } catch (const EvalError& err) {
    fail_at(name_, e.pos, err.what());
  }
}

CallArgs Renderer::eval_args(const Expr& e, const ScopePtr& scope) {
  CallArgs args;
  for (const auto& a : e.args) args.positional.push_back(eval(*a, scope));
  for (const auto& [k, a] : e.kwargs) args.keyword.emplace_back(k, eval(*a, scope));
  return args;
}

Value Renderer::eval_compare(const Expr& e, const ScopePtr& scope) {
  Value left = eval(*e.args[0], scope);
  for (size_t i = 0; i < e.ops.size(); ++i) {
    Value right = eval(*e.args[i + 1], scope);
    const std::string& op = e.ops[i];
    bool ok;
    if (op == "==") ok = equals(left, right);
    else if (op == "!=") ok = !equals(left, right);
    else if (op == "in") ok = contains(right, left);
    else if (op == "notin") ok = !contains(right, left);
    else {
      const int c = compare(left, right, op.c_str());
      if (c == 2) ok = false;  // nan
      else if (op == "<") ok = c < 0;
      else if (op == "<=") ok = c <= 0;
      else if (op == ">") ok = c > 0;
      else ok = c >= 0;
    }
    if (!ok) return Value(false);
    left = std::move(right);
  }
  return Value(true);
}

Value Renderer::eval_inner(const Expr& e, const ScopePtr& scope) {
  switch (e.kind) {
    case ExprKind::Const: return e.value;
    case ExprKind::Name: {
      if (const Value* v = scope->find(e.name)) return *v;
      if (is_unsupported_global(e.name)) throw EvalError("unsupported global '" + e.name + "'");
      return Value::undefined("'" + e.name + "' is undefined");
    }
    case ExprKind::List:
    case ExprKind::Tuple: {
      std::vector<Value> items;
      for (const auto& a : e.args) items.push_back(eval(*a, scope));
      return Value::list(std::move(items), e.kind == ExprKind::List ? SeqKind::List : SeqKind::Tuple);
    }
    case ExprKind::Dict: {
      Dict d;
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
        Value k = eval(*e.args[i], scope);
        d.set(std::move(k), eval(*e.args[i + 1], scope));
      }
      return Value::dict(std::move(d));
    }
    case ExprKind::Attr: return get_attribute(eval(*e.a, scope), e.name);
    case ExprKind::Item: return get_item(eval(*e.a, scope), eval(*e.b, scope));
    case ExprKind::Slice: {
      Value obj = eval(*e.a, scope);
      Value parts[3];
      for (size_t i = 0; i < 3; ++i) parts[i] = e.args[i] ? eval(*e.args[i], scope) : Value::none();
      return get_slice(obj, parts[0], parts[1], parts[2]);
    }
    case ExprKind::Call: {
      Value callee = eval(*e.a, scope);
      CallArgs args = eval_args(e, scope);
      if (callee.is_function()) return callee.function().call(args);
      if (callee.is_undefined()) throw EvalError(callee.undefined_hint());
      throw EvalError(std::string("'") + callee.type_name() + "' object is not callable");
    }
    case ExprKind::Filter: {
      if (!e.deferred_error.empty()) throw EvalError(e.deferred_error);
      Value v = eval(*e.a, scope);
      return apply_filter(e.name, v, eval_args(e, scope));
    }
    case ExprKind::Test: {
      if (!e.deferred_error.empty()) throw EvalError(e.deferred_error);
      Value v = eval(*e.a, scope);
      const bool r = apply_test(e.name, v, eval_args(e, scope));
      return Value(e.negated ? !r : r);
    }
    case ExprKind::Not: return Value(!eval(*e.a, scope).truthy());
    case ExprKind::Neg: return negate(eval(*e.a, scope));
    case ExprKind::Plus: return unary_plus(eval(*e.a, scope));
    case ExprKind::Binary: {
      Value a = eval(*e.a, scope);
      return binary_op(e.name, a, eval(*e.b, scope));
    }
    case ExprKind::Compare: return eval_compare(e, scope);
    case ExprKind::And: {
      Value a = eval(*e.a, scope);
      return a.truthy() ? eval(*e.b, scope) : a;
    }
    case ExprKind::Or: {
      Value a = eval(*e.a, scope);
      return a.truthy() ? a : eval(*e.b, scope);
    }
    case ExprKind::Cond:
      if (eval(*e.b, scope).truthy()) return eval(*e.a, scope);
      if (e.c) return eval(*e.c, scope);
      return Value::undefined("the inline if-expression on line " + std::to_string(e.pos.line) +
                              " evaluated to false and no else section was defined.");
  }
  return Value();
}

}  // namespace

std::string render(const Body& body, const Value& context, std::string_view name, const RenderLimits& limits) {
  if (!context.is_dict())
    throw Error(std::string(name) + ": the render context must be a dict of variables, got " + context.type_name());
  auto globals = std::make_shared<Scope>();
  add_globals(*globals);
  auto vars = std::make_shared<Scope>(globals);
  for (const auto& [k, v] : context.dict()) {
    if (!k.is_string()) throw Error(std::string(name) + ": a context variable name is not a string: " + k.repr());
    vars->set(k.text(), v);
  }
  auto top = std::make_shared<Scope>(vars);
  std::string out;
  Renderer(name, limits, out).exec(body, top, out);
  return out;
}

}  // namespace weir::jinja
