// weir::Error: the one exception type that reaches users. Its message is a
// single line that names what was wrong and where (file, key, tensor, offset).
#pragma once
#include <stdexcept>
#include <string>

namespace weir {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace weir
