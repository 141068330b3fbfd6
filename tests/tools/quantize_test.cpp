// weir quantize as a user meets it: output lines, exit codes, error messages;
// results checked with weir's reader and, where python3 has the gguf package,
// with tests/data/check_quantized.py (gguf's own quantizers, byte for byte
// where it has them); the real Gemma 3 model converted and run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/gguf.h"
#include "core/gguf_writer.h"
#include "core/quant/quantize.h"
#include "model/quant_plan.h"
#include "test_env.h"
#include "weir_cli.h"

namespace weir {
namespace {

namespace fs = std::filesystem;
using test::run_weir;
using test::shell_quote;

std::string temp_path(const std::string& name) { return weir::test::own_dir() + "/" + name; }

// Whether this build can write file type `name` for a plain model (its
// name is known and its main tensor type has a quantizer).
bool file_type_available(const char* name, DType main_type) {
  try {
    parse_file_type(name);
  } catch (const Error&) {
    return false;
  }
  return quant::can_quantize(main_type);
}

// A llama-shaped model of 2-D F32 weights (smooth, deterministic values) and
// 1-D norms.
std::string make_f32_model() {
  const std::string path = temp_path("f32-model");
  GGUFWriter w;
  w.set_str("general.architecture", "llama");
  w.set_u32("llama.block_count", 1);
  w.set_u32("llama.attention.head_count", 2);
  w.set_u32("llama.attention.head_count_kv", 1);
  w.set_u32("general.file_type", 0);
  struct T {
    const char* name;
    int64_t ne0, ne1;
  };
  const T ts[] = {{"token_embd.weight", 256, 32},      {"blk.0.attn_norm.weight", 256, 0},
                  {"blk.0.attn_q.weight", 256, 256},   {"blk.0.attn_k.weight", 256, 128},
                  {"blk.0.attn_v.weight", 256, 128},   {"blk.0.attn_output.weight", 256, 256},
                  {"blk.0.ffn_gate.weight", 256, 512}, {"blk.0.ffn_up.weight", 256, 512},
                  {"blk.0.ffn_down.weight", 512, 256}, {"output_norm.weight", 256, 0},
                  {"output.weight", 256, 32}};
  for (const T& t : ts) {
    if (t.ne1) w.add_tensor(t.name, DType::F32, {t.ne0, t.ne1});
    else w.add_tensor(t.name, DType::F32, {t.ne0});
  }
  w.open(path);
  uint32_t k = 0;
  for (const T& t : ts) {
    std::vector<float> v(size_t(t.ne0 * std::max<int64_t>(1, t.ne1)));
    for (float& x : v) {
      x = 0.05f * std::sin(0.37f * float(k)) + 0.01f * std::cos(0.011f * float(k));
      ++k;
    }
    w.write_tensor_data(v.data(), v.size() * sizeof(float));
  }
  w.close();
  return path;
}

// tests/data/check_quantized.py SRC OUT FT: "ok ..." when gguf agrees.
void python_check(const std::string& src, const std::string& out, FileType ft) {
  if (!test::python_gguf_available()) return;
  const std::string cmd = "python3 " + shell_quote(test::test_data_dir() + "/check_quantized.py") + " " +
                          shell_quote(src) + " " + shell_quote(out) + " " + std::to_string(uint32_t(ft)) +
                          " 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) text.append(buf, n);
  EXPECT_EQ(pclose(p), 0) << text;
  EXPECT_EQ(text.rfind("ok ", 0), 0u) << text;
}

TEST(QuantizeCli, CorpusFileToF16) {
  const std::string src = test::test_data_dir() + "/gguf-valid/all_types_v3.gguf.case";
  const std::string out = temp_path("corpus-f16");
  const test::CliResult r = run_weir("quantize " + shell_quote(src) + " " + shell_quote(out) + " F16 --threads 2");
  ASSERT_EQ(r.code, 0) << r.err;
  // One result line on stdout; plain progress lines (no bar) on stderr.
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  EXPECT_NE(r.out.find("bpw"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("F16"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("5 tensors (3 converted, 2 copied)"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("100%"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find('\r'), std::string::npos) << "progress bar when stderr is not a terminal";
  const GGUFFile f = GGUFFile::open(out);
  EXPECT_EQ(f.get_uint("general.file_type"), 1u);
  EXPECT_EQ(f.find_tensor("token_embd.weight")->dtype, DType::F16);
  EXPECT_EQ(f.find_tensor("blk.0.ffn_up.weight")->dtype, DType::F16);
  EXPECT_EQ(f.find_tensor("blk.0.attn_norm.weight")->dtype, DType::F32);
  python_check(src, out, FileType::MOSTLY_F16);
  fs::remove(out);
}

TEST(QuantizeCli, SmallModelToEveryLegacyTypeMatchesGguf) {
  const std::string src = make_f32_model();
  struct Case {
    const char* name;
    DType main;
  };
  int ran = 0;
  for (const Case& c : {Case{"F16", DType::F16}, Case{"BF16", DType::BF16}, Case{"Q8_0", DType::Q8_0},
                        Case{"Q4_0", DType::Q4_0}, Case{"Q5_1", DType::Q5_1}, Case{"Q4_K_M", DType::Q4_K}}) {
    if (!file_type_available(c.name, c.main)) continue;
    SCOPED_TRACE(c.name);
    ++ran;
    const std::string out = temp_path(std::string("small-") + c.name);
    const test::CliResult r = run_weir("quantize " + shell_quote(src) + " " + shell_quote(out) + " " + c.name);
    ASSERT_EQ(r.code, 0) << r.err;
    const GGUFFile f = GGUFFile::open(out);
    EXPECT_EQ(f.find_tensor("blk.0.attn_q.weight")->dtype, c.main);
    EXPECT_EQ(f.find_tensor("output_norm.weight")->dtype, DType::F32);
    python_check(src, out, parse_file_type(c.name));
    fs::remove(out);
  }
  EXPECT_GE(ran, 1);
  fs::remove(src);
}

TEST(QuantizeCli, Errors) {
  const std::string src = test::test_data_dir() + "/gguf-valid/all_types_v3.gguf.case";
  const std::string out = temp_path("errors");
  fs::remove(out);

  test::CliResult r = run_weir("quantize " + shell_quote(src) + " " + shell_quote(out) + " Q9_X");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("Q9_X"), std::string::npos) << r.err;
  if (file_type_available("Q8_0", DType::Q8_0)) {  // the real list, not the float-only stub
    EXPECT_NE(r.err.find("Q4_K_M"), std::string::npos) << "valid types should be listed: " << r.err;
  }
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;

  r = run_weir("quantize /nonexistent/in.gguf " + shell_quote(out) + " F16");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("/nonexistent/in.gguf"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;

  r = run_weir("quantize " + shell_quote(test::test_data_dir() + "/gguf-broken/truncated_data.gguf.case") + " " +
               shell_quote(out) + " F16");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("truncated"), std::string::npos) << r.err;

  // A 2-D f64 tensor has no dequantizer: the message names it.
  const std::string f64 = temp_path("f64");
  {
    GGUFWriter w;
    w.set_str("general.architecture", "llama");
    w.add_tensor("blk.0.ffn_up.weight", DType::F64, {4, 2});
    w.open(f64);
    const double d[8] = {};
    w.write_tensor_data(d, sizeof d);
    w.close();
  }
  r = run_weir("quantize " + shell_quote(f64) + " " + shell_quote(out) + " F16");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("blk.0.ffn_up.weight"), std::string::npos) << r.err;
  fs::remove(f64);

  r = run_weir("quantize " + shell_quote(src) + " /nonexistent-dir/out.gguf F16");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("/nonexistent-dir/out.gguf"), std::string::npos) << r.err;

  EXPECT_EQ(run_weir("quantize " + shell_quote(src) + " " + shell_quote(out)).code, 2);
  EXPECT_EQ(run_weir("quantize " + shell_quote(src) + " " + shell_quote(out) + " F16 --threads 0").code, 2);
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(fs::exists(out + ".part"));
  EXPECT_EQ(run_weir("quantize --help").code, 0);
}

// The real model converted and run: it loads and generates.
void convert_and_run(const std::string& model, const char* type) {
  const std::string out = temp_path(std::string("gemma-") + type);
  test::CliResult r = run_weir("quantize " + shell_quote(model) + " " + shell_quote(out) + " " + type + " -t 2");
  ASSERT_EQ(r.code, 0) << r.err;
  std::printf("%s", r.out.c_str());
  r = run_weir("run -m " + shell_quote(out) + " -p 'The capital of France is' -n 4 --temp 0 -t 2");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_FALSE(r.out.empty());
  std::printf("%s: '%s'\n", type, r.out.c_str());
  fs::remove(out);
}

TEST(QuantizeCli, RealModelToF16Runs) {
  WEIR_REQUIRE_MODEL(model);
  convert_and_run(model, "F16");
}

TEST(QuantizeCli, RealModelToQ8_0Runs) {
  WEIR_REQUIRE_MODEL(model);
  if (!file_type_available("Q8_0", DType::Q8_0)) GTEST_SKIP() << "no Q8_0 quantizer in this build yet";
  convert_and_run(model, "Q8_0");
}

TEST(QuantizeCli, RealModelToQ4_K_MRuns) {
  WEIR_REQUIRE_MODEL(model);
  if (!file_type_available("Q4_K_M", DType::Q4_K) || !quant::can_quantize(DType::Q6_K))
    GTEST_SKIP() << "no Q4_K_M quantizers in this build yet";
  convert_and_run(model, "Q4_K_M");
}

// weir imatrix on a synth model, then weir quantize --imatrix to IQ4_XS:
// the matrix is llama.cpp's GGUF layout, the quantized file records it and
// runs; a wrong imatrix is refused with the tensor's name.
TEST(QuantizeCli, ImatrixThenIQ4_XSRuns) {
  const std::string model = temp_path("synth-f16.gguf"), text = temp_path("text.txt"),
                    imx = temp_path("imatrix.gguf"), out = temp_path("iq4_xs.gguf");
  test::CliResult r = run_weir("synth --arch llama --preset tiny --type F16 -o " + shell_quote(model));
  ASSERT_EQ(r.code, 0) << r.err;
  {
    std::ofstream f(text);
    for (int i = 0; i < 200; ++i) f << "The quick brown fox " << i << " jumps over the lazy dog. ";
  }
  r = run_weir("imatrix -m " + shell_quote(model) + " -f " + shell_quote(text) + " -o " + shell_quote(imx) +
               " -c 64 --chunks 3 -t 2");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("chunk 3/3"), std::string::npos) << r.err;
  const GGUFFile m = GGUFFile::open(imx);
  EXPECT_EQ(m.get_str("general.type"), "imatrix");
  EXPECT_EQ(m.get_uint("imatrix.chunk_size"), 64u);
  EXPECT_EQ(m.get_uint("imatrix.chunk_count"), 3u);
  const GGUFTensorInfo* q = m.find_tensor("blk.0.attn_q.weight.in_sum2");
  const GGUFTensorInfo* c = m.find_tensor("blk.0.attn_q.weight.counts");
  ASSERT_TRUE(q && c);
  EXPECT_EQ(c->n_elements(), 1);
  float count = 0;
  std::memcpy(&count, c->data, 4);
  EXPECT_EQ(count, 192.0f);  // 3 chunks of 64 tokens
  EXPECT_EQ(m.find_tensor("output.weight.in_sum2"), nullptr);  // layers only, as llama-imatrix

  r = run_weir("quantize --imatrix " + shell_quote(imx) + " " + shell_quote(model) + " " + shell_quote(out) +
               " IQ4_XS -t 2");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("quantized with importance weights"), std::string::npos) << r.err;
  const GGUFFile o = GGUFFile::open(out);
  EXPECT_EQ(o.get_uint("general.file_type"), 30u);
  EXPECT_EQ(o.get_str("quantize.imatrix.file"), imx);
  r = run_weir("run -m " + shell_quote(out) + " -p 'The quick' -n 8 --temp 0 -t 2");
  EXPECT_EQ(r.code, 0) << r.err;

  // An imatrix of another model: the first entry of the wrong length is named.
  const std::string other = temp_path("other.gguf"), bad = temp_path("bad-imatrix.gguf");
  {
    GGUFWriter w;
    w.set_str("general.type", "imatrix");
    w.set_str_array("imatrix.datasets", {"x"});
    w.set_u32("imatrix.chunk_count", 1);
    w.set_u32("imatrix.chunk_size", 1);
    w.add_tensor("blk.0.attn_q.weight.in_sum2", DType::F32, {3, 1});
    w.add_tensor("blk.0.attn_q.weight.counts", DType::F32, {1, 1});
    w.open(bad);
    const float v[4] = {1, 2, 3, 1};
    w.write_tensor_data(v, sizeof v);
    w.close();
  }
  r = run_weir("quantize --imatrix " + shell_quote(bad) + " " + shell_quote(model) + " " + shell_quote(other) +
               " IQ4_XS -t 2");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("blk.0.attn_q.weight"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(other));
  r = run_weir("quantize --imatrix /nonexistent.imatrix " + shell_quote(model) + " " + shell_quote(other) + " IQ4_XS");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("/nonexistent.imatrix"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace weir
