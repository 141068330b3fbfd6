// GGUF reader: well-formed files built here (v2 and v3, every value type,
// nested arrays, custom alignment), the hand-broken corpus in
// tests/data/gguf-broken (each file's expected error words in EXPECTED.txt),
// truncations and byte flips of the valid seeds, and the real model, all
// cross-checked against the `gguf` PyPI package's reader through
// tests/data/gguf_dump.py.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/gguf.h"
#include "test_env.h"

namespace weir {
namespace {

namespace fs = std::filesystem;

// tests/data: WEIR_TEST_DATA when it points at a folder, else found from this
// file's path, so the test also runs outside ctest.
std::string data_dir() {
  const std::string d = test::data_dir();
  if (fs::is_directory(d + "/gguf-broken")) return d;
  return (fs::path(__FILE__).parent_path().parent_path() / "data").string();
}

#define EXPECT_CONTAINS(haystack, needle)                          \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) \
      << "expected \"" << (needle) << "\" in: " << (haystack)

// ---------------------------------------------------------------------------
// A small GGUF writer

struct Bytes {
  std::vector<uint8_t> b;
  template <class T>
  Bytes& put(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    b.insert(b.end(), p, p + sizeof v);
    return *this;
  }
  Bytes& str(std::string_view s) {
    put<uint64_t>(s.size());
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  Bytes& type(GGUFType t) { return put<uint32_t>(uint32_t(t)); }
  Bytes& append(const Bytes& o) {
    b.insert(b.end(), o.b.begin(), o.b.end());
    return *this;
  }
};

struct TensorSpec {
  std::string name;
  std::vector<int64_t> ne;
  DType dtype;
  std::vector<uint8_t> data;
  uint64_t offset = 0;
};

class GGUFBuilder {
 public:
  explicit GGUFBuilder(uint32_t version = 3, uint32_t alignment = 0) : version_(version) {
    if (alignment) {
      alignment_ = alignment;
      scalar<uint32_t>("general.alignment", GGUFType::UINT32, alignment);
    }
  }
  template <class T>
  GGUFBuilder& scalar(std::string_view key, GGUFType t, T v) {
    kvs_.str(key).type(t).put<T>(v);
    ++n_kv_;
    return *this;
  }
  GGUFBuilder& string(std::string_view key, std::string_view s) {
    kvs_.str(key).type(GGUFType::STRING).str(s);
    ++n_kv_;
    return *this;
  }
  // payload: everything after the value type (for arrays: elem type, count, elems)
  GGUFBuilder& raw(std::string_view key, GGUFType t, const Bytes& payload) {
    kvs_.str(key).type(t).append(payload);
    ++n_kv_;
    return *this;
  }
  GGUFBuilder& tensor(std::string name, std::vector<int64_t> ne, DType dt) {
    int64_t n = 1;
    for (int64_t d : ne) n *= d;
    const DTypeTraits& tr = traits(dt);
    std::vector<uint8_t> data(size_t(n / tr.block_size) * tr.type_size);
    for (size_t i = 0; i < data.size(); ++i) data[i] = uint8_t(i * 131 + tensors_.size() * 17 + 5);
    tensors_.push_back({std::move(name), std::move(ne), dt, std::move(data)});
    return *this;
  }
  const std::vector<TensorSpec>& tensors() const { return tensors_; }

  std::vector<uint8_t> build() {
    uint64_t pos = 0;
    for (TensorSpec& t : tensors_) {
      t.offset = pos;
      pos = (pos + t.data.size() + alignment_ - 1) / alignment_ * alignment_;
    }
    Bytes out;
    out.put<uint32_t>(0x46554747).put<uint32_t>(version_);
    out.put<uint64_t>(tensors_.size()).put<uint64_t>(n_kv_).append(kvs_);
    for (const TensorSpec& t : tensors_) {
      out.str(t.name).put<uint32_t>(uint32_t(t.ne.size()));
      for (int64_t d : t.ne) out.put<uint64_t>(uint64_t(d));
      out.put<uint32_t>(uint32_t(t.dtype)).put<uint64_t>(t.offset);
    }
    const size_t data_start = (out.b.size() + alignment_ - 1) / alignment_ * alignment_;
    out.b.resize(data_start, 0);
    for (const TensorSpec& t : tensors_) {
      out.b.resize(data_start + t.offset, 0);
      out.b.insert(out.b.end(), t.data.begin(), t.data.end());
    }
    return out.b;
  }

