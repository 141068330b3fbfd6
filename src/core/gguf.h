// GGUF (v2, v3) reader. Parses a whole file held in memory (normally a
// MappedFile) and validates every count, length and offset against the
// buffer, so a broken file gives a one-line weir::Error naming the problem
// and the byte offset or key, never a crash or an out-of-bounds read.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/dtype.h"

namespace weir {

class MappedFile;

enum class GGUFType : uint32_t {
  UINT8 = 0,
  INT8 = 1,
  UINT16 = 2,
  INT16 = 3,
  UINT32 = 4,
  INT32 = 5,
  FLOAT32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  UINT64 = 10,
  INT64 = 11,
  FLOAT64 = 12,
};
const char* gguf_type_name(GGUFType t);
// Bytes of one scalar of type t; 0 for STRING, ARRAY and unknown types.
size_t gguf_scalar_size(GGUFType t);

// A metadata value. Strings and array payloads point into the file buffer.
struct GGUFValue {
  GGUFType type = GGUFType::UINT8;
  union {
    uint64_t u;  // UINT8..UINT64, BOOL
    int64_t i;   // INT8..INT64
    double f;    // FLOAT32, FLOAT64
  } num{0};
  std::string_view str;  // STRING

  // ARRAY
  GGUFType elem_type = GGUFType::UINT8;
  uint64_t count = 0;
  const uint8_t* raw = nullptr;           // packed little-endian scalars
  std::vector<std::string_view> strings;  // elem_type == STRING
  std::vector<GGUFValue> items;           // elem_type == ARRAY (nested)

  bool is_integer() const;
  bool is_float() const { return type == GGUFType::FLOAT32 || type == GGUFType::FLOAT64; }
  // Element i of a scalar array, converted (no bounds check beyond count).
  double array_f64(uint64_t i) const;
  int64_t array_i64(uint64_t i) const;
};

struct GGUFTensorInfo {
  std::string_view name;
  int n_dims = 0;
  int64_t ne[4] = {1, 1, 1, 1};  // ne[0] is the contiguous dimension
  DType dtype = DType::F32;
  uint64_t offset = 0;           // from the start of the data section
  size_t nbytes = 0;
  const uint8_t* data = nullptr;  // into the file buffer
  int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
};

class GGUFFile {
 public:
  // Maps and parses a file.
  static GGUFFile open(const std::string& path);
  // Parses a buffer that must outlive the returned object (fuzzing, tests).
  static GGUFFile parse(const uint8_t* data, size_t size, std::string name = "<memory>");

  const std::string& name() const { return name_; }
  // The file's mapping (null when parsing a borrowed buffer).
  MappedFile* mapping() const { return map_.get(); }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  size_t size() const { return size_; }
  const uint8_t* base() const { return base_; }

  // Metadata in file order.
  const std::vector<std::pair<std::string_view, GGUFValue>>& kvs() const { return kvs_; }
  const GGUFValue* find(std::string_view key) const;

  // Typed getters. The plain forms throw weir::Error naming the key when it is
  // missing or has an incompatible type; the _or forms return def if missing.
  uint64_t get_uint(std::string_view key) const;
  uint64_t get_uint_or(std::string_view key, uint64_t def) const;
  double get_float(std::string_view key) const;
  double get_float_or(std::string_view key, double def) const;
  bool get_bool_or(std::string_view key, bool def) const;
  std::string_view get_str(std::string_view key) const;
  std::string_view get_str_or(std::string_view key, std::string_view def) const;
  // Arrays: the value must be an ARRAY of the right element kind.
  const GGUFValue& get_array(std::string_view key) const;
  const std::vector<std::string_view>& get_str_array(std::string_view key) const;
  std::vector<float> get_f32_array(std::string_view key) const;    // any numeric elements
  std::vector<int32_t> get_i32_array(std::string_view key) const;  // integer elements

  const std::vector<GGUFTensorInfo>& tensors() const { return tensors_; }
  const GGUFTensorInfo* find_tensor(std::string_view name) const;

 private:
  std::shared_ptr<MappedFile> map_;  // null when parsing a borrowed buffer
  std::string name_;
  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string_view, GGUFValue>> kvs_;
  std::unordered_map<std::string_view, size_t> kv_index_;
  std::vector<GGUFTensorInfo> tensors_;
  std::unordered_map<std::string_view, size_t> tensor_index_;

  friend class GGUFParser;
};

}  // namespace weir
