#include "text/jinja/ast.h"

namespace weir::jinja {

namespace {

// Moves e's children to `to`.
void take_children(Expr& e, std::vector<ExprPtr>& to) {
  for (ExprPtr* p : {&e.a, &e.b, &e.c})
    if (*p) to.push_back(std::move(*p));
  for (ExprPtr& x : e.args)
    if (x) to.push_back(std::move(x));
  for (auto& kv : e.kwargs)
    if (kv.second) to.push_back(std::move(kv.second));
}

}  // namespace

Expr::~Expr() {
  if (!a && !b && !c && args.empty() && kwargs.empty()) return;
  std::vector<ExprPtr> pending;
  take_children(*this, pending);
  while (!pending.empty()) {
    ExprPtr e = std::move(pending.back());
    pending.pop_back();
    take_children(*e, pending);
  }  // each node is freed childless, so its destructor goes no deeper
}

int tree_depth(const Expr& root, const Expr** deepest) {
  int most = 0;
  std::vector<std::pair<const Expr*, int>> pending{{&root, 1}};
  while (!pending.empty()) {
    const auto [e, depth] = pending.back();
    pending.pop_back();
    if (depth > most) most = depth, *deepest = e;
    for (const Expr* child : {e->a.get(), e->b.get(), e->c.get()})
      if (child) pending.emplace_back(child, depth + 1);
    for (const ExprPtr& x : e->args)
      if (x) pending.emplace_back(x.get(), depth + 1);
    for (const auto& kv : e->kwargs)
      if (kv.second) pending.emplace_back(kv.second.get(), depth + 1);
  }
  return most;
}

}  // namespace weir::jinja
