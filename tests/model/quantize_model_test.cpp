// quantize_model: a small llama-shaped model made here with the GGUF writer,
// converted to every file type this build can produce: tensor types follow
// plan_tensor_types, values are the quantization of the dequantized source,
// 1-D and integer tensors are copied, the thread count does not change a byte,
// unconvertible tensors are named before anything is written; and the real
// Gemma 3 file (large tensors: several chunks) converted to F16 exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/gguf.h"
#include "core/gguf_writer.h"
#include "core/half.h"
#include "core/quant/quantize.h"
#include "core/thread_group.h"
#include "model/quant_plan.h"
#include "model/quantize_model.h"
#include "test_env.h"

namespace weir {
namespace {

namespace fs = std::filesystem;

std::string temp_path(const std::string& name) { return weir::test::own_dir() + "/" + name; }

struct SrcTensor {
  std::string name;
  DType type;
  std::vector<int64_t> ne;
};

// Random normal weights of a llama-like model with 2 layers, written as the
// given types (quantized ones through quant::quantize_rows).
std::string make_model(const std::string& name, const std::vector<SrcTensor>& tensors) {
  const std::string path = temp_path(name);
  GGUFWriter w;
  w.set_str("general.architecture", "llama");
  w.set_str("general.name", "weir quantize test");
  w.set_u32("llama.block_count", 2);
  w.set_u32("llama.embedding_length", 256);
  w.set_u32("llama.attention.head_count", 4);
  w.set_u32("llama.attention.head_count_kv", 2);
  w.set_str_array("tokenizer.ggml.tokens", {"a", "b", "c"});
  w.set_u32("general.file_type", 0);
  for (const SrcTensor& t : tensors) w.add_tensor(t.name, t.type, int(t.ne.size()), t.ne.data());
  w.open(path);
  std::mt19937 rng(1234);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  for (const SrcTensor& t : tensors) {
    int64_t n = 1;
    for (int64_t d : t.ne) n *= d;
    if (t.type == DType::I32) {
      std::vector<int32_t> v(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) v[size_t(i)] = int32_t(i * 7 - 3);
      w.write_tensor_data(v.data(), v.size() * 4);
      continue;
    }
    std::vector<float> f(static_cast<size_t>(n));
    for (float& x : f) x = normal(rng);
    std::vector<uint8_t> q(row_bytes(t.type, t.ne[0]) * size_t(n / t.ne[0]));
    quant::quantize_rows(t.type, f.data(), q.data(), n / t.ne[0], t.ne[0]);
    w.write_tensor_data(q.data(), q.size());
  }
  w.close();
  return path;
}

std::vector<SrcTensor> llama_tensors(DType weights) {
  std::vector<SrcTensor> t = {{"token_embd.weight", weights, {256, 64}}, {"output_norm.weight", DType::F32, {256}}};
  for (int l = 0; l < 2; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    t.push_back({b + "attn_norm.weight", DType::F32, {256}});
    t.push_back({b + "attn_q.weight", weights, {256, 256}});
    t.push_back({b + "attn_k.weight", weights, {256, 128}});
    t.push_back({b + "attn_v.weight", weights, {256, 128}});
    t.push_back({b + "attn_output.weight", weights, {256, 256}});
    t.push_back({b + "ffn_norm.weight", DType::F32, {256}});
    t.push_back({b + "ffn_gate.weight", weights, {256, 512}});
    t.push_back({b + "ffn_up.weight", weights, {256, 512}});
    t.push_back({b + "ffn_down.weight", weights, {512, 256}});
  }
  t.push_back({"output.weight", weights, {256, 64}});
  t.push_back({"rope_ids", DType::I32, {8, 2}});  // an integer tensor: copied
  return t;
}

std::vector<float> dequant(const GGUFTensorInfo& t) {
  std::vector<float> f(size_t(t.n_elements()));
  if (!f.empty()) dequantize_row(t.dtype, t.data, f.data(), t.n_elements());
  return f;
}

std::vector<uint8_t> file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The file types whose names this build knows and whose planned types for
// `src` it can all produce.
std::vector<FileType> available_types(const GGUFFile& src) {
  std::vector<TensorDesc> descs;
  for (const GGUFTensorInfo& t : src.tensors()) {
    TensorDesc d;
    d.name = std::string(t.name);
    d.n_dims = t.n_dims;
    std::copy(t.ne, t.ne + 4, d.ne);
    descs.push_back(d);
  }
  std::vector<FileType> out;
  for (const char* name : {"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K_S", "Q3_K_M",
                           "Q3_K_L", "Q4_K_S", "Q4_K_M", "Q5_K_S", "Q5_K_M", "Q6_K"}) {
    FileType ft;
    try {
      ft = parse_file_type(name);
    } catch (const Error&) {
      continue;
    }
    bool ok = true;
    const auto plan = plan_tensor_types(ft, quant_model_info(src), descs);
    for (size_t i = 0; i < plan.size(); ++i)
      if (src.tensors()[i].n_dims >= 2 && plan[i] != src.tensors()[i].dtype && !quant::can_quantize(plan[i]))
        ok = false;
    if (ok) out.push_back(ft);
  }
  return out;
}

// Relative RMS error a file type may add to N(0, 0.02) weights.
double tolerance(DType t) {
  switch (t) {
    case DType::F32: return 0;
    case DType::F16: return 1e-3;
    case DType::BF16: return 5e-3;
    case DType::Q8_0: return 0.01;
    case DType::Q6_K: return 0.03;
    case DType::Q5_0: case DType::Q5_1: case DType::Q5_K: return 0.06;
    case DType::Q4_0: case DType::Q4_1: case DType::Q4_K: return 0.12;
    case DType::Q3_K: return 0.25;
    default: return 0.5;
  }
}

TEST(QuantizeGGUF, InfoFromMetadata) {
  const std::string src = make_model("info", llama_tensors(DType::F32));
  const GGUFFile f = GGUFFile::open(src);
  const QuantModelInfo info = quant_model_info(f);
  EXPECT_EQ(info.arch, "llama");
  EXPECT_EQ(info.n_layer, 2);
  EXPECT_EQ(info.n_head, 4);
  EXPECT_EQ(info.n_head_kv, 2);
  EXPECT_EQ(info.n_expert, 0);
  fs::remove(src);
}

TEST(QuantizeGGUF, EveryAvailableFileTypeFollowsThePlan) {
  const std::string src_path = make_model("plan-src", llama_tensors(DType::F32));
  const GGUFFile src = GGUFFile::open(src_path);
  const auto types = available_types(src);
  ASSERT_FALSE(types.empty());
  for (FileType ft : types) {
    SCOPED_TRACE(file_type_name(ft));
    const std::string out = temp_path(std::string("plan-") + file_type_name(ft));
    const QuantizeResult r = quantize_model(src_path, out, ft, 2);
    const GGUFFile q = GGUFFile::open(out);
    EXPECT_EQ(q.get_uint("general.file_type"), uint32_t(ft));
    EXPECT_EQ(q.get_uint("general.quantization_version"), 2u);
    EXPECT_EQ(q.get_str("general.name"), "weir quantize test");
    EXPECT_EQ(q.get_str_array("tokenizer.ggml.tokens").size(), 3u);
    EXPECT_EQ(q.kvs().size(), src.kvs().size() + 1);  // + quantization_version
    EXPECT_EQ(r.n_tensors, src.tensors().size());
    EXPECT_EQ(r.out_file_bytes, q.size());
    ASSERT_EQ(q.tensors().size(), src.tensors().size());

    std::vector<TensorDesc> descs;
    for (const GGUFTensorInfo& t : src.tensors()) {
      TensorDesc d;
      d.name = std::string(t.name);
      d.n_dims = t.n_dims;
      std::copy(t.ne, t.ne + 4, d.ne);
      descs.push_back(d);
    }
    const auto plan = plan_tensor_types(ft, quant_model_info(src), descs);
    size_t converted = 0;
    for (size_t i = 0; i < src.tensors().size(); ++i) {
      const GGUFTensorInfo& a = src.tensors()[i];
      const GGUFTensorInfo& b = q.tensors()[i];
      SCOPED_TRACE(std::string(a.name));
      EXPECT_EQ(a.name, b.name);
      for (int d = 0; d < 4; ++d) EXPECT_EQ(a.ne[d], b.ne[d]);
      const bool keep = a.n_dims < 2 || a.dtype == DType::I32;
      EXPECT_EQ(b.dtype, keep ? a.dtype : plan[i]);
      if (keep || a.dtype == b.dtype) {
        ASSERT_EQ(a.nbytes, b.nbytes);
        EXPECT_EQ(std::memcmp(a.data, b.data, a.nbytes), 0) << "copied tensor differs";
        continue;
      }
      ++converted;
      // Exactly what quantize_rows makes of the dequantized source ...
      const std::vector<float> f = dequant(a);
      std::vector<uint8_t> want(b.nbytes);
      quant::quantize_rows(b.dtype, f.data(), want.data(), a.n_elements() / a.ne[0], a.ne[0]);
      EXPECT_EQ(std::memcmp(want.data(), b.data, b.nbytes), 0) << "bytes differ from quantize_rows";
      // ... and close to it.
      const std::vector<float> g = dequant(b);
      double err = 0, ref = 0;
      for (size_t k = 0; k < f.size(); ++k) {
        err += double(g[k] - f[k]) * double(g[k] - f[k]);
        ref += double(f[k]) * double(f[k]);
      }
      EXPECT_LE(std::sqrt(err / ref), tolerance(b.dtype)) << dtype_name(b.dtype);
    }
    EXPECT_EQ(converted, r.n_converted);
    fs::remove(out);
  }
  fs::remove(src_path);
}

TEST(QuantizeGGUF, ThreadCountDoesNotChangeTheOutput) {
  const std::string src = make_model("threads-src", llama_tensors(DType::F16));
  for (FileType ft : available_types(GGUFFile::open(src))) {
    SCOPED_TRACE(file_type_name(ft));
    const std::string a = temp_path("threads-1"), b = temp_path("threads-3");
    quantize_model(src, a, ft, 1);
    quantize_model(src, b, ft, 3);
    EXPECT_TRUE(file_bytes(a) == file_bytes(b));
    fs::remove(a);
    fs::remove(b);
  }
  fs::remove(src);
}

TEST(QuantizeGGUF, ProgressReachesTheEndAndCanAbort) {
  const std::string src = make_model("progress-src", llama_tensors(DType::F32));
  const std::string out = temp_path("progress");
  uint64_t last = 0, total = 0;
  size_t calls = 0;
  quantize_model(src, out, FileType::MOSTLY_F16, 2, [&](const QuantizeProgress& p) {
    EXPECT_GE(p.done_elements, last);
    EXPECT_LT(p.tensor, p.n_tensors);
    last = p.done_elements;
    total = p.total_elements;
    ++calls;
  });
  EXPECT_EQ(last, total);
  EXPECT_GE(calls, GGUFFile::open(src).tensors().size());
  fs::remove(out);

  struct Stop {};
  EXPECT_THROW(quantize_model(src, out, FileType::MOSTLY_F16, 2,
                              [&](const QuantizeProgress& p) {
                                if (p.tensor == 3) throw Stop{};
                              }),
               Stop);
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(fs::exists(out + ".part"));
  fs::remove(src);
}

// Worker threads that cannot all start: an error, no output, no partial file.
TEST(QuantizeGGUF, ThreadsThatCannotStartLeaveNothing) {
  const std::string src = make_model("threads-fail-src", llama_tensors(DType::F32));
  const std::string out = temp_path("threads-fail");
  ThreadGroup::fail_after_for_testing(1);
  EXPECT_THROW(quantize_model(src, out, FileType::Q8_0, 4), ThreadStartError);
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(fs::exists(out + ".part"));
  quantize_model(src, out, FileType::Q8_0, 4);  // and then it works
  EXPECT_TRUE(fs::exists(out));
}

// The output may not be the input, by any name.
TEST(QuantizeGGUF, OutputThatIsTheInputIsRefused) {
  const std::string src = make_model("self-src", llama_tensors(DType::F32));
  const std::string link = temp_path("self-link");
  fs::create_hard_link(src, link);
  const auto before = file_bytes(src);
  for (const std::string& out : {src, link}) EXPECT_THROW(quantize_model(src, out, FileType::Q8_0, 2), Error);
  EXPECT_TRUE(file_bytes(src) == before);
}

TEST(QuantizeGGUF, UnconvertibleTensorIsNamedBeforeWriting) {
  const std::string src = temp_path("f64-src");
  {
    GGUFWriter w;
    w.set_str("general.architecture", "llama");
    w.add_tensor("blk.0.attn_q.weight", DType::F64, {4, 2});
    w.open(src);
    const double d[8] = {};
    w.write_tensor_data(d, sizeof d);
    w.close();
  }
  const std::string out = temp_path("f64-out");
  try {
    quantize_model(src, out, FileType::MOSTLY_F16, 1);
    ADD_FAILURE() << "converted an f64 tensor";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("blk.0.attn_q.weight"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("f64"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(fs::exists(out + ".part"));
  EXPECT_THROW(quantize_model(temp_path("does-not-exist"), out, FileType::MOSTLY_F16, 1), Error);
  fs::remove(src);
}

// The real model to F16: every converted value is the f16 rounding of the
// source's dequantized value (token_embd, 167M elements, goes in chunks).
TEST(QuantizeGGUF, RealModelToF16IsExact) {
  WEIR_REQUIRE_MODEL(model);
  const std::string out = temp_path("gemma-f16");
  const QuantizeResult r = quantize_model(model, out, FileType::MOSTLY_F16, 2);
  std::printf("gemma3 270M Q4_K_M -> F16: %.2f s, %.1f MiB -> %.1f MiB\n", r.seconds, r.in_file_bytes / 1048576.0,
              r.out_file_bytes / 1048576.0);
  const GGUFFile a = GGUFFile::open(model), b = GGUFFile::open(out);
  ASSERT_EQ(a.tensors().size(), b.tensors().size());
  for (size_t i = 0; i < a.tensors().size(); ++i) {
    const GGUFTensorInfo& s = a.tensors()[i];
    const GGUFTensorInfo& t = b.tensors()[i];
    SCOPED_TRACE(std::string(s.name));
    if (s.n_dims < 2) {
      EXPECT_EQ(t.dtype, s.dtype);
      continue;
    }
    ASSERT_EQ(t.dtype, DType::F16);
    const std::vector<float> f = dequant(s);
    const auto* h = reinterpret_cast<const uint16_t*>(t.data);
    size_t bad = 0;
    for (size_t k = 0; k < f.size(); ++k) bad += h[k] != f32_to_fp16(f[k]);
    EXPECT_EQ(bad, 0u);
  }
  fs::remove(out);
}

}  // namespace
}  // namespace weir
