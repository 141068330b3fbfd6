// Importance matrices: the collector (engine/imatrix_collector.h) on tiny
// random-weight models against tests/reference/imatrix_reference.py (the
// float64 numpy forward, every layer product's input summed as squares per
// column, experts per expert); the GGUF it writes read by the `gguf`
// package (names, shapes, keys, values); llama.cpp's legacy .dat format
// read back.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <filesystem>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "core/gguf.h"
#include "core/imatrix_file.h"
#include "core/quant/quantize.h"
#include "engine/imatrix_collector.h"
#include "engine/session.h"
#include "json_lite.h"
#include "model/model.h"
#include "model/quantize_model.h"
#include "tiny_models.h"

namespace weir {
namespace {

std::string quoted(const std::string& s) { return "'" + s + "'"; }

int run_python(const std::string& script, const std::vector<std::string>& args, const std::string& log) {
  std::string cmd = quoted(test::python()) + " " + quoted(test::ref_scripts() + "/" + script);
  for (const std::string& a : args) cmd += " " + quoted(a);
  cmd += " >" + quoted(log) + " 2>&1";
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

// weir's imatrix of one run of the reference ids.
Imatrix collect(const std::string& gguf, const std::vector<int32_t>& ids, int64_t n_batch) {
  auto model = Model::load(gguf);
  CpuOptions opts;
  opts.llama_rounding = false;  // the reference's exact float products
  CpuBackend backend(2, opts);
  SessionParams p{64, n_batch};
  ImatrixCollector c;
  c.attach(p);
  Session s(*model, backend, p);
  std::vector<int32_t> all(ids.size());
  std::iota(all.begin(), all.end(), 0);
  s.eval(ids, all);
  return c.result();
}

class ImatrixFloat64 : public ::testing::TestWithParam<const char*> {};

TEST_P(ImatrixFloat64, SumsOfSquaresMatchNumpyReference) {
  const std::string name = GetParam();
  WEIR_TINY_MODEL(dir, name, "imatrix");
  const std::string out = dir + "/imatrix.json";
  ASSERT_EQ(run_python("imatrix_reference.py", {dir + "/" + name + ".gguf", dir + "/" + name + ".json", out},
                       dir + "/imatrix_reference.log"),
            0)
      << "see " << dir << "/imatrix_reference.log";
  const auto ref = test::json::parse(test::json::read_file(out));
  const auto ids = test::json::parse(test::json::read_file(dir + "/" + name + ".json"))["ids"].as_int_vector<int32_t>();
  for (int64_t n_batch : {int64_t(512), int64_t(7)}) {  // one step, and steps of 7 tokens
    const Imatrix m = collect(dir + "/" + name + ".gguf", ids, n_batch);
    ASSERT_EQ(m.entries.size(), ref.size()) << name;
    double worst = 0;
    for (const auto& [wname, want] : ref.object) {
      const auto it = m.entries.find(wname);
      ASSERT_NE(it, m.entries.end()) << "no entry for " << wname;
      const ImatrixEntry& e = it->second;
      const auto& rows = want["sum2"];
      ASSERT_EQ(size_t(e.n_mat()), rows.size()) << wname;
      for (size_t j = 0; j < rows.size(); ++j) {
        const std::vector<double> w = rows[j].as_number_vector();
        ASSERT_EQ(size_t(e.n_per_row), w.size()) << wname;
        EXPECT_EQ(double(e.counts[j]), want["counts"][j].as_number()) << wname << " matrix " << j;
        double scale = 0, diff = 0;
        for (size_t i = 0; i < w.size(); ++i) {
          scale = std::max(scale, std::fabs(w[i]));
          diff = std::max(diff, std::fabs(double(e.in_sum2[j * w.size() + i]) - w[i]));
        }
        if (scale > 0) worst = std::max(worst, diff / scale);
      }
    }
    std::printf("  %s, batches of %lld: %zu entries, max relative error %.2e\n", name.c_str(), (long long)n_batch,
                m.entries.size(), worst);
    EXPECT_LT(worst, 1e-5) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, ImatrixFloat64, ::testing::Values("llama3", "qwen3moe", "phi3"),
                         [](const auto& info) { return std::string(info.param); });

// The GGUF format as the gguf package reads it.
TEST(ImatrixFile, GgufReadByGgufPackage) {
  Imatrix m;
  m.datasets = {"wiki.train.raw"};
  m.chunk_count = 3;
  m.chunk_size = 512;
  ImatrixEntry dense;
  dense.n_per_row = 64;
  for (int i = 0; i < 64; ++i) dense.in_sum2.push_back(float(i) * 0.5f);
  dense.counts = {1536.0f};
  ImatrixEntry experts;
  experts.n_per_row = 32;
  for (int i = 0; i < 32 * 4; ++i) experts.in_sum2.push_back(float(i));
  experts.counts = {10.0f, 0.0f, 7.0f, 3.0f};
  m.entries["blk.0.attn_q.weight"] = dense;
  m.entries["blk.0.ffn_down_exps.weight"] = experts;
  const std::string dir = test::own_dir();
  const std::string path = dir + "/imatrix.gguf";
  write_imatrix(path, m);

  const std::string script =
      "import sys, json, numpy as np\n"
      "from gguf import GGUFReader\n"
      "r = GGUFReader(sys.argv[1])\n"
      "kv = {k: f.contents() for k, f in r.fields.items() if not k.startswith('GGUF.')}\n"
      "t = {x.name: {'shape': [int(v) for v in x.shape], 'type': x.tensor_type.name,\n"
      "              'sum': float(np.asarray(x.data, dtype=np.float64).sum())} for x in r.tensors}\n"
      "print(json.dumps({'kv': kv, 'tensors': t, 'order': [x.name for x in r.tensors]}))\n";
  {
    std::ofstream(dir + "/read.py") << script;
  }
  const std::string cmd = quoted(test::python()) + " " + quoted(dir + "/read.py") + " " + quoted(path) + " >" +
                          quoted(dir + "/read.json") + " 2>" + quoted(dir + "/read.log");
  const int rc = std::system(cmd.c_str());
  ASSERT_EQ(WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, 0) << "see " << dir << "/read.log";
  const auto got = test::json::parse(test::json::read_file(dir + "/read.json"));
  EXPECT_EQ(got["kv"]["general.type"].as_string(), "imatrix");
  EXPECT_EQ(got["kv"]["imatrix.datasets"][0].as_string(), "wiki.train.raw");
  EXPECT_EQ(got["kv"]["imatrix.chunk_count"].as_int(), 3);
  EXPECT_EQ(got["kv"]["imatrix.chunk_size"].as_int(), 512);
  const auto& t = got["tensors"];
  EXPECT_EQ(t.size(), 4u);
  // gguf-py's shape is the GGUF ne: in_sum2 [n_per_row, n_mat], counts [1, n_mat].
  EXPECT_EQ(t["blk.0.attn_q.weight.in_sum2"]["shape"][0].as_int(), 64);
  EXPECT_EQ(t["blk.0.attn_q.weight.in_sum2"]["shape"][1].as_int(), 1);
  EXPECT_EQ(t["blk.0.attn_q.weight.counts"]["shape"][0].as_int(), 1);
  EXPECT_EQ(t["blk.0.ffn_down_exps.weight.in_sum2"]["shape"][0].as_int(), 32);
  EXPECT_EQ(t["blk.0.ffn_down_exps.weight.in_sum2"]["shape"][1].as_int(), 4);
  EXPECT_EQ(t["blk.0.ffn_down_exps.weight.counts"]["shape"][0].as_int(), 1);
  EXPECT_EQ(t["blk.0.ffn_down_exps.weight.counts"]["shape"][1].as_int(), 4);
  EXPECT_EQ(t["blk.0.ffn_down_exps.weight.counts"]["type"].as_string(), "F32");
  EXPECT_EQ(t["blk.0.attn_q.weight.in_sum2"]["sum"].as_number(), 0.5 * 63 * 64 / 2);
  EXPECT_EQ(t["blk.0.ffn_down_exps.weight.counts"]["sum"].as_number(), 20.0);
  EXPECT_EQ(got["order"][0].as_string(), "blk.0.attn_q.weight.in_sum2");  // name order, sums before counts

  // And weir reads back what it wrote; the importance is sums / counts, 1
  // for a matrix no token reached.
  const Imatrix back = read_imatrix(path);
  EXPECT_FALSE(back.legacy);
  EXPECT_EQ(back.chunk_count, 3u);
  EXPECT_EQ(back.entries.at("blk.0.ffn_down_exps.weight").in_sum2, experts.in_sum2);
  const std::vector<float> w = back.importance("blk.0.ffn_down_exps.weight");
  ASSERT_EQ(w.size(), 128u);
  EXPECT_EQ(w[0], 0.0f);
  EXPECT_EQ(w[5], 5.0f / 10.0f);
  EXPECT_EQ(w[32 + 3], 1.0f);  // expert 1: no tokens
  EXPECT_EQ(w[64 + 7], float(64 + 7) / 7.0f);
  EXPECT_TRUE(back.importance("blk.9.attn_q.weight").empty());
}

// llama.cpp's legacy .dat: values stored as sum / count * ncall; the
// importance is value / ncall.
TEST(ImatrixFile, LegacyDatRead) {
  const std::string path = test::own_dir() + "/imatrix.dat";
  {
    std::ofstream f(path, std::ios::binary);
    auto i32 = [&](int32_t v) { f.write(reinterpret_cast<const char*>(&v), 4); };
    i32(2);
    for (const char* name : {"blk.0.attn_k.weight", "blk.1.ffn_up.weight"}) {
      i32(int32_t(std::strlen(name)));
      f.write(name, std::streamsize(std::strlen(name)));
      i32(4);  // ncall
      i32(3);  // nval
      const float v[3] = {4.0f, 8.0f, 2.0f};
      f.write(reinterpret_cast<const char*>(v), sizeof v);
    }
    i32(4);  // chunks
    i32(8);
    f.write("data.txt", 8);
  }
  const Imatrix m = read_imatrix(path);
  EXPECT_TRUE(m.legacy);
  EXPECT_EQ(m.entries.size(), 2u);
  EXPECT_EQ(m.chunk_count, 4u);
  ASSERT_EQ(m.datasets.size(), 1u);
  EXPECT_EQ(m.datasets[0], "data.txt");
  EXPECT_EQ(m.importance("blk.1.ffn_up.weight"), (std::vector<float>{1.0f, 2.0f, 0.5f}));

  // Truncated: an error naming the file.
  std::filesystem::resize_file(path, 30);
  try {
    read_imatrix(path);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

// quantize_model with an importance matrix: each tensor of a type that uses
// one is quantize_rows of the dequantized source with in_sum2 / counts (per
// expert for 3-D tensors); a tensor without an entry is quantized without
// one and named; an entry of the wrong length is an error naming the tensor.
TEST(QuantizeWithImatrix, WeightsReachTheQuantizer) {
  for (const char* name : {"llama3", "qwen3moe"}) {
    WEIR_TINY_MODEL(dir, name, "quant-imatrix");
    const std::string src_path = dir + "/" + name + ".gguf";
    const GGUFFile src = GGUFFile::open(src_path);
    Imatrix m;
    m.path = "made-up.imatrix";
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(0.0f, 50.0f);
    std::string skipped;
    for (const GGUFTensorInfo& t : src.tensors()) {
      const std::string n(t.name);
      if (t.n_dims < 2 || n.rfind("blk.", 0) != 0 || n.find("ffn_gate_inp") != std::string::npos) continue;
      if (skipped.empty() && n.find("ffn_up") != std::string::npos) {  // leave one out
        skipped = n;
        continue;
      }
      ImatrixEntry e;
      e.n_per_row = t.ne[0];
      for (int64_t i = 0; i < t.ne[0] * t.ne[2]; ++i) e.in_sum2.push_back(u(rng));
      for (int64_t j = 0; j < t.ne[2]; ++j) e.counts.push_back(float(3 + j));
      m.entries[n] = e;
    }
    const std::string out = dir + "/iq4.gguf";
    const QuantizeResult r = quantize_model(src_path, out, FileType::IQ4_NL, 2, {}, &m);
    // The one left out, and tensors outside the layers (token_embd), which
    // an imatrix does not cover.
    std::vector<std::string> missing_blk;
    for (const std::string& n : r.without_importance)
      if (n.rfind("blk.", 0) == 0) missing_blk.push_back(n);
    ASSERT_EQ(missing_blk.size(), 1u) << name;
    EXPECT_EQ(missing_blk[0], skipped);

    const GGUFFile q = GGUFFile::open(out);
    EXPECT_EQ(q.get_str("quantize.imatrix.file"), "made-up.imatrix");
    EXPECT_EQ(q.get_uint("quantize.imatrix.entries_count"), m.entries.size());
    size_t checked = 0, weighted = 0;
    for (size_t i = 0; i < q.tensors().size(); ++i) {
      const GGUFTensorInfo& a = src.tensors()[i];
      const GGUFTensorInfo& b = q.tensors()[i];
      if (a.dtype == b.dtype || !quant::uses_importance(b.dtype)) continue;
      weighted += m.entries.count(std::string(a.name));
      std::vector<float> f(size_t(a.n_elements()));
      dequantize_row(a.dtype, a.data, f.data(), a.n_elements());
      std::vector<uint8_t> want(b.nbytes);
      const std::vector<float> w = m.importance(std::string(a.name));
      const int64_t rows = a.ne[1];
      for (int64_t e = 0; e < a.ne[2]; ++e)
        quant::quantize_rows(b.dtype, f.data() + e * rows * a.ne[0], want.data() + size_t(e * rows) * row_bytes(b.dtype, a.ne[0]),
                             rows, a.ne[0], w.empty() ? nullptr : w.data() + e * a.ne[0]);
      EXPECT_EQ(std::memcmp(want.data(), b.data, b.nbytes), 0) << name << " " << a.name;
      ++checked;
    }
    EXPECT_GT(checked, 6u) << name;
    EXPECT_EQ(r.n_weighted, weighted) << name;

    // A wrong length: an error naming the tensor, nothing written.
    Imatrix bad = m;
    auto& e = bad.entries.begin()->second;
    e.in_sum2.resize(e.in_sum2.size() - 1);
    e.n_per_row -= 1;
    try {
      quantize_model(src_path, dir + "/bad.gguf", FileType::IQ4_NL, 2, {}, &bad);
      ADD_FAILURE() << "no error";
    } catch (const Error& err) {
      EXPECT_NE(std::string(err.what()).find(bad.entries.begin()->first), std::string::npos) << err.what();
    }
    EXPECT_FALSE(std::filesystem::exists(dir + "/bad.gguf"));
  }
}

}  // namespace
}  // namespace weir
