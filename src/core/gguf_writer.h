// GGUF (v3) writer. Metadata and tensor infos are declared first; then the
// header is written and tensor data is streamed in declaration order, so a
// model far larger than memory can be written at disk speed.
//
//   GGUFWriter w;
//   w.set_str("general.architecture", "llama");
//   w.add_tensor("token_embd.weight", DType::Q4_K, {4096, 128256});
//   w.open("out.gguf");                  // header, kvs, tensor infos
//   w.write_tensor_data(p, n);           // once or in pieces per tensor, in order
//   w.close();                           // checks every byte was written
//
// The file is written as OUT.part and renamed by close(); a writer destroyed
// before close() (error, interrupt) removes the partial file.
#pragma once
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/gguf.h"

namespace weir {

class GGUFWriter {
 public:
  explicit GGUFWriter(uint64_t alignment = 32, uint32_t version = 3);
  ~GGUFWriter();
  GGUFWriter(const GGUFWriter&) = delete;
  GGUFWriter& operator=(const GGUFWriter&) = delete;

  // Metadata, kept in the order first set; setting a key again replaces its
  // value in place. general.alignment is written from the constructor's value.
  void set_u8(std::string_view key, uint8_t v);
  void set_i8(std::string_view key, int8_t v);
  void set_u16(std::string_view key, uint16_t v);
  void set_i16(std::string_view key, int16_t v);
  void set_u32(std::string_view key, uint32_t v);
  void set_i32(std::string_view key, int32_t v);
  void set_u64(std::string_view key, uint64_t v);
  void set_i64(std::string_view key, int64_t v);
  void set_f32(std::string_view key, float v);
  void set_f64(std::string_view key, double v);
  void set_bool(std::string_view key, bool v);
  void set_str(std::string_view key, std::string_view v);
  void set_str_array(std::string_view key, const std::vector<std::string>& v);
  void set_i32_array(std::string_view key, const std::vector<int32_t>& v);
  void set_f32_array(std::string_view key, const std::vector<float>& v);
  // Any value of a parsed file, arrays and nested arrays included.
  void set_value(std::string_view key, const GGUFValue& v);
  void remove(std::string_view key);
  bool has(std::string_view key) const;

  // Tensor infos, in file order; data offsets follow from the alignment.
  void add_tensor(std::string_view name, DType t, std::initializer_list<int64_t> ne);
  void add_tensor(std::string_view name, DType t, int n_dims, const int64_t* ne);  // n_dims 0..4
  size_t n_tensors() const;

  // Writes everything up to the data section. Throws weir::Error naming the
  // path on I/O errors.
  void open(const std::string& path);
  // Appends tensor data in declaration order: a tensor may come in several
  // pieces, and bytes beyond the current tensor continue into the next one;
  // padding between tensors is written automatically. Bytes past the last
  // tensor are an error.
  void write_tensor_data(const void* data, size_t nbytes);
  // Finishes the file; throws if some tensor data is missing.
  void close();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace weir
