// GGUF writer: every file the reader accepts (the valid corpus, the real
// Gemma 3 model, the Qwen2 vocab-only file) survives read -> write -> read
// with identical metadata (keys, types, values, order), tensor infos and
// tensor bytes; data can come in pieces; too many or too few bytes and an
// unwritable path are errors that leave no file behind.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/gguf.h"
#include "core/gguf_writer.h"
#include "test_env.h"

namespace weir {
namespace {

namespace fs = std::filesystem;

std::string data_dir() {
  const std::string d = test::data_dir();
  if (fs::is_directory(d + "/gguf-valid")) return d;
  return (fs::path(__FILE__).parent_path().parent_path() / "data").string();
}

std::vector<std::string> valid_corpus() {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(data_dir() + "/gguf-valid"))
    if (e.path().extension() == ".case") out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

std::string temp_path(const std::string& name) { return weir::test::own_dir() + "/" + name; }

// Copies every kv, tensor info and tensor byte of `in` into a new file.
void copy_gguf(const GGUFFile& in, const std::string& out) {
  GGUFWriter w(in.alignment(), in.version());
  for (const auto& [key, value] : in.kvs()) w.set_value(key, value);
  for (const GGUFTensorInfo& t : in.tensors()) w.add_tensor(t.name, t.dtype, t.n_dims, t.ne);
  EXPECT_EQ(w.n_tensors(), in.tensors().size());
  w.open(out);
  for (const GGUFTensorInfo& t : in.tensors()) w.write_tensor_data(t.data, t.nbytes);
  w.close();
}

// Value equality, down to the bits of floats and the bytes of arrays.
void expect_same_value(const GGUFValue& a, const GGUFValue& b, const std::string& where) {
  ASSERT_EQ(a.type, b.type) << where;
  switch (a.type) {
    case GGUFType::FLOAT32: {
      const float x = float(a.num.f), y = float(b.num.f);
      EXPECT_EQ(std::memcmp(&x, &y, 4), 0) << where << ": " << x << " vs " << y;
      break;
    }
    case GGUFType::FLOAT64:
      EXPECT_EQ(std::memcmp(&a.num.f, &b.num.f, 8), 0) << where << ": " << a.num.f << " vs " << b.num.f;
      break;
    case GGUFType::STRING:
      EXPECT_EQ(a.str, b.str) << where;
      break;
    case GGUFType::ARRAY: {
      ASSERT_EQ(a.elem_type, b.elem_type) << where;
      ASSERT_EQ(a.count, b.count) << where;
      if (const size_t sz = gguf_scalar_size(a.elem_type)) {
        if (a.count) {
          EXPECT_EQ(std::memcmp(a.raw, b.raw, size_t(a.count) * sz), 0) << where;
        }
      } else if (a.elem_type == GGUFType::STRING) {
        ASSERT_EQ(a.strings.size(), b.strings.size()) << where;
        for (size_t i = 0; i < a.strings.size(); ++i)
          if (a.strings[i] != b.strings[i]) {
            ADD_FAILURE() << where << ": element " << i << " differs";
            break;
          }
      } else {
        ASSERT_EQ(a.items.size(), b.items.size()) << where;
        for (size_t i = 0; i < a.items.size(); ++i)
          expect_same_value(a.items[i], b.items[i], where + "[" + std::to_string(i) + "]");
      }
      break;
    }
    default:
      EXPECT_EQ(a.num.u, b.num.u) << where;
  }
}

void expect_same_file(const GGUFFile& a, const GGUFFile& b) {
  EXPECT_EQ(a.version(), b.version());
  EXPECT_EQ(a.alignment(), b.alignment());
  EXPECT_EQ(a.data_offset(), b.data_offset());
  ASSERT_EQ(a.kvs().size(), b.kvs().size());
  for (size_t i = 0; i < a.kvs().size(); ++i) {
    const auto& [ka, va] = a.kvs()[i];
    const auto& [kb, vb] = b.kvs()[i];
    ASSERT_EQ(ka, kb) << "key #" << i;
    expect_same_value(va, vb, std::string(ka));
  }
  ASSERT_EQ(a.tensors().size(), b.tensors().size());
  for (size_t i = 0; i < a.tensors().size(); ++i) {
    const GGUFTensorInfo& x = a.tensors()[i];
    const GGUFTensorInfo& y = b.tensors()[i];
    SCOPED_TRACE(std::string(x.name));
    EXPECT_EQ(x.name, y.name);
    EXPECT_EQ(x.n_dims, y.n_dims);
    for (int d = 0; d < 4; ++d) EXPECT_EQ(x.ne[d], y.ne[d]) << "ne[" << d << "]";
    EXPECT_EQ(x.dtype, y.dtype);
    EXPECT_EQ(x.offset, y.offset);
    ASSERT_EQ(x.nbytes, y.nbytes);
    if (x.nbytes) {
      EXPECT_EQ(std::memcmp(x.data, y.data, x.nbytes), 0) << "tensor bytes differ";
    }
  }
}

// Files written by llama.cpp / gguf-py lay tensors out back to back at the
// alignment, as the writer does, so a copy is the same file byte for byte
// (up to padding after the last tensor, which some writers add).
void expect_same_bytes(const GGUFFile& a, const GGUFFile& b) {
  const size_t n = std::min(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.base(), b.base(), n), 0);
  const GGUFFile& longer = a.size() > b.size() ? a : b;
  for (size_t i = n; i < longer.size(); ++i)
    if (longer.base()[i] != 0) {
      ADD_FAILURE() << "non-zero trailing byte at " << i;
      break;
    }
  EXPECT_LT(longer.size() - n, a.alignment()) << "more than one alignment unit of trailing bytes";
}

void round_trip(const std::string& path) {
  SCOPED_TRACE(path);
  const GGUFFile in = GGUFFile::open(path);
  const std::string out = temp_path(fs::path(path).filename().string() + ".copy");
  copy_gguf(in, out);
  EXPECT_FALSE(fs::exists(out + ".part"));
  {
    const GGUFFile back = GGUFFile::open(out);
    expect_same_file(in, back);
    expect_same_bytes(in, back);
  }
  fs::remove(out);
}

TEST(GGUFWriter, RoundTripsTheValidCorpus) {
  const auto files = valid_corpus();
  ASSERT_GE(files.size(), 4u);
  for (const std::string& f : files) round_trip(f);
}

TEST(GGUFWriter, RoundTripsTheRealModel) {
  WEIR_REQUIRE_MODEL(model);
  round_trip(model);
}

TEST(GGUFWriter, RoundTripsAVocabOnlyFile) {
  const std::string path = test::ref_dir() + "/qwen2-vocab-deepseek-r1.gguf";
  if (!fs::exists(path)) GTEST_SKIP() << "not found: " << path;
  round_trip(path);
}

// A file made from scratch: typed setters, replacing a key in place, removal,
// and tensor data written in pieces of every size.
TEST(GGUFWriter, SettersAndDataInPieces) {
  const std::string out = temp_path("pieces");
  std::vector<uint8_t> a(12), b(8), c(34);  // f32 [3], f16 [2, 2], q8_0 [32]
  for (size_t i = 0; i < a.size(); ++i) a[i] = uint8_t(i + 1);
  for (size_t i = 0; i < b.size(); ++i) b[i] = uint8_t(0x40 + i);
  for (size_t i = 0; i < c.size(); ++i) c[i] = uint8_t(0x80 + i);
  {
    GGUFWriter w(64);
    w.set_str("general.architecture", "test");
    w.set_u32("test.block_count", 1);
    w.set_i8("test.i8", -5);
    w.set_u64("test.u64", 1ull << 40);
    w.set_f64("test.f64", 0.1);
    w.set_bool("test.flag", true);
    w.set_str_array("test.names", {"a", "", "ccc"});
    w.set_i32_array("test.ids", {1, -2, 3});
    w.set_f32_array("test.scores", {0.5f, -1.25f});
    w.set_u32("test.block_count", 7);  // replaced in place
    w.set_str("test.gone", "x");
    w.remove("test.gone");
    EXPECT_FALSE(w.has("test.gone"));
    EXPECT_TRUE(w.has("test.flag"));
    w.add_tensor("a", DType::F32, {3});
    w.add_tensor("b", DType::F16, {2, 2});
    w.add_tensor("c", DType::Q8_0, {32});
    w.open(out);
    for (uint8_t x : a) w.write_tensor_data(&x, 1);
    w.write_tensor_data(b.data(), 3);
    w.write_tensor_data(b.data() + 3, 5);
    w.write_tensor_data(c.data(), 0);
    w.write_tensor_data(c.data(), 30);
    w.write_tensor_data(c.data() + 30, 4);
    w.close();
  }
  const GGUFFile f = GGUFFile::open(out);
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 64u);
  std::vector<std::string> keys;
  for (const auto& kv : f.kvs()) keys.emplace_back(kv.first);
  const std::vector<std::string> expected = {"general.architecture", "test.block_count", "test.i8",
                                             "test.u64", "test.f64", "test.flag", "test.names",
                                             "test.ids", "test.scores", "general.alignment"};
  EXPECT_EQ(keys, expected);
  EXPECT_EQ(f.get_uint("test.block_count"), 7u);
  EXPECT_EQ(f.find("test.i8")->num.i, -5);
  EXPECT_EQ(f.get_uint("test.u64"), 1ull << 40);
  EXPECT_EQ(f.get_float("test.f64"), 0.1);
  EXPECT_TRUE(f.get_bool_or("test.flag", false));
  const auto& names = f.get_str_array("test.names");
  ASSERT_EQ(names.size(), 3u);
  EXPECT_EQ(names[1], "");
  EXPECT_EQ(names[2], "ccc");
  EXPECT_EQ(f.get_i32_array("test.ids"), (std::vector<int32_t>{1, -2, 3}));
  EXPECT_EQ(f.get_f32_array("test.scores"), (std::vector<float>{0.5f, -1.25f}));
  ASSERT_EQ(f.tensors().size(), 3u);
  const std::vector<uint8_t>* want[] = {&a, &b, &c};
  for (size_t i = 0; i < 3; ++i) {
    const GGUFTensorInfo& t = f.tensors()[i];
    EXPECT_EQ(t.offset % 64, 0u) << t.name;
    ASSERT_EQ(t.nbytes, want[i]->size()) << t.name;
    EXPECT_EQ(std::memcmp(t.data, want[i]->data(), t.nbytes), 0) << t.name;
  }
  EXPECT_EQ(f.tensors()[1].ne[1], 2);
  fs::remove(out);
}

