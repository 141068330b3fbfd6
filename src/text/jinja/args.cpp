#include "text/jinja/builtins.h"

namespace weir::jinja {

ArgBinder::ArgBinder(std::string_view function, const CallArgs& args, std::initializer_list<Param> params) {
  const std::vector<Param> ps(params);
  values_.resize(ps.size());
  given_.assign(ps.size(), false);
  const std::string fn(function);
  if (args.positional.size() > ps.size())
    throw EvalError(fn + "() takes at most " + std::to_string(ps.size()) + " argument(s) (" +
                    std::to_string(args.positional.size()) + " given)");
  for (size_t i = 0; i < args.positional.size(); ++i) values_[i] = args.positional[i], given_[i] = true;
  for (const auto& [key, v] : args.keyword) {
    size_t i = 0;
    while (i < ps.size() && key != ps[i].name) ++i;
    if (i == ps.size()) throw EvalError(fn + "() got an unexpected keyword argument '" + key + "'");
    if (given_[i]) throw EvalError(fn + "() got multiple values for argument '" + key + "'");
    values_[i] = v, given_[i] = true;
  }
  for (size_t i = 0; i < ps.size(); ++i) {
    if (given_[i]) continue;
    if (ps[i].required) throw EvalError(fn + "() missing required argument '" + ps[i].name + "'");
    values_[i] = ps[i].default_value;
  }
}

}  // namespace weir::jinja
