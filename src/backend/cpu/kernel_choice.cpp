#include "backend/cpu/kernel_choice.h"

#include "backend/cpu/amx.h"
#include "backend/cpu/qdot.h"
#include "backend/cpu/repack.h"
#include "core/dtype.h"

namespace weir::cpu {

std::string describe_cpu_kernels(bool repack) {
  const SimdLevel hw = hardware_simd_level(), used = best_simd_level();
  std::string s = std::string(simd_level_name(used)) + " kernels";
  if (hw != used) s += std::string(" (hardware: ") + simd_level_name(hw) + ")";
  std::string types;
  for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q8_0, DType::Q2_K, DType::Q3_K, DType::Q4_K,
                  DType::Q5_K, DType::Q6_K})
    if (can_repack(t, 256) && repacked_tile(t)) types += std::string(types.empty() ? "" : ", ") + dtype_name(t);
  if (types.empty()) s += "; no weight type repacked";
  else if (!repack) s += "; weights in the file's layout (repacking off)";
  else s += "; weights repacked: " + types;
  return s + "; AMX: " + amx_support().describe();
}

}  // namespace weir::cpu
