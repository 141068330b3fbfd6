// A read-only memory map of a whole file. Weights are used in place from it,
// so the model's memory is the page cache's, shared and never copied.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace weir {

class MappedFile {
 public:
  // Throws weir::Error naming the path when it cannot be opened or mapped.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

  // --no-mmap: the mapping becomes private, anonymous, writable memory at
  // the same addresses (every pointer into it stays valid), zero until the
  // caller reads the file's bytes into it (model/loader.h reads the parts
  // the CPU uses). Asks for transparent huge pages. Nothing may read the
  // mapping between this call and those reads. Throws Error on failure.
  uint8_t* to_private_memory();
  bool is_private_memory() const { return private_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  bool private_ = false;
};

}  // namespace weir
