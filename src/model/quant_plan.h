// File types (llama.cpp's LLAMA_FTYPE_* numbering, stored as
// general.file_type) and the per-tensor type choice of each mixture, made the
// way llama.cpp's quantizer makes it, so `weir quantize` and `weir synth`
// produce files with the same tensor types as llama-quantize.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"

namespace weir {

enum class FileType : uint32_t {
  ALL_F32 = 0,
  MOSTLY_F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q8_0 = 7,
  Q5_0 = 8,
  Q5_1 = 9,
  Q2_K = 10,
  Q3_K_S = 11,
  Q3_K_M = 12,
  Q3_K_L = 13,
  Q4_K_S = 14,
  Q4_K_M = 15,
  Q5_K_S = 16,
  Q5_K_M = 17,
  Q6_K = 18,
  IQ4_NL = 25,
  IQ4_XS = 30,
  MOSTLY_BF16 = 32,
  MXFP4_MOE = 38,
};

// "Q4_K_M", "q8_0", "F16"...; throws weir::Error listing the known names.
FileType parse_file_type(std::string_view name);
const char* file_type_name(FileType t);

// What the type choice needs to know about the model.
struct QuantModelInfo {
  std::string arch;  // general.architecture
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t n_expert = 0;
};

struct TensorDesc {
  std::string name;
  int n_dims = 1;
  int64_t ne[4] = {1, 1, 1, 1};
};

// The type of each tensor (same order as `tensors`) in a file of type ft.
// 1-D tensors (norms, biases) stay F32; rows whose length does not fit the
// chosen block size fall back the way llama.cpp falls back. with_imatrix:
// an importance matrix will be used (llama.cpp then drops the IQ4 ffn_down
// bump and adds the Q4_0 / Q5_0 one).
std::vector<DType> plan_tensor_types(FileType ft, const QuantModelInfo& info,
                                     const std::vector<TensorDesc>& tensors, bool with_imatrix = false);

}  // namespace weir
