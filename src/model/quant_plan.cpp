// STUB (issue 3): plain float file types only until the mixtures land.
#include "model/quant_plan.h"

#include <string>

#include "core/error.h"

namespace weir {

FileType parse_file_type(std::string_view name) {
  if (name == "F32" || name == "f32") return FileType::ALL_F32;
  if (name == "F16" || name == "f16") return FileType::MOSTLY_F16;
  throw Error("unknown file type '" + std::string(name) + "'");
}

const char* file_type_name(FileType t) {
  switch (t) {
    case FileType::ALL_F32: return "F32";
    case FileType::MOSTLY_F16: return "F16";
    default: return "?";
  }
}

std::vector<DType> plan_tensor_types(FileType ft, const QuantModelInfo&, const std::vector<TensorDesc>& tensors) {
  std::vector<DType> r;
  for (const TensorDesc& t : tensors)
    r.push_back(t.n_dims < 2 || ft == FileType::ALL_F32 ? DType::F32 : DType::F16);
  return r;
}

}  // namespace weir