TEST(GGUFWriter, TooManyBytesIsAnErrorAndLeavesNoFile) {
  const std::string out = temp_path("too-many");
  fs::remove(out);
  const uint8_t data[16] = {};
  {
    GGUFWriter w;
    w.add_tensor("a", DType::F32, {2});
    w.open(out);
    EXPECT_THROW(w.write_tensor_data(data, 9), Error);
  }
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(fs::exists(out + ".part"));
  {
    GGUFWriter w;  // no tensors at all: any byte is too many
    w.open(out);
    EXPECT_THROW(w.write_tensor_data(data, 1), Error);
  }
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(fs::exists(out + ".part"));
}

TEST(GGUFWriter, TooFewBytesIsAnErrorNamingTheTensor) {
  const std::string out = temp_path("too-few");
  fs::remove(out);
  const uint8_t data[16] = {};
  {
    GGUFWriter w;
    w.add_tensor("a", DType::F32, {2});
    w.add_tensor("b.weight", DType::F32, {2});
    w.open(out);
    w.write_tensor_data(data, 8);
    w.write_tensor_data(data, 5);
    try {
      w.close();
      ADD_FAILURE() << "close() accepted a missing tensor";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("b.weight"), std::string::npos) << e.what();
    }
  }
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(fs::exists(out + ".part"));
}

TEST(GGUFWriter, UnwritablePathNamesThePath) {
  const std::string out = "/nonexistent-weir-dir/sub/model.gguf";
  GGUFWriter w;
  w.set_str("general.architecture", "x");
  try {
    w.open(out);
    ADD_FAILURE() << "open() succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent-weir-dir/sub/model.gguf"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
  }
}

TEST(GGUFWriter, AlignmentKeyMustAgree) {
  GGUFWriter w(32);
  w.set_u32("general.alignment", 64);
  EXPECT_THROW(w.open(temp_path("bad-align")), Error);
  EXPECT_FALSE(fs::exists(temp_path("bad-align")));
}

}  // namespace
}  // namespace weir