 private:
  uint32_t version_;
  uint64_t alignment_ = 32;
  Bytes kvs_;
  uint64_t n_kv_ = 0;
  std::vector<TensorSpec> tensors_;
};

template <class T>
Bytes scalar_array(GGUFType et, std::initializer_list<T> xs) {
  Bytes b;
  b.type(et).put<uint64_t>(xs.size());
  for (T x : xs) b.put<T>(x);
  return b;
}
Bytes string_array(std::initializer_list<std::string_view> xs) {
  Bytes b;
  b.type(GGUFType::STRING).put<uint64_t>(xs.size());
  for (auto x : xs) b.str(x);
  return b;
}
Bytes array_of_arrays(std::initializer_list<Bytes> xs) {
  Bytes b;
  b.type(GGUFType::ARRAY).put<uint64_t>(xs.size());
  for (const Bytes& x : xs) b.append(x);
  return b;
}

// Every metadata value type, arrays of each, and nested arrays.
void add_every_type(GGUFBuilder& g) {
  g.string("general.architecture", "llama");
  g.string("general.name", "weir test \xc3\xa9");
  g.scalar<uint8_t>("t.u8", GGUFType::UINT8, 200);
  g.scalar<int8_t>("t.i8", GGUFType::INT8, -100);
  g.scalar<uint16_t>("t.u16", GGUFType::UINT16, 60000);
  g.scalar<int16_t>("t.i16", GGUFType::INT16, -30000);
  g.scalar<uint32_t>("t.u32", GGUFType::UINT32, 4000000000u);
  g.scalar<int32_t>("t.i32", GGUFType::INT32, 123456);
  g.scalar<float>("t.f32", GGUFType::FLOAT32, 0.15625f);
  g.scalar<uint8_t>("t.bool", GGUFType::BOOL, 1);
  g.scalar<uint8_t>("t.bool_false", GGUFType::BOOL, 0);
  g.scalar<uint64_t>("t.u64", GGUFType::UINT64, ~uint64_t(0));
  g.scalar<int64_t>("t.i64", GGUFType::INT64, -(int64_t(1) << 40));
  g.scalar<double>("t.f64", GGUFType::FLOAT64, -2.5e100);
  g.string("t.empty", "");
  g.raw("t.a_u8", GGUFType::ARRAY, scalar_array<uint8_t>(GGUFType::UINT8, {0, 1, 255}));
  g.raw("t.a_i8", GGUFType::ARRAY, scalar_array<int8_t>(GGUFType::INT8, {-128, 0, 127}));
  g.raw("t.a_u16", GGUFType::ARRAY, scalar_array<uint16_t>(GGUFType::UINT16, {1, 65535}));
  g.raw("t.a_i16", GGUFType::ARRAY, scalar_array<int16_t>(GGUFType::INT16, {-32768, 32767}));
  g.raw("t.a_u32", GGUFType::ARRAY, scalar_array<uint32_t>(GGUFType::UINT32, {7, 4294967295u}));
  g.raw("t.a_i32", GGUFType::ARRAY, scalar_array<int32_t>(GGUFType::INT32, {-5, 0, 5}));
  g.raw("t.a_f32", GGUFType::ARRAY, scalar_array<float>(GGUFType::FLOAT32, {0.5f, -2.25f}));
  g.raw("t.a_bool", GGUFType::ARRAY, scalar_array<uint8_t>(GGUFType::BOOL, {1, 0, 1}));
  g.raw("t.a_u64", GGUFType::ARRAY, scalar_array<uint64_t>(GGUFType::UINT64, {0, ~uint64_t(0)}));
  g.raw("t.a_i64", GGUFType::ARRAY, scalar_array<int64_t>(GGUFType::INT64, {-7, INT64_MAX}));
  g.raw("t.a_f64", GGUFType::ARRAY, scalar_array<double>(GGUFType::FLOAT64, {3.25, -0.0}));
  g.raw("t.a_str", GGUFType::ARRAY, string_array({"a", "", "tab\there", "\xe2\x96\x81tok"}));
  g.raw("t.a_empty", GGUFType::ARRAY, scalar_array<int32_t>(GGUFType::INT32, {}));
  g.raw("t.a_nested", GGUFType::ARRAY,
        array_of_arrays({scalar_array<int32_t>(GGUFType::INT32, {1, 2}),
                         scalar_array<int32_t>(GGUFType::INT32, {}),
                         scalar_array<int32_t>(GGUFType::INT32, {3})}));
  g.raw("t.a_nested_str", GGUFType::ARRAY,
        array_of_arrays({string_array({"x", "yz"}), string_array({"w"})}));
  g.raw("t.a_nested3", GGUFType::ARRAY,
        array_of_arrays({array_of_arrays({scalar_array<uint8_t>(GGUFType::UINT8, {9}),
                                          scalar_array<uint8_t>(GGUFType::UINT8, {8, 7})})}));
}

constexpr int kEveryTypeKVs = 31;  // add_every_type's keys

GGUFBuilder every_type_file(uint32_t version, uint32_t alignment) {
  GGUFBuilder g(version, alignment);
  add_every_type(g);
  g.tensor("token_embd.weight", {64, 3}, DType::Q8_0);
  g.tensor("blk.0.attn_norm.weight", {64}, DType::F32);
  g.tensor("blk.0.ffn_up.weight", {256, 2, 1}, DType::Q4_K);
  g.tensor("blk.0.attn_q.weight", {16, 3, 2, 1}, DType::F16);
  g.tensor("rope_freqs", {0}, DType::F32);
  return g;
}

// ---------------------------------------------------------------------------
// The dump format of tests/data/gguf_dump.py, rebuilt from weir's reader

uint32_t crc32(uint32_t crc, const void* data, size_t n) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  const auto* p = static_cast<const uint8_t*>(data);
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}
uint32_t crc32(uint32_t crc, std::string_view s) { return crc32(crc, s.data(), s.size()); }

std::string esc(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += char(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  return out;
}

std::string upper_type(GGUFType t) {
  std::string s = gguf_type_name(t);
  for (char& c : s) c = char(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

std::string fmt_double(double d) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", d);
  return buf;
}

// Element i of a packed scalar array as gguf_dump.py writes it.
std::string elem_text(GGUFType t, const uint8_t* raw, uint64_t i) {
  switch (t) {
    case GGUFType::FLOAT32: {
      float f;
      std::memcpy(&f, raw + i * 4, 4);
      return fmt_double(f);
    }
    case GGUFType::FLOAT64: {
      double d;
      std::memcpy(&d, raw + i * 8, 8);
      return fmt_double(d);
    }
    case GGUFType::UINT64: {
      uint64_t u;
      std::memcpy(&u, raw + i * 8, 8);
      return std::to_string(u);
    }
    case GGUFType::BOOL:
      return raw[i] ? "1" : "0";
    default: {
      GGUFValue v;
      v.type = GGUFType::ARRAY;
      v.elem_type = t;
      v.count = i + 1;
      v.raw = raw;
      return std::to_string(v.array_i64(i));
    }
  }
}

void types_of(const GGUFValue& v, std::vector<std::string>& out) {
  out.push_back(upper_type(v.type));
  if (v.type != GGUFType::ARRAY || v.count == 0) return;
  if (v.elem_type == GGUFType::ARRAY) {
    types_of(v.items[0], out);
  } else {
    out.push_back(upper_type(v.elem_type));
  }
}

void leaves(const GGUFValue& v, uint64_t& n, uint32_t& crc) {
  if (v.elem_type == GGUFType::ARRAY) {
    for (const GGUFValue& it : v.items) leaves(it, n, crc);
  } else if (v.elem_type == GGUFType::STRING) {
    for (std::string_view s : v.strings) {
      crc = crc32(crc, std::to_string(s.size()) + ":");
      crc = crc32(crc, s);
      ++n;
    }
  } else {
    for (uint64_t i = 0; i < v.count; ++i) {
      crc = crc32(crc, elem_text(v.elem_type, v.raw, i) + ";");
      ++n;
    }
  }
}

std::string value_text(const GGUFValue& v) {
  switch (v.type) {
    case GGUFType::STRING:
      return esc(v.str);
    case GGUFType::FLOAT32:
    case GGUFType::FLOAT64:
      return fmt_double(v.num.f);
    case GGUFType::BOOL:
      return v.num.u ? "1" : "0";
    case GGUFType::INT8:
    case GGUFType::INT16:
    case GGUFType::INT32:
    case GGUFType::INT64:
      return std::to_string(v.num.i);
    case GGUFType::ARRAY: {
      uint64_t n = 0;
      uint32_t crc = 0;
      leaves(v, n, crc);
      char buf[96];
      std::snprintf(buf, sizeof buf, "count=%llu n=%llu crc=%08x", (unsigned long long)v.count,
                    (unsigned long long)n, crc);
      return buf;
    }
    default:
      return std::to_string(v.num.u);
  }
}

std::string dump(const GGUFFile& f) {
  std::ostringstream o;
  o << "version\t" << f.version() << "\n";
  o << "alignment\t" << f.alignment() << "\n";
  o << "data_offset\t" << f.data_offset() << "\n";
  o << "kv_count\t" << f.kvs().size() << "\n";
  o << "tensor_count\t" << f.tensors().size() << "\n";
  for (const auto& [key, v] : f.kvs()) {
    std::vector<std::string> types;
    types_of(v, types);
    std::string ts;
    for (const auto& t : types) {
      if (!ts.empty()) ts += ',';
      ts += t;
    }
    o << "kv\t" << esc(key) << "\t" << ts << "\t" << value_text(v) << "\n";
  }
  for (const GGUFTensorInfo& t : f.tensors()) {
    std::string ne;
    for (int d = 0; d < t.n_dims; ++d) {
      if (d) ne += ',';
      ne += std::to_string(t.ne[d]);
    }
    char crc[16];
    std::snprintf(crc, sizeof crc, "%08x", crc32(0, t.data, std::min<size_t>(t.nbytes, 4096)));
    o << "tensor\t" << esc(t.name) << "\t" << uint32_t(t.dtype) << "\t" << ne << "\t" << t.offset
      << "\t" << t.nbytes << "\t" << crc << "\n";
  }
  return o.str();
}

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

void expect_same_dump(const std::string& ours, const std::string& theirs, const std::string& what) {
  const auto a = lines_of(ours), b = lines_of(theirs);
  EXPECT_EQ(a.size(), b.size()) << what;
  int shown = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()) && shown < 10; ++i)
    if (a[i] != b[i]) {
      ADD_FAILURE() << what << " line " << i + 1 << "\n  weir: " << a[i] << "\n  gguf: " << b[i];
      ++shown;
    }
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  const std::string s = read_text(path);
  return {s.begin(), s.end()};
}

bool python_gguf_available() {
  static const bool ok = std::system("python3 -c 'import gguf' >/dev/null 2>&1") == 0;
  return ok;
}

// Output of tests/data/gguf_dump.py on path (empty on failure).
std::string python_dump(const std::string& path) {
  const std::string cmd = "python3 '" + data_dir() + "/gguf_dump.py' '" + path + "' 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return "";
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  const int rc = pclose(p);
  EXPECT_EQ(rc, 0) << cmd << "\n" << out;
  return out;
}

class TempFile {
 public:
  explicit TempFile(const std::vector<uint8_t>& bytes, const std::string& stem) {
    static int seq = 0;
    path_ = (fs::temp_directory_path() / ("weir_gguf_" + std::to_string(::getpid()) + "_" +
                                          std::to_string(seq++) + "_" + stem + ".gguf"))
                .string();
    std::ofstream(path_, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  }
  ~TempFile() {
    std::error_code ec;
    fs::remove(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Message of the weir::Error that parsing throws; fails the test if none.
std::string parse_error(const std::vector<uint8_t>& bytes, const std::string& name) {
  try {
    GGUFFile::parse(bytes.data(), bytes.size(), name);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << name << ": parsed without an error";
  return "";
}

// ---------------------------------------------------------------------------
// Well-formed files

class GGUFWellFormed : public ::testing::TestWithParam<uint32_t> {};

TEST_P(GGUFWellFormed, EveryValueTypeNestedArraysCustomAlignment) {
  const uint32_t version = GetParam();
  GGUFBuilder g = every_type_file(version, 64);
  const std::vector<uint8_t> bytes = g.build();
  const GGUFFile f = GGUFFile::parse(bytes.data(), bytes.size(), "built.gguf");

  EXPECT_EQ(f.version(), version);
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.data_offset() % 64, 0u);
  EXPECT_EQ(f.size(), bytes.size());
  ASSERT_EQ(f.kvs().size(), size_t(kEveryTypeKVs + 1));
  EXPECT_EQ(f.kvs()[0].first, "general.alignment");
  EXPECT_EQ(f.kvs()[1].first, "general.architecture");

  EXPECT_EQ(f.get_uint("general.alignment"), 64u);
  EXPECT_EQ(f.get_str("general.architecture"), "llama");
  EXPECT_EQ(f.get_str("general.name"), "weir test \xc3\xa9");
  EXPECT_EQ(f.get_uint("t.u8"), 200u);
  EXPECT_EQ(f.get_uint("t.u16"), 60000u);
  EXPECT_EQ(f.get_uint("t.u32"), 4000000000u);
  EXPECT_EQ(f.get_uint("t.i32"), 123456u);
  EXPECT_EQ(f.get_uint("t.u64"), ~uint64_t(0));
  EXPECT_EQ(f.find("t.i8")->num.i, -100);
  EXPECT_EQ(f.find("t.i16")->num.i, -30000);
  EXPECT_EQ(f.find("t.i64")->num.i, -(int64_t(1) << 40));
  EXPECT_TRUE(f.find("t.i64")->is_integer());
  EXPECT_FALSE(f.find("t.f32")->is_integer());
  EXPECT_TRUE(f.find("t.f64")->is_float());
  EXPECT_DOUBLE_EQ(f.get_float("t.f32"), 0.15625);
  EXPECT_DOUBLE_EQ(f.get_float("t.f64"), -2.5e100);
  EXPECT_DOUBLE_EQ(f.get_float("t.i8"), -100.0);
  EXPECT_DOUBLE_EQ(f.get_float("t.u32"), 4000000000.0);
  EXPECT_TRUE(f.get_bool_or("t.bool", false));
  EXPECT_FALSE(f.get_bool_or("t.bool_false", true));
  EXPECT_TRUE(f.get_bool_or("t.missing", true));
  EXPECT_EQ(f.get_str("t.empty"), "");
  EXPECT_EQ(f.get_str_or("t.missing", "def"), "def");
  EXPECT_EQ(f.get_uint_or("t.missing", 7), 7u);
  EXPECT_DOUBLE_EQ(f.get_float_or("t.missing", 1.5), 1.5);

  // arrays
  EXPECT_EQ(f.get_i32_array("t.a_u8"), (std::vector<int32_t>{0, 1, 255}));
  EXPECT_EQ(f.get_i32_array("t.a_i8"), (std::vector<int32_t>{-128, 0, 127}));
  EXPECT_EQ(f.get_i32_array("t.a_i16"), (std::vector<int32_t>{-32768, 32767}));
  EXPECT_EQ(f.get_i32_array("t.a_i32"), (std::vector<int32_t>{-5, 0, 5}));
  EXPECT_EQ(f.get_f32_array("t.a_f32"), (std::vector<float>{0.5f, -2.25f}));
  EXPECT_EQ(f.get_f32_array("t.a_i32"), (std::vector<float>{-5.f, 0.f, 5.f}));
  EXPECT_EQ(f.get_f32_array("t.a_f64"), (std::vector<float>{3.25f, -0.0f}));
  EXPECT_TRUE(f.get_i32_array("t.a_empty").empty());
  const GGUFValue& u64s = f.get_array("t.a_u64");
  EXPECT_EQ(u64s.elem_type, GGUFType::UINT64);
  EXPECT_EQ(u64s.count, 2u);
  EXPECT_EQ(u64s.array_i64(0), 0);
  EXPECT_EQ(f.get_array("t.a_i64").array_i64(1), INT64_MAX);
  EXPECT_EQ(f.get_array("t.a_bool").array_i64(0), 1);
  EXPECT_EQ(f.get_array("t.a_bool").array_i64(1), 0);
  EXPECT_DOUBLE_EQ(f.get_array("t.a_f64").array_f64(0), 3.25);
  EXPECT_DOUBLE_EQ(f.get_array("t.a_u16").array_f64(1), 65535.0);
  EXPECT_EQ(f.get_str_array("t.a_str"),
            (std::vector<std::string_view>{"a", "", "tab\there", "\xe2\x96\x81tok"}));

  const GGUFValue& nested = f.get_array("t.a_nested");
  EXPECT_EQ(nested.elem_type, GGUFType::ARRAY);
  ASSERT_EQ(nested.items.size(), 3u);
  EXPECT_EQ(nested.items[0].type, GGUFType::ARRAY);
  EXPECT_EQ(nested.items[0].elem_type, GGUFType::INT32);
  EXPECT_EQ(nested.items[0].count, 2u);
  EXPECT_EQ(nested.items[0].array_i64(1), 2);
  EXPECT_EQ(nested.items[1].count, 0u);
  EXPECT_EQ(nested.items[2].array_i64(0), 3);
  const GGUFValue& nested_str = f.get_array("t.a_nested_str");
  ASSERT_EQ(nested_str.items.size(), 2u);
  EXPECT_EQ(nested_str.items[0].strings, (std::vector<std::string_view>{"x", "yz"}));
  EXPECT_EQ(nested_str.items[1].strings, (std::vector<std::string_view>{"w"}));
  const GGUFValue& n3 = f.get_array("t.a_nested3");
  ASSERT_EQ(n3.items.size(), 1u);
  ASSERT_EQ(n3.items[0].items.size(), 2u);
  EXPECT_EQ(n3.items[0].items[1].array_i64(1), 7);

  // tensors: infos, alignment and the bytes they point at
  ASSERT_EQ(f.tensors().size(), g.tensors().size());
  for (size_t i = 0; i < g.tensors().size(); ++i) {
    const TensorSpec& want = g.tensors()[i];
    const GGUFTensorInfo& t = f.tensors()[i];
    SCOPED_TRACE(want.name);
    EXPECT_EQ(t.name, want.name);
    EXPECT_EQ(f.find_tensor(want.name), &t);
    EXPECT_EQ(t.dtype, want.dtype);
    ASSERT_EQ(t.n_dims, int(want.ne.size()));
    int64_t n = 1;
    for (int d = 0; d < 4; ++d) {
      const int64_t ne = d < t.n_dims ? want.ne[size_t(d)] : 1;
      EXPECT_EQ(t.ne[d], ne);
      n *= ne;
    }
    EXPECT_EQ(t.n_elements(), n);
    EXPECT_EQ(t.offset, want.offset);
    EXPECT_EQ(t.offset % 64, 0u);
    EXPECT_EQ(t.nbytes, want.data.size());
    EXPECT_EQ(t.data, f.base() + f.data_offset() + t.offset);
    EXPECT_TRUE(std::equal(want.data.begin(), want.data.end(), t.data));
  }
  EXPECT_EQ(f.find_tensor("nope"), nullptr);
  EXPECT_EQ(f.find("nope"), nullptr);
}

TEST_P(GGUFWellFormed, MatchesPythonGGUFReader) {
  if (!python_gguf_available()) GTEST_SKIP() << "python3 with the gguf package not found";
  GGUFBuilder g = every_type_file(GetParam(), 64);
  const TempFile tmp(g.build(), "every_type_v" + std::to_string(GetParam()));
  const GGUFFile f = GGUFFile::open(tmp.path());
  expect_same_dump(dump(f), python_dump(tmp.path()), tmp.path());
}

INSTANTIATE_TEST_SUITE_P(Versions, GGUFWellFormed, ::testing::Values(2u, 3u),
                         [](const auto& info) { return "v" + std::to_string(info.param); });

TEST(GGUFReader, DefaultAlignmentNoTensorsNoKeys) {
  GGUFBuilder g(3);
  const auto bytes = g.build();
  const GGUFFile f = GGUFFile::parse(bytes.data(), bytes.size());
  EXPECT_EQ(f.name(), "<memory>");
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.data_offset(), 32u);
  EXPECT_TRUE(f.kvs().empty());
  EXPECT_TRUE(f.tensors().empty());
  // header only, no padding: still fine when there is no tensor data
  const GGUFFile f2 = GGUFFile::parse(bytes.data(), 24, "short");
  EXPECT_TRUE(f2.tensors().empty());
}

TEST(GGUFReader, GetterErrorsNameKeyAndType) {
  GGUFBuilder g(3);
  add_every_type(g);
  const auto bytes = g.build();
  const GGUFFile f = GGUFFile::parse(bytes.data(), bytes.size(), "getters.gguf");
  auto message = [](auto&& fn) -> std::string {
    try {
      fn();
    } catch (const Error& e) {
      return e.what();
    }
    return "(no error)";
  };
  std::string m = message([&] { f.get_uint("t.missing"); });
  EXPECT_CONTAINS(m, ("getters.gguf"));
  EXPECT_CONTAINS(m, ("missing key 't.missing'"));
  m = message([&] { f.get_uint("general.architecture"); });
  EXPECT_CONTAINS(m, ("'general.architecture' has type string"));
  m = message([&] { f.get_uint("t.i8"); });
  EXPECT_CONTAINS(m, ("'t.i8' is negative"));
  m = message([&] { f.get_uint("t.f32"); });
  EXPECT_CONTAINS(m, ("'t.f32' has type float32"));
  m = message([&] { f.get_uint("t.bool"); });
  EXPECT_CONTAINS(m, ("'t.bool' has type bool"));
  m = message([&] { f.get_uint_or("t.a_u8", 1); });
  EXPECT_CONTAINS(m, ("'t.a_u8' has type array of uint8"));
  m = message([&] { f.get_float("t.empty"); });
  EXPECT_CONTAINS(m, ("'t.empty' has type string"));
  m = message([&] { f.get_float_or("t.bool", 0); });
  EXPECT_CONTAINS(m, ("'t.bool' has type bool"));
  m = message([&] { f.get_str("t.u8"); });
  EXPECT_CONTAINS(m, ("'t.u8' has type uint8, expected string"));
  m = message([&] { f.get_str_or("t.u8", "x"); });
  EXPECT_CONTAINS(m, ("'t.u8' has type uint8"));
  m = message([&] { f.get_bool_or("t.u8", false); });
  EXPECT_CONTAINS(m, ("'t.u8' has type uint8, expected bool"));
  m = message([&] { f.get_array("t.u8"); });
  EXPECT_CONTAINS(m, ("'t.u8' has type uint8"));
  m = message([&] { f.get_str_array("t.a_i32"); });
  EXPECT_CONTAINS(m, ("'t.a_i32' has type array of int32"));
  m = message([&] { f.get_f32_array("t.a_str"); });
  EXPECT_CONTAINS(m, ("'t.a_str' has type array of string"));
  m = message([&] { f.get_f32_array("t.a_bool"); });
  EXPECT_CONTAINS(m, ("array of bool"));
  m = message([&] { f.get_i32_array("t.a_f32"); });
  EXPECT_CONTAINS(m, ("'t.a_f32' has type array of float32"));
  m = message([&] { f.get_i32_array("t.a_u32"); });
  EXPECT_CONTAINS(m, ("'t.a_u32' element 1 (4294967295) does not fit int32"));
  m = message([&] { f.get_i32_array("t.a_u64"); });
  EXPECT_CONTAINS(m, ("element 1 (18446744073709551615) does not fit int32"));
  m = message([&] { f.get_i32_array("t.a_nested"); });
  EXPECT_CONTAINS(m, ("array of array"));
}

TEST(GGUFReader, OpenMissingFileNamesPath) {
  try {
    GGUFFile::open("/nonexistent/dir/model.gguf");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_CONTAINS(e.what(), ("/nonexistent/dir/model.gguf"));
  }
}

// ---------------------------------------------------------------------------
// Corpus: tests/data/gguf-valid and tests/data/gguf-broken

std::vector<std::string> gguf_files(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".case") out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

TEST(GGUFCorpus, BrokenFilesGiveTheExpectedOneLineError) {
  const std::string dir = data_dir() + "/gguf-broken";
  std::ifstream manifest(dir + "/EXPECTED.txt");
  ASSERT_TRUE(manifest) << "missing " << dir
                        << "/EXPECTED.txt (run tests/data/make_broken_gguf.py)";
  std::vector<std::string> listed;
  for (std::string line; std::getline(manifest, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream in(line);
    std::string file;
    in >> file;
    listed.push_back(dir + "/" + file);
    SCOPED_TRACE(file);
    std::string msg;
    try {
      GGUFFile::open(dir + "/" + file);
      ADD_FAILURE() << file << " parsed without an error";
      continue;
    } catch (const Error& e) {
      msg = e.what();
    }
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    EXPECT_NE(msg.find(file), std::string::npos) << "message does not name the file: " << msg;
    for (std::string word; in >> word;)
      EXPECT_NE(lower(msg).find(lower(word)), std::string::npos)
          << "expected '" << word << "' in: " << msg;
  }
  std::sort(listed.begin(), listed.end());
  EXPECT_EQ(listed, gguf_files(dir)) << "EXPECTED.txt and the .case files disagree";
  EXPECT_GE(listed.size(), 30u);
}

TEST(GGUFCorpus, ValidFilesParseAndMatchPythonGGUFReader) {
  const auto files = gguf_files(data_dir() + "/gguf-valid");
  ASSERT_GE(files.size(), 4u);
  const bool py = python_gguf_available();
  for (const std::string& path : files) {
    SCOPED_TRACE(path);
    const GGUFFile f = GGUFFile::open(path);
    EXPECT_GE(f.version(), 2u);
    if (py) expect_same_dump(dump(f), python_dump(path), path);
  }
  if (!py) GTEST_SKIP() << "parsed; python3 with the gguf package not found for the cross-check";
}

// Every strict prefix of a file with tensor data must fail cleanly, every
// single-byte change must parse or fail cleanly (never crash: ASan/UBSan
// builds and the fuzzer make the "cleanly" strict).
TEST(GGUFCorpus, TruncationsAndByteFlipsFailCleanly) {
  std::vector<std::vector<uint8_t>> seeds;
  for (const std::string& path : gguf_files(data_dir() + "/gguf-valid"))
    seeds.push_back(read_bytes(path));
  seeds.push_back(every_type_file(2, 64).build());
  size_t parsed = 0, failed = 0;
  for (const auto& seed : seeds) {
    bool has_data = false;
    try {
      const GGUFFile f = GGUFFile::parse(seed.data(), seed.size());
      for (const auto& t : f.tensors()) has_data |= t.nbytes > 0;
    } catch (const Error& e) {
      FAIL() << "seed does not parse: " << e.what();
    }
    for (size_t n = 0; n < seed.size(); ++n) {
      std::vector<uint8_t> cut(seed.begin(), seed.begin() + ptrdiff_t(n));  // exact size for ASan
      if (has_data) {
        const std::string m = parse_error(cut, "cut");
        EXPECT_EQ(m.find('\n'), std::string::npos);
      } else {
        try {
          GGUFFile::parse(cut.data(), cut.size());
        } catch (const Error&) {
        }
      }
    }
    for (size_t i = 0; i < seed.size(); ++i) {
      for (uint8_t x : {uint8_t(0x01), uint8_t(0x80), uint8_t(0xff)}) {
        std::vector<uint8_t> m = seed;
        m[i] ^= x;
        try {
          const GGUFFile f = GGUFFile::parse(m.data(), m.size());
          for (const auto& [k, v] : f.kvs()) (void)v.count;
          ++parsed;
        } catch (const Error& e) {
          ++failed;
          EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
        }
      }
    }
  }
  EXPECT_GT(parsed, 0u);
  EXPECT_GT(failed, 0u);
}

TEST(GGUFCorpus, HugeCountsFailWithoutAllocating) {
  // Counts near 2^64 with a tiny buffer: must be rejected before any reserve.
  for (uint64_t count : {uint64_t(1) << 60, ~uint64_t(0), uint64_t(1) << 32}) {
    Bytes b;
    b.put<uint32_t>(0x46554747).put<uint32_t>(3).put<uint64_t>(0).put<uint64_t>(1);
    b.str("k").type(GGUFType::ARRAY).type(GGUFType::ARRAY).put<uint64_t>(count);
    const std::string m = parse_error(b.b, "huge");
    EXPECT_CONTAINS(m, ("array count"));
  }
}

// ---------------------------------------------------------------------------
// The real model

TEST(GGUFModel, Gemma3Header) {
  WEIR_REQUIRE_MODEL(path);
  const GGUFFile f = GGUFFile::open(path);  // the time it takes: microbench/text_bench.cpp
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.kvs().size(), 33u);
  EXPECT_EQ(f.tensors().size(), 236u);
  EXPECT_EQ(f.get_str("general.architecture"), "gemma3");
  EXPECT_EQ(f.get_uint("gemma3.block_count"), 18u);
  EXPECT_EQ(f.get_uint("gemma3.embedding_length"), 640u);
  EXPECT_NEAR(f.get_float("gemma3.attention.layer_norm_rms_epsilon"), 1e-6, 1e-12);
  const auto& tokens = f.get_str_array("tokenizer.ggml.tokens");
  ASSERT_EQ(tokens.size(), 262144u);
  EXPECT_EQ(tokens[0], "<pad>");
  EXPECT_EQ(tokens[1], "<eos>");
  EXPECT_EQ(tokens[2], "<bos>");
  EXPECT_EQ(tokens[3], "<unk>");
  EXPECT_EQ(f.get_f32_array("tokenizer.ggml.scores").size(), 262144u);
  EXPECT_EQ(f.get_i32_array("tokenizer.ggml.token_type").size(), 262144u);
  EXPECT_TRUE(f.get_bool_or("tokenizer.ggml.add_bos_token", false));
  const GGUFTensorInfo* emb = f.find_tensor("token_embd.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->dtype, DType::Q8_0);
  EXPECT_EQ(emb->n_dims, 2);
  EXPECT_EQ(emb->ne[0], 640);
  EXPECT_EQ(emb->ne[1], 262144);
  EXPECT_EQ(emb->nbytes, size_t(262144) * 640 / 32 * 34);
  for (const GGUFTensorInfo& t : f.tensors()) {
    EXPECT_EQ(t.offset % f.alignment(), 0u) << t.name;
    EXPECT_LE(f.data_offset() + t.offset + t.nbytes, f.size()) << t.name;
  }
}

TEST(GGUFModel, Gemma3MatchesPythonGGUFReaderDump) {
  WEIR_REQUIRE_MODEL(path);
  const std::string want = read_text(data_dir() + "/gguf-dump/gemma-3-270m-q4_k_m.txt");
  ASSERT_FALSE(want.empty()) << "missing tests/data/gguf-dump/gemma-3-270m-q4_k_m.txt";
  const GGUFFile f = GGUFFile::open(path);
  expect_same_dump(dump(f), want, "gemma-3-270m-q4_k_m.gguf vs gguf_dump.py");
}

}  // namespace
}  // namespace weir
