// Per-tensor type plans against llama-quantize: the real Gemma 3 270M
// Q4_K_M file (made by llama-quantize) must be planned tensor for tensor,
// and hand-checked rules for a Llama-3-8B-shaped model.

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/gguf.h"
#include "model/quant_plan.h"
#include "test_env.h"

namespace weir {
namespace {

TensorDesc matrix(std::string name, int64_t ne0, int64_t ne1) {
  TensorDesc t;
  t.name = std::move(name);
  t.n_dims = 2;
  t.ne[0] = ne0;
  t.ne[1] = ne1;
  return t;
}

TensorDesc vec(std::string name, int64_t ne0) {
  TensorDesc t;
  t.name = std::move(name);
  t.n_dims = 1;
  t.ne[0] = ne0;
  return t;
}

TEST(QuantPlan, GemmaQ4_K_MMatchesLlamaQuantize) {
  WEIR_REQUIRE_MODEL(path);
  const GGUFFile f = GGUFFile::open(path);
  ASSERT_EQ(f.get_uint("general.file_type"), uint64_t(FileType::Q4_K_M));
  QuantModelInfo info;
  info.arch = std::string(f.get_str("general.architecture"));
  info.n_layer = int64_t(f.get_uint(info.arch + ".block_count"));
  info.n_head = int64_t(f.get_uint(info.arch + ".attention.head_count"));
  info.n_head_kv = int64_t(f.get_uint_or(info.arch + ".attention.head_count_kv", uint64_t(info.n_head)));
  info.n_expert = int64_t(f.get_uint_or(info.arch + ".expert_count", 0));
  std::vector<TensorDesc> tensors;
  for (const GGUFTensorInfo& ti : f.tensors()) {
    TensorDesc t;
    t.name = std::string(ti.name);
    t.n_dims = ti.n_dims;
    std::copy(ti.ne, ti.ne + 4, t.ne);
    tensors.push_back(t);
  }
  const std::vector<DType> plan = plan_tensor_types(FileType::Q4_K_M, info, tensors);
  ASSERT_EQ(plan.size(), f.tensors().size());
  std::map<DType, int> counts;
  for (size_t i = 0; i < plan.size(); ++i) {
    EXPECT_EQ(dtype_name(plan[i]), std::string(dtype_name(f.tensors()[i].dtype))) << tensors[i].name;
    ++counts[plan[i]];
  }
  // The file holds every kind of choice: fallbacks (Q5_0, Q8_0 token_embd),
  // use_more_bits layers (Q6_K ffn_down, Q8_0 attn_v), plain Q4_K.
  for (DType t : {DType::Q4_K, DType::Q6_K, DType::Q5_0, DType::Q8_0, DType::F32}) EXPECT_GT(counts[t], 0) << dtype_name(t);

  // The running layer counts follow llama.cpp's order, not the input's.
  std::vector<size_t> idx(tensors.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = idx.size() - 1 - i;
  std::vector<TensorDesc> reversed;
  for (size_t i : idx) reversed.push_back(tensors[i]);
  const std::vector<DType> plan_rev = plan_tensor_types(FileType::Q4_K_M, info, reversed);
  for (size_t k = 0; k < idx.size(); ++k) EXPECT_EQ(plan_rev[k], plan[idx[k]]) << reversed[k].name;
}

// Meta-Llama-3-8B (3.0: no rope_freqs tensor): 32 layers, 32 heads, 8 KV
// heads (GQA 4), hidden 4096, FFN 14336, vocabulary 128256, separate output.
QuantModelInfo llama8b_info() {
  QuantModelInfo info;
  info.arch = "llama";
  info.n_layer = 32;
  info.n_head = 32;
  info.n_head_kv = 8;
  return info;
}

std::vector<TensorDesc> llama8b_tensors() {
  std::vector<TensorDesc> t = {matrix("token_embd.weight", 4096, 128256), vec("output_norm.weight", 4096),
                               matrix("output.weight", 4096, 128256)};
  for (int i = 0; i < 32; ++i) {
    const std::string b = "blk." + std::to_string(i) + ".";
    t.push_back(vec(b + "attn_norm.weight", 4096));
    t.push_back(matrix(b + "attn_q.weight", 4096, 4096));
    t.push_back(matrix(b + "attn_k.weight", 4096, 1024));
    t.push_back(matrix(b + "attn_v.weight", 4096, 1024));
    t.push_back(matrix(b + "attn_output.weight", 4096, 4096));
    t.push_back(vec(b + "ffn_norm.weight", 4096));
    t.push_back(matrix(b + "ffn_gate.weight", 4096, 14336));
    t.push_back(matrix(b + "ffn_up.weight", 4096, 14336));
    t.push_back(matrix(b + "ffn_down.weight", 14336, 4096));
  }
  return t;
}

// use_more_bits(i, 32) (llama_tensor_get_type): i < 4, i >= 28, or
// (i - 4) % 3 == 2, i.e. layers 0-3, 6, 9, ..., 27, 28-31: 16 layers.
bool more_bits_layer(int i) { return i < 4 || i >= 28 || (i - 4) % 3 == 2; }

void check_llama8b(FileType ft, DType base) {
  const std::vector<TensorDesc> t = llama8b_tensors();
  const std::vector<DType> plan = plan_tensor_types(ft, llama8b_info(), t);
  std::map<DType, int> counts;
  for (size_t i = 0; i < t.size(); ++i) {
    const std::string& n = t[i].name;
    DType want = base;  // default type of the file type
    if (t[i].n_dims == 1) {
      want = DType::F32;  // norms are not quantized
    } else if (n == "output.weight") {
      want = DType::Q6_K;  // output rule: Q6_K unless the default is Q8_0
    } else if (n == "token_embd.weight") {
      want = base;  // a separate output exists: no rule for the embeddings
    } else if (n.find("attn_v.weight") != std::string::npos || n.find("ffn_down") != std::string::npos) {
      // Q4_K_M / Q5_K_M: Q6_K on use_more_bits layers (attn_v by running
      // count = layer, ffn_down by layer)
      const int layer = std::stoi(n.substr(4));
      if (more_bits_layer(layer)) want = DType::Q6_K;
    }
    EXPECT_EQ(dtype_name(plan[i]), std::string(dtype_name(want))) << file_type_name(ft) << " " << n;
    ++counts[plan[i]];
  }
  // llama-quantize's summary for Meta-Llama-3-8B Q4_K_M: f32 65, q4_K 193,
  // q6_K 33 (output + 16 attn_v + 16 ffn_down).
  EXPECT_EQ(counts[DType::F32], 65);
  EXPECT_EQ(counts[DType::Q6_K], 33);
  EXPECT_EQ(counts[base], 193);
}

TEST(QuantPlan, Llama8BQ4_K_M) { check_llama8b(FileType::Q4_K_M, DType::Q4_K); }
TEST(QuantPlan, Llama8BQ5_K_M) { check_llama8b(FileType::Q5_K_M, DType::Q5_K); }

DType plan_one(FileType ft, const TensorDesc& t, QuantModelInfo info = llama8b_info()) {
  return plan_tensor_types(ft, info, {t})[0];
}

TEST(QuantPlan, Llama8BOtherMixtures) {
  const QuantModelInfo info = llama8b_info();
  const std::vector<TensorDesc> t = llama8b_tensors();
  auto type_of = [&](FileType ft, const std::string& name) {
    const std::vector<DType> plan = plan_tensor_types(ft, info, t);
    for (size_t i = 0; i < t.size(); ++i)
      if (t[i].name == name) return plan[i];
    ADD_FAILURE() << "no tensor " << name;
    return DType::F32;
  };
  // Q2_K: attn_v Q4_K (GQA >= 4), ffn_down Q3_K, attn_output Q3_K.
  EXPECT_EQ(type_of(FileType::Q2_K, "blk.5.attn_v.weight"), DType::Q4_K);
  EXPECT_EQ(type_of(FileType::Q2_K, "blk.5.ffn_down.weight"), DType::Q3_K);
  EXPECT_EQ(type_of(FileType::Q2_K, "blk.5.attn_output.weight"), DType::Q3_K);
  EXPECT_EQ(type_of(FileType::Q2_K, "blk.5.attn_q.weight"), DType::Q2_K);
  // Q3_K_M: attn_v Q5_K for the first two, then Q4_K; ffn_down Q5_K below
  // n_layer/16 = 2, then Q4_K (not Falcon); attn_output Q4_K.
  EXPECT_EQ(type_of(FileType::Q3_K_M, "blk.1.attn_v.weight"), DType::Q5_K);
  EXPECT_EQ(type_of(FileType::Q3_K_M, "blk.2.attn_v.weight"), DType::Q4_K);
  EXPECT_EQ(type_of(FileType::Q3_K_M, "blk.1.ffn_down.weight"), DType::Q5_K);
  EXPECT_EQ(type_of(FileType::Q3_K_M, "blk.2.ffn_down.weight"), DType::Q4_K);
  EXPECT_EQ(type_of(FileType::Q3_K_M, "blk.2.attn_output.weight"), DType::Q4_K);
  EXPECT_EQ(type_of(FileType::Q3_K_M, "blk.2.ffn_up.weight"), DType::Q3_K);
  // Q3_K_L: attn_v, ffn_down and attn_output Q5_K.
  EXPECT_EQ(type_of(FileType::Q3_K_L, "blk.9.attn_v.weight"), DType::Q5_K);
  EXPECT_EQ(type_of(FileType::Q3_K_L, "blk.9.ffn_down.weight"), DType::Q5_K);
  EXPECT_EQ(type_of(FileType::Q3_K_L, "blk.9.attn_output.weight"), DType::Q5_K);
  // Q3_K_S: no bumps except the output.
  EXPECT_EQ(type_of(FileType::Q3_K_S, "blk.0.attn_v.weight"), DType::Q3_K);
  EXPECT_EQ(type_of(FileType::Q3_K_S, "output.weight"), DType::Q6_K);
  // Q4_K_S: attn_v Q5_K for the first four, ffn_down Q5_K below n/8 = 4.
  EXPECT_EQ(type_of(FileType::Q4_K_S, "blk.3.attn_v.weight"), DType::Q5_K);
  EXPECT_EQ(type_of(FileType::Q4_K_S, "blk.4.attn_v.weight"), DType::Q4_K);
  EXPECT_EQ(type_of(FileType::Q4_K_S, "blk.3.ffn_down.weight"), DType::Q5_K);
  EXPECT_EQ(type_of(FileType::Q4_K_S, "blk.4.ffn_down.weight"), DType::Q4_K);
  // Q5_K_S, Q6_K: uniform plus the Q6_K output.
  EXPECT_EQ(type_of(FileType::Q5_K_S, "blk.0.ffn_down.weight"), DType::Q5_K);
  EXPECT_EQ(type_of(FileType::Q6_K, "blk.0.attn_v.weight"), DType::Q6_K);
  // Q8_0: the output stays Q8_0; legacy types: output Q6_K.
  EXPECT_EQ(type_of(FileType::Q8_0, "output.weight"), DType::Q8_0);
  EXPECT_EQ(type_of(FileType::Q4_0, "output.weight"), DType::Q6_K);
  EXPECT_EQ(type_of(FileType::Q4_0, "blk.0.attn_v.weight"), DType::Q4_0);
  // Float file types: every matrix in that type, vectors F32.
  EXPECT_EQ(type_of(FileType::MOSTLY_F16, "output.weight"), DType::F16);
  EXPECT_EQ(type_of(FileType::MOSTLY_BF16, "blk.0.attn_q.weight"), DType::BF16);
  EXPECT_EQ(type_of(FileType::MOSTLY_F16, "blk.0.attn_norm.weight"), DType::F32);
  EXPECT_EQ(type_of(FileType::ALL_F32, "blk.0.attn_q.weight"), DType::F32);
}

TEST(QuantPlan, TiedEmbeddingsTakeTheOutputRule) {
  // No output.weight: token_embd is the output (Q6_K, or Q8_0 when its rows
  // do not fit the default type's blocks).
  std::vector<TensorDesc> t = {matrix("token_embd.weight", 4096, 1000), matrix("blk.0.attn_v.weight", 4096, 1024)};
  EXPECT_EQ(plan_tensor_types(FileType::Q4_K_M, llama8b_info(), t)[0], DType::Q6_K);
  t[0].ne[0] = 640;
  EXPECT_EQ(plan_tensor_types(FileType::Q4_K_M, llama8b_info(), t)[0], DType::Q8_0);
  EXPECT_EQ(plan_tensor_types(FileType::Q4_0, llama8b_info(), t)[0], DType::Q8_0);  // Q6_K, then fallback
}

TEST(QuantPlan, FallbackWhenRowsDoNotFitSuperBlocks) {
  const TensorDesc t = matrix("blk.0.attn_q.weight", 640, 1024);  // 640 % 256 != 0
  EXPECT_EQ(plan_one(FileType::Q4_K_M, t), DType::Q5_0);
  EXPECT_EQ(plan_one(FileType::Q5_K_S, t), DType::Q5_1);
  EXPECT_EQ(plan_one(FileType::Q6_K, t), DType::Q8_0);
  EXPECT_EQ(plan_one(FileType::Q3_K_S, t), DType::Q4_0);  // llama.cpp: IQ4_NL
  EXPECT_EQ(plan_one(FileType::Q2_K, t), DType::Q4_0);
  const TensorDesc odd = matrix("blk.0.attn_q.weight", 48, 16);  // fits no 32-block either
  EXPECT_EQ(plan_one(FileType::Q4_K_M, odd), DType::F16);
  EXPECT_THROW(plan_one(FileType::Q8_0, odd), Error);  // llama.cpp refuses too
}

TEST(QuantPlan, ExpertsAndGroupedAttention) {
  QuantModelInfo moe = llama8b_info();
  moe.n_expert = 8;
  moe.n_head_kv = 32;  // no GQA
  EXPECT_EQ(plan_one(FileType::Q4_K_M, matrix("blk.3.attn_v.weight", 4096, 4096), moe), DType::Q8_0);
  EXPECT_EQ(plan_one(FileType::Q4_K_M, matrix("blk.3.attn_k.weight", 4096, 4096), moe), DType::Q8_0);
  EXPECT_EQ(plan_one(FileType::Q4_K_M, matrix("blk.3.attn_output.weight", 4096, 4096), moe), DType::Q5_K);
  EXPECT_EQ(plan_one(FileType::Q2_K, matrix("blk.3.attn_v.weight", 4096, 4096), moe), DType::Q8_0);
  QuantModelInfo mha = llama8b_info();
  mha.n_head_kv = 32;
  EXPECT_EQ(plan_one(FileType::Q2_K, matrix("blk.3.attn_v.weight", 4096, 4096), mha), DType::Q3_K);
  // Expert ffn_down layers come from the name: blk.1 is in the first eighth.
  EXPECT_EQ(plan_one(FileType::Q4_K_M, matrix("blk.1.ffn_down_exps.weight", 14336, 4096), moe), DType::Q6_K);
  EXPECT_EQ(plan_one(FileType::Q4_K_M, matrix("blk.5.ffn_down_exps.weight", 14336, 4096), moe), DType::Q4_K);
  // Router matrices stay unquantized.
  EXPECT_EQ(plan_one(FileType::Q4_K_M, matrix("blk.5.ffn_gate_inp.weight", 4096, 8), moe), DType::F32);
}

TEST(QuantPlan, Llama70BAttnV) {
  QuantModelInfo info = llama8b_info();
  info.n_layer = 80;
  info.n_head = 64;
  EXPECT_EQ(plan_one(FileType::Q4_K_S, matrix("blk.10.attn_v.weight", 8192, 1024), info), DType::Q5_K);
  EXPECT_EQ(plan_one(FileType::Q3_K_S, matrix("blk.10.attn_v.weight", 8192, 1024), info), DType::Q5_K);
}

TEST(QuantPlan, FileTypeNames) {
  for (const char* n : {"F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K_S", "Q3_K_M",
                        "Q3_K_L", "Q4_K_S", "Q4_K_M", "Q5_K_S", "Q5_K_M", "Q6_K"})
    EXPECT_STREQ(file_type_name(parse_file_type(n)), n);
  EXPECT_EQ(parse_file_type("q4_k_m"), FileType::Q4_K_M);
  EXPECT_EQ(parse_file_type("Q4_K"), FileType::Q4_K_M);
  EXPECT_EQ(uint32_t(parse_file_type("Q8_0")), 7u);
  try {
    parse_file_type("Q7_K");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Q4_K_M"), std::string::npos) << e.what();
  }
}

// IQ4_NL / IQ4_XS (llama_tensor_get_type): output Q6_K, attn_v Q5_K with
// grouped-query attention (GQA >= 4), ffn_down Q5_K in the first eighth of
// the layers unless an importance matrix is used, everything else the type.
void check_llama8b_iq4(FileType ft, DType base, bool with_imatrix) {
  const std::vector<TensorDesc> t = llama8b_tensors();
  const std::vector<DType> plan = plan_tensor_types(ft, llama8b_info(), t, with_imatrix);
  std::map<DType, int> counts;
  for (size_t i = 0; i < t.size(); ++i) {
    const std::string& n = t[i].name;
    DType want = base;
    if (t[i].n_dims == 1) want = DType::F32;
    else if (n == "output.weight") want = DType::Q6_K;
    else if (n.find("attn_v.weight") != std::string::npos) want = DType::Q5_K;
    else if (n.find("ffn_down") != std::string::npos && std::stoi(n.substr(4)) < 4 && !with_imatrix)
      want = DType::Q5_K;
    EXPECT_EQ(dtype_name(plan[i]), std::string(dtype_name(want))) << file_type_name(ft) << " " << n;
    ++counts[plan[i]];
  }
  EXPECT_EQ(counts[DType::F32], 65);
  EXPECT_EQ(counts[DType::Q6_K], 1);
  EXPECT_EQ(counts[DType::Q5_K], with_imatrix ? 32 : 36);
  EXPECT_EQ(counts[base], with_imatrix ? 193 : 189);
}

TEST(QuantPlan, Llama8BIQ4_XS) { check_llama8b_iq4(FileType::IQ4_XS, DType::IQ4_XS, false); }
TEST(QuantPlan, Llama8BIQ4_NL) { check_llama8b_iq4(FileType::IQ4_NL, DType::IQ4_NL, false); }
TEST(QuantPlan, Llama8BIQ4_XSWithImatrix) { check_llama8b_iq4(FileType::IQ4_XS, DType::IQ4_XS, true); }

TEST(QuantPlan, IQ4Fallbacks) {
  // Rows that fit no 256-block: IQ4_XS falls back to IQ4_NL, then F16.
  EXPECT_EQ(plan_one(FileType::IQ4_XS, matrix("blk.0.attn_q.weight", 640, 1024)), DType::IQ4_NL);
  EXPECT_EQ(plan_one(FileType::IQ4_XS, matrix("blk.0.attn_q.weight", 48, 16)), DType::F16);
  EXPECT_EQ(plan_one(FileType::IQ4_NL, matrix("blk.0.attn_q.weight", 640, 1024)), DType::IQ4_NL);
  // ffn_down's Q5_K on 640 columns falls back to Q5_1.
  EXPECT_EQ(plan_one(FileType::IQ4_XS, matrix("blk.0.ffn_down.weight", 640, 1024)), DType::Q5_1);
  // Tied embeddings: the output rule, Q8_0 when the rows do not fit.
  std::vector<TensorDesc> t = {matrix("token_embd.weight", 4096, 1000)};
  EXPECT_EQ(plan_tensor_types(FileType::IQ4_XS, llama8b_info(), t)[0], DType::Q6_K);
  t[0].ne[0] = 640;
  EXPECT_EQ(plan_tensor_types(FileType::IQ4_XS, llama8b_info(), t)[0], DType::Q8_0);
  // Without grouped-query attention attn_v keeps the type.
  QuantModelInfo mha = llama8b_info();
  mha.n_head_kv = 32;
  EXPECT_EQ(plan_one(FileType::IQ4_XS, matrix("blk.3.attn_v.weight", 4096, 4096), mha), DType::IQ4_XS);
  EXPECT_EQ(plan_one(FileType::IQ4_XS, matrix("blk.3.attn_qkv.weight", 4096, 6144), mha), DType::IQ4_XS);
  EXPECT_EQ(plan_one(FileType::IQ4_XS, matrix("blk.3.attn_qkv.weight", 4096, 6144)), DType::Q5_K);
}

TEST(QuantPlan, IQ4Experts) {
  QuantModelInfo moe = llama8b_info();
  moe.n_expert = 8;
  for (FileType ft : {FileType::IQ4_XS, FileType::IQ4_NL}) {
    EXPECT_EQ(plan_one(ft, matrix("blk.3.attn_v.weight", 4096, 1024), moe), DType::Q8_0);
    EXPECT_EQ(plan_one(ft, matrix("blk.3.attn_k.weight", 4096, 1024), moe), DType::Q8_0);
    EXPECT_EQ(plan_one(ft, matrix("blk.3.attn_output.weight", 4096, 4096), moe), DType::Q5_K);
    EXPECT_EQ(plan_one(ft, matrix("blk.1.ffn_down_exps.weight", 14336, 4096), moe), DType::Q5_K);
  }
  EXPECT_EQ(plan_one(FileType::IQ4_XS, matrix("blk.5.ffn_down_exps.weight", 14336, 4096), moe), DType::IQ4_XS);
}

TEST(QuantPlan, ImatrixRulesOfTheLegacyTypes) {
  // With an importance matrix, ffn_down of the first eighth: Q4_0 -> Q4_1,
  // Q5_0 -> Q5_1; without one, unchanged.
  const TensorDesc down1 = matrix("blk.1.ffn_down.weight", 14336, 4096);
  EXPECT_EQ(plan_tensor_types(FileType::Q4_0, llama8b_info(), {down1}, true)[0], DType::Q4_1);
  EXPECT_EQ(plan_tensor_types(FileType::Q5_0, llama8b_info(), {down1}, true)[0], DType::Q5_1);
  EXPECT_EQ(plan_tensor_types(FileType::Q4_0, llama8b_info(), {down1}, false)[0], DType::Q4_0);
  const TensorDesc down9 = matrix("blk.9.ffn_down.weight", 14336, 4096);
  QuantModelInfo moe = llama8b_info();
  moe.n_expert = 4;  // layer from the name
  EXPECT_EQ(plan_tensor_types(FileType::Q4_0, moe, {down9}, true)[0], DType::Q4_0);
}

TEST(QuantPlan, MXFP4Moe) {
  QuantModelInfo moe = llama8b_info();
  moe.arch = "gpt-oss";
  moe.n_expert = 32;
  TensorDesc exps = matrix("blk.0.ffn_down_exps.weight", 2880, 2880);
  exps.n_dims = 3;
  exps.ne[2] = 32;
  const std::vector<TensorDesc> t = {matrix("token_embd.weight", 2880, 201088), matrix("output.weight", 2880, 201088),
                                     exps, matrix("blk.0.attn_q.weight", 2880, 4096),
                                     vec("blk.0.attn_norm.weight", 2880)};
  const std::vector<DType> plan = plan_tensor_types(FileType::MXFP4_MOE, moe, t);
  EXPECT_EQ(plan[0], DType::Q8_0);
  EXPECT_EQ(plan[1], DType::Q8_0);
  EXPECT_EQ(plan[2], DType::MXFP4);
  EXPECT_EQ(plan[3], DType::Q8_0);
  EXPECT_EQ(plan[4], DType::F32);
}

TEST(QuantPlan, IQ4FileTypeNames) {
  EXPECT_EQ(uint32_t(parse_file_type("IQ4_NL")), 25u);
  EXPECT_EQ(uint32_t(parse_file_type("iq4_xs")), 30u);
  EXPECT_EQ(uint32_t(parse_file_type("MXFP4_MOE")), 38u);
  EXPECT_STREQ(file_type_name(FileType::IQ4_XS), "IQ4_XS");
}

}  // namespace
}  // namespace weir
