// weir inspect on the valid and broken corpora, the real model and the
// vocab-only Qwen2 file: the JSON document parses and agrees with the reader
// (and the parameter count with the gguf package), arrays are elided unless
// --all, broken files give one line and exit code 2.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/gguf.h"
#include "json_lite.h"
#include "test_env.h"
#include "weir_cli.h"

namespace weir {
namespace {

namespace fs = std::filesystem;
using test::run_weir;
using test::shell_quote;
namespace json = test::json;

std::vector<std::string> case_files(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".case") out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

json::Value inspect_json(const std::string& path, bool all = false) {
  const test::CliResult r = run_weir("inspect --json " + std::string(all ? "--all " : "") + shell_quote(path));
  EXPECT_EQ(r.code, 0) << r.err;
  try {
    return json::parse(r.out);
  } catch (const std::exception& e) {
    ADD_FAILURE() << path << ": output is not JSON: " << e.what();
    return {};
  }
}

// Parameter and tensor count as the gguf package computes them.
bool python_counts(const std::string& path, uint64_t* params, uint64_t* n_tensors) {
  if (!test::python_gguf_available()) return false;
  const std::string cmd = "python3 -c 'import sys; from gguf import GGUFReader; r = GGUFReader(sys.argv[1]); "
                          "print(sum(int(t.n_elements) for t in r.tensors), len(r.tensors))' " +
                          shell_quote(path);
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return false;
  unsigned long long a = 0, b = 0;
  const int n = std::fscanf(p, "%llu %llu", &a, &b);
  pclose(p);
  *params = a;
  *n_tensors = b;
  return n == 2;
}

// The document against the reader's view of the same file.
void expect_matches_reader(const json::Value& d, const GGUFFile& f, bool all) {
  EXPECT_EQ(d["version"].as_int(), int64_t(f.version()));
  EXPECT_EQ(d["alignment"].as_int(), int64_t(f.alignment()));
  EXPECT_EQ(d["data_offset"].as_int(), int64_t(f.data_offset()));
  EXPECT_EQ(d["file_size"].as_int(), int64_t(f.size()));
  const json::Value& md = d["metadata"];
  ASSERT_TRUE(md.is_object());
  ASSERT_EQ(md.size(), f.kvs().size());
  EXPECT_EQ(d["n_kv"].as_int(), int64_t(f.kvs().size()));
  for (size_t i = 0; i < f.kvs().size(); ++i) {
    const auto& [key, v] = f.kvs()[i];
    SCOPED_TRACE(std::string(key));
    EXPECT_EQ(md.object[i].first, key);
    const json::Value& j = md.object[i].second;
    EXPECT_EQ(j["type"].as_string(), gguf_type_name(v.type));
    if (v.type == GGUFType::STRING) {
      EXPECT_EQ(j["value"].as_string(), v.str);
    }
    if (v.type == GGUFType::ARRAY) {
      EXPECT_EQ(j["count"].as_int(), int64_t(v.count));
      EXPECT_EQ(j["elem_type"].as_string(), gguf_type_name(v.elem_type));
      const size_t shown = all ? size_t(v.count) : std::min<size_t>(size_t(v.count), 8);
      ASSERT_EQ(j["value"].size(), shown);
      EXPECT_EQ(j.has("elided"), shown < v.count);
      for (size_t k = 0; k < shown; ++k) {
        if (v.elem_type == GGUFType::STRING) {
          if (j["value"][k].as_string() != v.strings[k]) {
            ADD_FAILURE() << "element " << k << ": " << j["value"][k].as_string();
            break;
          }
        } else if (v.elem_type == GGUFType::FLOAT32) {  // shortest text of the float
          EXPECT_EQ(float(j["value"][k].as_number()), float(v.array_f64(k))) << "element " << k;
        } else if (v.elem_type != GGUFType::ARRAY && v.elem_type != GGUFType::BOOL &&
                   v.elem_type != GGUFType::UINT64) {
          EXPECT_EQ(j["value"][k].as_number(), v.array_f64(k)) << "element " << k;
        }
      }
    }
  }
  const json::Value& ts = d["tensors"];
  ASSERT_EQ(ts.size(), f.tensors().size());
  EXPECT_EQ(d["n_tensors"].as_int(), int64_t(f.tensors().size()));
  uint64_t params = 0, bytes = 0;
  for (size_t i = 0; i < f.tensors().size(); ++i) {
    const GGUFTensorInfo& t = f.tensors()[i];
    const json::Value& j = ts[i];
    EXPECT_EQ(j["name"].as_string(), t.name);
    EXPECT_EQ(j["dtype"].as_string(), dtype_name(t.dtype));
    EXPECT_EQ(j["dtype_id"].as_int(), int64_t(t.dtype));
    const std::vector<int64_t> shape = j["shape"].as_int_vector();
    EXPECT_EQ(shape, std::vector<int64_t>(t.ne, t.ne + t.n_dims)) << t.name;
    EXPECT_EQ(j["n_elements"].as_int(), t.n_elements());
    EXPECT_EQ(j["bytes"].as_int(), int64_t(t.nbytes));
    EXPECT_EQ(j["offset"].as_int(), int64_t(t.offset));
    EXPECT_EQ(j["file_offset"].as_int(), int64_t(f.data_offset() + t.offset));
    params += uint64_t(t.n_elements());
    bytes += t.nbytes;
  }
  EXPECT_EQ(d["n_params"].as_int(), int64_t(params));
  EXPECT_EQ(d["tensor_bytes"].as_int(), int64_t(bytes));
  uint64_t hist_count = 0, hist_params = 0, hist_bytes = 0;
  for (const auto& [name, h] : d["dtypes"].object) {
    hist_count += uint64_t(h["count"].as_int());
    hist_params += uint64_t(h["params"].as_int());
    hist_bytes += uint64_t(h["bytes"].as_int());
  }
  EXPECT_EQ(hist_count, f.tensors().size());
  EXPECT_EQ(hist_params, params);
  EXPECT_EQ(hist_bytes, bytes);
  if (params) EXPECT_NEAR(d["bits_per_weight"].as_number(), 8.0 * double(bytes) / double(params), 1e-3);
  else EXPECT_TRUE(d["bits_per_weight"].is_null());
}

// gguf-py takes ~20 s on files with large vocabularies: only the corpus asks it.
void check_file(const std::string& path, bool also_all, bool ask_python = true) {
  SCOPED_TRACE(path);
  const GGUFFile f = GGUFFile::open(path);
  const json::Value d = inspect_json(path);
  ASSERT_TRUE(d.is_object());
  expect_matches_reader(d, f, false);
  if (also_all) {
    const json::Value a = inspect_json(path, true);
    ASSERT_TRUE(a.is_object());
    expect_matches_reader(a, f, true);
  }
  uint64_t py_params = 0, py_tensors = 0;
  if (ask_python && python_counts(path, &py_params, &py_tensors)) {
    EXPECT_EQ(d["n_params"].as_int(), int64_t(py_params));
    EXPECT_EQ(d["n_tensors"].as_int(), int64_t(py_tensors));
  }
}

TEST(InspectCli, ValidCorpusJsonMatchesTheReader) {
  const auto files = case_files(test::test_data_dir() + "/gguf-valid");
  ASSERT_GE(files.size(), 4u);
  for (const std::string& f : files) check_file(f, true);
}

TEST(InspectCli, ValuesAndEscapes) {
  const std::string path = test::test_data_dir() + "/gguf-valid/all_types_v3.gguf.case";
  const json::Value d = inspect_json(path);
  ASSERT_TRUE(d.is_object());
  const json::Value& md = d["metadata"];
  EXPECT_EQ(md["general.name"]["value"].as_string(), "weir test \xc3\xa9\xc3\xa8 \xf0\x9f\x98\x80");
  EXPECT_EQ(md["test.u64"]["value"].is_int, false);  // 2^64-1 does not fit int64: still a number
  EXPECT_EQ(md["test.u64"]["value"].as_number(), 18446744073709551615.0);
  EXPECT_EQ(md["test.i64"]["value"].as_int(), INT64_MIN);
  EXPECT_EQ(md["test.f32"]["value"].as_number(), 0.15625);
  EXPECT_EQ(md["test.f64"]["value"].as_number(), -1e300);
  EXPECT_TRUE(md["test.bool_true"]["value"].as_bool());
  EXPECT_EQ(md["test.arr_str"]["value"][2].as_string(), "tab\there");
  const json::Value& nested = md["test.arr_nested"];
  EXPECT_EQ(nested["elem_type"].as_string(), "array");
  EXPECT_EQ(nested["value"][0]["value"].as_int_vector(), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(nested["value"][1]["count"].as_int(), 0);

  const test::CliResult t = run_weir("inspect " + shell_quote(path));
  EXPECT_EQ(t.code, 0);
  EXPECT_NE(t.out.find("\"tab\\there\""), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("[3 x array] ([2 x int32] 1, 2)"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("blk.0.ffn_up.weight"), std::string::npos);
  EXPECT_NE(t.out.find("q4_K"), std::string::npos);
}

TEST(InspectCli, BrokenFilesGiveOneLineAndExitTwo) {
  const auto files = case_files(test::test_data_dir() + "/gguf-broken");
  ASSERT_GE(files.size(), 30u);
  for (const std::string& path : files) {
    SCOPED_TRACE(path);
    for (const char* flags : {"", "--json "}) {
      const test::CliResult r = run_weir(std::string("inspect ") + flags + shell_quote(path));
      EXPECT_EQ(r.code, 2);
      EXPECT_TRUE(r.out.empty()) << r.out;
      EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
      EXPECT_NE(r.err.find(fs::path(path).filename().string()), std::string::npos) << r.err;
    }
  }
  const test::CliResult r = run_weir("inspect /nonexistent/model.gguf");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("/nonexistent/model.gguf"), std::string::npos) << r.err;
  EXPECT_EQ(run_weir("inspect").code, 2);
  EXPECT_EQ(run_weir("inspect --frobnicate x").code, 2);
}

// A mixture of experts: the parameters a token uses, each expert tensor
// counted at expert_used_count / expert_count (tiny qwen3moe: 2 layers of
// 3 expert tensors of 256 x 256 x 8, 3 experts a token).
TEST(InspectCli, MixtureOfExpertsActiveParameters) {
  const std::string path = test::own_dir() + "/tiny-qwen3moe.gguf";
  ASSERT_EQ(run_weir("synth --arch qwen3moe --preset tiny --type Q4_K_M -o " + shell_quote(path)).code, 0);
  const json::Value d = inspect_json(path);
  const int64_t experts = 2 * 3 * 256 * 256 * 8;
  EXPECT_EQ(d["n_expert"].as_int(), 8);
  EXPECT_EQ(d["n_expert_used"].as_int(), 3);
  EXPECT_EQ(d["n_params_active"].as_int(), d["n_params"].as_int() - experts / 8 * 5);
  const test::CliResult r = run_weir("inspect " + shell_quote(path));
  EXPECT_NE(r.out.find("active: 1.84 M parameters a token (1840640; 3 of 8 experts)"), std::string::npos) << r.out;
}

// What weir can use of a file: its architecture, tokenizer and types, each
// named, and what weir takes instead when it cannot (issue 47, item 6).
TEST(InspectCli, SaysWhatWeirCanUse) {
  const std::string tiny = test::own_dir() + "/tiny-llama-support.gguf";
  ASSERT_EQ(run_weir("synth --arch llama --preset tiny --type Q4_K_M -o " + shell_quote(tiny)).code, 0);
  test::CliResult r = run_weir("inspect " + shell_quote(tiny));
  EXPECT_NE(r.out.find("architecture: llama, run by weir\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tokenizer:    llama (SentencePiece), pre-tokenizer \"default\", 512 tokens, read by weir\n"),
            std::string::npos) << r.out;
  EXPECT_NE(r.out.find(", all read by weir\n"), std::string::npos) << r.out;
  const json::Value d = inspect_json(tiny);
  EXPECT_EQ(d["support"]["architecture"].as_string(), "llama");
  EXPECT_TRUE(d["support"]["architecture_supported"].as_bool());
  EXPECT_TRUE(d["support"]["tokenizer_supported"].as_bool());
  EXPECT_EQ(d["support"]["types_unsupported"].size(), 0u);
  EXPECT_GE(d["support"]["types_supported"].size(), 10u);

  // The BERT encoders, from weir synth.
  for (const char* arch : {"bert", "nomic-bert"}) {
    const std::string enc = test::own_dir() + "/tiny-" + arch + "-support.gguf";
    ASSERT_EQ(run_weir(std::string("synth --arch ") + arch + " --preset tiny --type F16 -o " + shell_quote(enc)).code, 0);
    r = run_weir("inspect " + shell_quote(enc));
    EXPECT_NE(r.out.find(std::string("architecture: ") + arch + ", run by weir\n"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("tokenizer:    bert (WordPiece)"), std::string::npos) << r.out;
  }

  // Gemma 2, from weir synth.
  const std::string gemma2 = test::own_dir() + "/tiny-gemma2-support.gguf";
  ASSERT_EQ(run_weir("synth --arch gemma2 --preset tiny --type F16 -o " + shell_quote(gemma2)).code, 0);
  r = run_weir("inspect " + shell_quote(gemma2));
  EXPECT_NE(r.out.find("architecture: gemma2, run by weir\n"), std::string::npos) << r.out;

  // An architecture weir does not run (llama.cpp's Falcon vocabulary file).
  const std::string falcon = test::ref_dir() + "/vocab/ggml-vocab-falcon.gguf";
  if (!fs::exists(falcon)) GTEST_SKIP() << "no " << falcon;
  r = run_weir("inspect " + shell_quote(falcon));
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("architecture: falcon, not run by weir (it runs bert, "), std::string::npos) << r.out;
  const json::Value b = inspect_json(falcon);
  EXPECT_FALSE(b["support"]["architecture_supported"].as_bool());
  bool lists_llama = false, lists_bert = false, lists_gemma2 = false;
  for (size_t i = 0; i < b["support"]["architectures"].size(); ++i) {
    lists_llama = lists_llama || b["support"]["architectures"][i].as_string() == "llama";
    lists_bert = lists_bert || b["support"]["architectures"][i].as_string() == "nomic-bert";
    lists_gemma2 = lists_gemma2 || b["support"]["architectures"][i].as_string() == "gemma2";
  }
  EXPECT_TRUE(lists_llama);
  EXPECT_TRUE(lists_bert);
  EXPECT_TRUE(lists_gemma2);
}

TEST(InspectCli, RealModel) {
  WEIR_REQUIRE_MODEL(model);
  check_file(model, false, false);
  const json::Value d = inspect_json(model);
  // The gguf package's view of the model, dumped once (its reader is slow).
  std::ifstream dump(test::test_data_dir() + "/gguf-dump/gemma-3-270m-q4_k_m.txt");
  ASSERT_TRUE(dump);
  int64_t py_params = 0, py_tensors = 0;
  for (std::string line; std::getline(dump, line);) {
    if (line.rfind("tensor\t", 0) != 0) continue;
    std::istringstream in(line);
    std::string tag, name, type, shape;
    in >> tag >> name >> type >> shape;
    int64_t n = 1;
    for (size_t at = 0; at <= shape.size();) {
      const size_t comma = std::min(shape.find(',', at), shape.size());
      n *= std::stoll(shape.substr(at, comma - at));
      at = comma + 1;
    }
    py_params += n;
    ++py_tensors;
  }
  EXPECT_EQ(py_params, 268098176);
  EXPECT_EQ(d["n_tensors"].as_int(), py_tensors);
  EXPECT_EQ(d["n_params"].as_int(), py_params);
  const json::Value& tokens = d["metadata"]["tokenizer.ggml.tokens"];
  EXPECT_EQ(tokens["count"].as_int(), 262144);
  EXPECT_EQ(tokens["value"].size(), 8u);
  EXPECT_TRUE(tokens["elided"].as_bool());
  EXPECT_EQ(tokens["value"][2].as_string(), "<bos>");
  EXPECT_EQ(d["dtypes"]["q4_K"]["count"].as_int(), 27);

  const test::CliResult t = run_weir("inspect " + shell_quote(model));
  EXPECT_EQ(t.code, 0);
  EXPECT_NE(t.out.find("268.10 M parameters"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("7.36 bits per weight"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("[262144 x string] \"<pad>\", \"<eos>\", \"<bos>\""), std::string::npos);
  EXPECT_NE(t.out.find("blk.17.ffn_down.weight"), std::string::npos);
  EXPECT_LT(t.out.size(), 64u * 1024) << "arrays should be elided";
  const test::CliResult all = run_weir("inspect --all " + shell_quote(model));
  EXPECT_EQ(all.code, 0);
  EXPECT_GT(all.out.size(), 262144u * 3) << "--all shows every token";
}

// Vocab-only: no tensors; with --all every token and merge comes through the
// JSON string escaping unchanged.
TEST(InspectCli, VocabOnlyFileEveryStringRoundTrips) {
  const std::string path = test::ref_dir() + "/qwen2-vocab-deepseek-r1.gguf";
  if (!fs::exists(path)) GTEST_SKIP() << "not found: " << path;
  check_file(path, true, false);
  const json::Value d = inspect_json(path, true);
  EXPECT_EQ(d["n_tensors"].as_int(), 0);
  EXPECT_EQ(d["n_params"].as_int(), 0);
  EXPECT_EQ(d["metadata"]["tokenizer.ggml.tokens"]["value"].size(), 152064u);
  EXPECT_FALSE(d["metadata"]["tokenizer.ggml.tokens"].has("elided"));
  const std::string tmpl = d["metadata"]["tokenizer.chat_template"]["value"].as_string();
  EXPECT_GT(tmpl.size(), 2000u);
}

}  // namespace
}  // namespace weir
