#include "model/model_desc.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

namespace weir {
namespace {

std::string count_label(uint64_t n) {
  char buf[32];
  if (n < 1000000) std::snprintf(buf, sizeof buf, "%.0fK", double(n) / 1e3);
  else if (n < 1000000000) std::snprintf(buf, sizeof buf, "%.0fM", double(n) / 1e6);
  else if (n < 10000000000ull) std::snprintf(buf, sizeof buf, "%.1fB", double(n) / 1e9);
  else std::snprintf(buf, sizeof buf, "%.0fB", double(n) / 1e9);
  return buf;
}

// The file type a file of mostly `t` matrices would have declared.
int file_type_of(DType t) {
  switch (t) {
    case DType::F32: return 0;
    case DType::F16: return 1;
    case DType::Q4_0: return 2;
    case DType::Q4_1: return 3;
    case DType::Q8_0: return 7;
    case DType::Q5_0: return 8;
    case DType::Q5_1: return 9;
    case DType::Q2_K: return 10;
    case DType::Q3_K: return 12;
    case DType::Q4_K: return 15;
    case DType::Q5_K: return 17;
    case DType::Q6_K: return 18;
    case DType::BF16: return 32;
    default: return -1;
  }
}

}  // namespace

const char* file_type_description(uint32_t file_type) {
  switch (file_type) {
    case 0: return "all F32";
    case 1: return "F16";
    case 2: return "Q4_0";
    case 3: return "Q4_1";
    case 7: return "Q8_0";
    case 8: return "Q5_0";
    case 9: return "Q5_1";
    case 10: return "Q2_K - Medium";
    case 11: return "Q3_K - Small";
    case 12: return "Q3_K - Medium";
    case 13: return "Q3_K - Large";
    case 14: return "Q4_K - Small";
    case 15: return "Q4_K - Medium";
    case 16: return "Q5_K - Small";
    case 17: return "Q5_K - Medium";
    case 18: return "Q6_K";
    case 21: return "Q2_K - Small";
    case 25: return "IQ4_NL - 4.5 bpw";
    case 30: return "IQ4_XS - 4.25 bpw";
    case 32: return "BF16";
    case 38: return "MXFP4 MoE";
    default: return "unknown, may not work";
  }
}

std::string model_description(const GGUFFile& f) {
  const std::string arch(f.get_str_or("general.architecture", "?"));
  uint64_t n_params = 0;
  for (const auto& t : f.tensors()) n_params += uint64_t(t.n_elements());
  std::string size(f.get_str_or("general.size_label", ""));
  if (size.empty()) size = count_label(n_params);
  std::string type;
  if (f.find("general.file_type")) {
    type = file_type_description(uint32_t(f.get_uint("general.file_type")));
  } else {
    std::map<DType, uint64_t> count;  // elements of matrices by type
    for (const auto& t : f.tensors())
      if (t.n_dims >= 2) count[t.dtype] += uint64_t(t.n_elements());
    auto best = std::max_element(count.begin(), count.end(),
                                 [](const auto& a, const auto& b) { return a.second < b.second; });
    const int ft = best == count.end() ? 0 : file_type_of(best->first);
    type = std::string(ft < 0 ? "unknown, may not work" : file_type_description(uint32_t(ft))) + " (guessed)";
  }
  return arch + " " + size + " " + type;
}

ExpertShare expert_share(const GGUFFile& f) {
  const std::string arch(f.get_str_or("general.architecture", ""));
  if (arch.empty()) return {};
  ExpertShare s{f.get_uint_or(arch + ".expert_count", 0), f.get_uint_or(arch + ".expert_used_count", 0)};
  if (s.n_expert == 0 || s.n_used == 0 || s.n_used > s.n_expert) return {};
  return s;
}

bool ExpertShare::is_expert(const GGUFTensorInfo& t) const {
  return n_expert > 0 && std::string_view(t.name).find("_exps.") != std::string_view::npos;
}

uint64_t decode_weight_bytes(const GGUFFile& f) {
  const bool tied = f.find_tensor("output.weight") == nullptr;
  const ExpertShare experts = expert_share(f);
  uint64_t n = 0;
  for (const auto& t : f.tensors()) {
    if (t.name == "token_embd.weight") {
      const uint64_t row = row_bytes(t.dtype, t.ne[0]);
      n += tied ? t.nbytes + row : row;
    } else if (experts.is_expert(t)) {
      n += experts.used(t.nbytes);  // the chosen experts' matrices
    } else {
      n += t.nbytes;
    }
  }
  return n;
}

uint64_t decode_kv_bytes(const HParams& hp, DType kv_type, int64_t n_ctx) {
  const uint64_t per_cell = row_bytes(kv_type, hp.n_embd_k()) + row_bytes(kv_type, hp.n_embd_v());
  uint64_t n = 0;
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    const bool swa = hp.n_swa > 0 && size_t(il) < hp.is_swa.size() && hp.is_swa[size_t(il)];
    n += per_cell * uint64_t(swa ? std::min(n_ctx, hp.n_swa) : n_ctx);
  }
  return n;
}

}  // namespace weir
