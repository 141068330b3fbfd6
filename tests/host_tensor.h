// A Tensor over host memory for the kernel tests: shape ne, contiguous
// strides, data as given (not owned).
#pragma once
#include <initializer_list>

#include "core/tensor.h"

namespace weir::test {

inline Tensor host_tensor(DType t, std::initializer_list<int64_t> ne, void* data, const char* name = "t") {
  Tensor x;
  x.dtype = t;
  int i = 0;
  for (int64_t n : ne) x.ne[i++] = n;
  set_contiguous_strides(x);
  x.data = data;
  x.name = name;
  return x;
}

}  // namespace weir::test
