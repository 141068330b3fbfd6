// Per-tensor type choice of each file type, following llama.cpp's
// llama_tensor_get_type (src/llama-quant.cpp) for the file types weir
// produces; only the rules are taken from there (facts), the code is ours.
// Deviations, all for things weir cannot know or make:
//   - rows that fit no K-quant fall back from Q2_K / Q3_K to Q4_0 (as
//     llama.cpp does now; it used IQ4_NL for a while);
//   - attn_qkv in the IQ4 file types gets attn_v's rule (Q5_K with grouped
//     query attention), as llama.cpp now treats fused qkv like attn_v; the
//     K mixtures keep the older attn_qkv rules below;
//   - "70B" (attn_v bump) is recognised as llama.cpp's loader names it:
//     arch llama, 80 layers, grouped-query attention;
//   - tensors llama.cpp leaves unquantized keep their type there; here,
//     without the source type, the plan says F32.
#include "model/quant_plan.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <numeric>
#include <string>

#include "core/error.h"

namespace weir {
namespace {

struct FileTypeName {
  FileType t;
  const char* name;
};
constexpr FileTypeName kNames[] = {
    {FileType::ALL_F32, "F32"},   {FileType::MOSTLY_F16, "F16"}, {FileType::MOSTLY_BF16, "BF16"},
    {FileType::Q4_0, "Q4_0"},     {FileType::Q4_1, "Q4_1"},      {FileType::Q5_0, "Q5_0"},
    {FileType::Q5_1, "Q5_1"},     {FileType::Q8_0, "Q8_0"},      {FileType::Q2_K, "Q2_K"},
    {FileType::Q3_K_S, "Q3_K_S"}, {FileType::Q3_K_M, "Q3_K_M"},  {FileType::Q3_K_L, "Q3_K_L"},
    {FileType::Q4_K_S, "Q4_K_S"}, {FileType::Q4_K_M, "Q4_K_M"},  {FileType::Q5_K_S, "Q5_K_S"},
    {FileType::Q5_K_M, "Q5_K_M"}, {FileType::Q6_K, "Q6_K"},      {FileType::IQ4_NL, "IQ4_NL"},
    {FileType::IQ4_XS, "IQ4_XS"}, {FileType::MXFP4_MOE, "MXFP4_MOE"},
};
// llama-quantize's short names for the _M mixtures.
constexpr FileTypeName kAliases[] = {
    {FileType::Q3_K_M, "Q3_K"}, {FileType::Q4_K_M, "Q4_K"}, {FileType::Q5_K_M, "Q5_K"}};

std::string upper(std::string_view s) {
  std::string r(s);
  for (char& c : r) c = char(std::toupper(static_cast<unsigned char>(c)));
  return r;
}

DType default_type(FileType ft) {
  switch (ft) {
    case FileType::ALL_F32: return DType::F32;
    case FileType::MOSTLY_F16: return DType::F16;
    case FileType::MOSTLY_BF16: return DType::BF16;
    case FileType::Q4_0: return DType::Q4_0;
    case FileType::Q4_1: return DType::Q4_1;
    case FileType::Q5_0: return DType::Q5_0;
    case FileType::Q5_1: return DType::Q5_1;
    case FileType::Q8_0: return DType::Q8_0;
    case FileType::Q2_K: return DType::Q2_K;
    case FileType::Q3_K_S: case FileType::Q3_K_M: case FileType::Q3_K_L: return DType::Q3_K;
    case FileType::Q4_K_S: case FileType::Q4_K_M: return DType::Q4_K;
    case FileType::Q5_K_S: case FileType::Q5_K_M: return DType::Q5_K;
    case FileType::Q6_K: return DType::Q6_K;
    case FileType::IQ4_NL: return DType::IQ4_NL;
    case FileType::IQ4_XS: return DType::IQ4_XS;
    case FileType::MXFP4_MOE: return DType::MXFP4;
  }
  throw Error("unknown file type " + std::to_string(uint32_t(ft)));
}

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

bool ends_with(const std::string& s, const char* suffix) {
  const std::string_view sv(suffix);
  return s.size() >= sv.size() && s.compare(s.size() - sv.size(), sv.size(), sv) == 0;
}

// Whether llama-quantize quantizes the tensor at all: 2-D and up weights,
// minus norms, expert routers, and small special matrices.
bool is_quantizable(const TensorDesc& t) {
  const std::string& n = t.name;
  if (!ends_with(n, "weight") || t.n_dims < 2) return false;
  for (const char* part : {"_norm.weight", "ffn_gate_inp.weight", "altup", "laurel", "per_layer_model_proj",
                           "ssm_conv1d.weight", "shortconv.conv.weight", "time_mix_first.weight",
                           "time_mix_w0.weight", "time_mix_w1.weight", "time_mix_w2.weight", "time_mix_v0.weight",
                           "time_mix_v1.weight", "time_mix_v2.weight", "time_mix_a0.weight", "time_mix_a1.weight",
                           "time_mix_a2.weight", "time_mix_g1.weight", "time_mix_g2.weight",
                           "time_mix_decay_w1.weight", "time_mix_decay_w2.weight", "time_mix_lerp_fused.weight",
                           "attn_rel_b.weight"})
    if (contains(n, part)) return false;
  return n != "position_embd.weight" && n != "token_types.weight";
}

// Layer number of "blk.N....", or -1.
int layer_of(const std::string& name) {
  int layer = -1;
  if (std::sscanf(name.c_str(), "blk.%d.", &layer) != 1) return -1;
  return layer;
}

// llama.cpp's choice of layers that get more bits in the _M mixtures: the
// first and last eighth, and every third layer in between.
bool use_more_bits(int i_layer, int n_layers) {
  return i_layer < n_layers / 8 || i_layer >= 7 * n_layers / 8 || (i_layer - n_layers / 8) % 3 == 2;
}

// The counters llama.cpp keeps while it walks the tensors.
struct PlanState {
  FileType ft;
  const QuantModelInfo& info;
  bool has_output = false;
  bool with_imatrix = false;
  int n_attention_wv = 0, i_attention_wv = 0, i_ffn_down = 0;
};

bool is(const PlanState& s, FileType t) { return s.ft == t; }
bool is_iq4(const PlanState& s) { return is(s, FileType::IQ4_NL) || is(s, FileType::IQ4_XS); }

DType choose(PlanState& s, const TensorDesc& t, DType type) {
  const std::string& name = t.name;
  const bool falcon = s.info.arch == "falcon";
  const int64_t n_gqa = s.info.n_head_kv > 0 ? s.info.n_head / s.info.n_head_kv : 0;
  const int n_layer = int(s.info.n_layer);
  const bool is_70b = s.info.arch == "llama" && s.info.n_layer == 80 && s.info.n_head != s.info.n_head_kv;

  if (name == "output.weight" || (!s.has_output && name == "token_embd.weight")) {
    // The output matrix (or the token embeddings standing in for it).
    if (is(s, FileType::MXFP4_MOE) || falcon || t.ne[0] % traits(type).block_size != 0) type = DType::Q8_0;
    else if (type != DType::Q8_0) type = DType::Q6_K;
  } else if (is(s, FileType::MXFP4_MOE)) {
    // Expert tensors (3-D) in MXFP4, every other matrix in Q8_0.
    type = t.n_dims >= 3 && t.ne[2] > 1 ? DType::MXFP4 : DType::Q8_0;
  } else if (name == "token_embd.weight" || name == "per_layer_token_embd.weight") {
    // no rule for the file types weir makes
  } else if (contains(name, "attn_v.weight")) {
    if (is(s, FileType::Q2_K)) type = n_gqa >= 4 ? DType::Q4_K : DType::Q3_K;
    else if (is(s, FileType::Q3_K_M)) type = s.i_attention_wv < 2 ? DType::Q5_K : DType::Q4_K;
    else if (is(s, FileType::Q3_K_L)) type = DType::Q5_K;
    else if (is_iq4(s) && n_gqa >= 4) type = DType::Q5_K;
    else if ((is(s, FileType::Q4_K_M) || is(s, FileType::Q5_K_M)) && use_more_bits(s.i_attention_wv, s.n_attention_wv))
      type = DType::Q6_K;
    else if (is(s, FileType::Q4_K_S) && s.i_attention_wv < 4) type = DType::Q5_K;
    if (is_70b && (type == DType::Q3_K || type == DType::Q4_K)) type = DType::Q5_K;
    if (s.info.n_expert == 8) type = DType::Q8_0;
    ++s.i_attention_wv;
  } else if (contains(name, "attn_k.weight")) {
    if (s.info.n_expert == 8) type = DType::Q8_0;
  } else if (contains(name, "ffn_down")) {
    // Experts: the layer from the name (llama.cpp: expert tensors are not
    // in layer order in every model); otherwise a running count.
    int i_layer = s.i_ffn_down;
    if (s.info.n_expert > 1) {
      i_layer = layer_of(name);
      if (i_layer < 0 || i_layer >= n_layer) throw Error("cannot tell the layer of tensor " + name);
    }
    const bool more = use_more_bits(i_layer, n_layer);
    if (is(s, FileType::Q2_K)) type = DType::Q3_K;
    else if (is(s, FileType::Q3_K_M))
      type = i_layer < n_layer / 16 ? DType::Q5_K : (!falcon || more) ? DType::Q4_K : DType::Q3_K;
    else if (is(s, FileType::Q3_K_L)) type = falcon ? DType::Q4_K : DType::Q5_K;
    else if (is(s, FileType::Q4_K_M)) {
      if (falcon) type = i_layer < n_layer / 16 ? DType::Q6_K : more ? DType::Q5_K : DType::Q4_K;
      else if (more) type = DType::Q6_K;
    } else if (is_iq4(s) && i_layer < n_layer / 8 && !s.with_imatrix) type = DType::Q5_K;
    else if (is(s, FileType::Q5_K_M) && more) type = DType::Q6_K;
    else if (is(s, FileType::Q4_K_S) && !falcon && i_layer < n_layer / 8) type = DType::Q5_K;
    else if ((is(s, FileType::Q4_0) || is(s, FileType::Q5_0)) && s.with_imatrix && i_layer < n_layer / 8)
      type = is(s, FileType::Q4_0) ? DType::Q4_1 : DType::Q5_1;  // llama.cpp: guards the first layers
    ++s.i_ffn_down;
  } else if (contains(name, "attn_output.weight")) {
    if (!falcon) {
      if (s.info.n_expert == 8) {
        if (is(s, FileType::Q2_K) || is(s, FileType::Q3_K_S) || is(s, FileType::Q3_K_M) ||
            is(s, FileType::Q4_K_S) || is(s, FileType::Q4_K_M) || is_iq4(s))
          type = DType::Q5_K;
      } else {
        if (is(s, FileType::Q2_K)) type = DType::Q3_K;
        else if (is(s, FileType::Q3_K_M)) type = DType::Q4_K;
        else if (is(s, FileType::Q3_K_L)) type = DType::Q5_K;
      }
    } else if (is(s, FileType::Q3_K_L)) {
      type = DType::Q4_K;
    }
  } else if (contains(name, "attn_qkv.weight")) {
    if (is_iq4(s)) {
      if (n_gqa >= 4) type = DType::Q5_K;
      if (s.info.n_expert == 8) type = DType::Q8_0;
      ++s.i_attention_wv;
    } else if (is(s, FileType::Q3_K_M) || is(s, FileType::Q3_K_L)) type = DType::Q4_K;
    else if (is(s, FileType::Q4_K_M)) type = DType::Q5_K;
    else if (is(s, FileType::Q5_K_M)) type = DType::Q6_K;
  }

  // Rows that do not fill whole blocks of the chosen type.
  if (t.ne[0] % traits(type).block_size != 0) {
    switch (type) {
      case DType::Q2_K: case DType::Q3_K: type = DType::Q4_0; break;  // llama.cpp: IQ4_NL
      case DType::Q4_K: type = DType::Q5_0; break;
      case DType::Q5_K: type = DType::Q5_1; break;
      case DType::Q6_K: type = DType::Q8_0; break;
      case DType::IQ4_XS: type = DType::IQ4_NL; break;
      default:
        throw Error("tensor " + name + ": rows of " + std::to_string(t.ne[0]) + " do not fit " +
                    dtype_name(type) + " blocks");
    }
    if (t.ne[0] % traits(type).block_size != 0) type = DType::F16;
  }
  return type;
}

}  // namespace

FileType parse_file_type(std::string_view name) {
  const std::string u = upper(name);
  for (const FileTypeName& n : kNames)
    if (u == n.name) return n.t;
  for (const FileTypeName& n : kAliases)
    if (u == n.name) return n.t;
  std::string known;
  for (const FileTypeName& n : kNames) known += std::string(known.empty() ? "" : ", ") + n.name;
  throw Error("unknown file type '" + std::string(name) + "' (known: " + known + ")");
}

const char* file_type_name(FileType t) {
  for (const FileTypeName& n : kNames)
    if (n.t == t) return n.name;
  return "?";
}

std::vector<DType> plan_tensor_types(FileType ft, const QuantModelInfo& info,
                                     const std::vector<TensorDesc>& tensors, bool with_imatrix) {
  const DType base = default_type(ft);
  const bool mixture = traits(base).block_size > 1;  // llama.cpp: ggml_is_quantized
  PlanState s{ft, info};
  s.with_imatrix = with_imatrix;
  for (const TensorDesc& t : tensors) {
    if (contains(t.name, "attn_v.weight") || contains(t.name, "attn_qkv.weight") ||
        contains(t.name, "attn_kv_b.weight"))
      ++s.n_attention_wv;
    else if (t.name == "output.weight")
      s.has_output = true;
  }
  // llama.cpp walks tensors by layer number, then name; the running counts
  // (i_attention_wv, i_ffn_down) follow that order, whatever the input's.
  std::vector<size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const int la = layer_of(tensors[a].name), lb = layer_of(tensors[b].name);
    return la != lb ? la < lb : tensors[a].name < tensors[b].name;
  });
  std::vector<DType> types(tensors.size(), DType::F32);
  for (size_t i : order) {
    const TensorDesc& t = tensors[i];
    if (!is_quantizable(t)) continue;  // stays F32
    types[i] = mixture ? choose(s, t, base) : base;
  }
  return types;
}

}  // namespace weir
