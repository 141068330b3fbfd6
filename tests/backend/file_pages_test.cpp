// Dropping a repacked weight's file pages (backend/cpu/file_pages.h): only
// read-only file mappings qualify, and their bytes read the same after.
#include "backend/cpu/file_pages.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

namespace weir::cpu {
namespace {

TEST(FilePages, AReadOnlyFileMappingIsDroppedAndReadsTheSame) {
  const size_t page = size_t(sysconf(_SC_PAGESIZE)), n = 16 * page;
  const std::string path = (std::filesystem::temp_directory_path() / "weir-file-pages-test.bin").string();
  std::vector<unsigned char> bytes(n);
  for (size_t i = 0; i < n; ++i) bytes[i] = static_cast<unsigned char>(i * 7 + 3);
  {
    FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(std::fwrite(bytes.data(), 1, n, f), n);
    std::fclose(f);
  }
  const int fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  void* m = ::mmap(nullptr, n, PROT_READ, MAP_SHARED, fd, 0);
  ASSERT_NE(m, MAP_FAILED);
  const auto* p = static_cast<const unsigned char*>(m);
  ASSERT_EQ(std::memcmp(p, bytes.data(), n), 0);  // faulted in
  EXPECT_TRUE(in_read_only_file_mapping(p + 10, n - 20));
  // Whole pages inside the range only.
  EXPECT_EQ(release_file_pages(p + 10, n - 20), n - 2 * page);
  EXPECT_EQ(std::memcmp(p, bytes.data(), n), 0);
  EXPECT_FALSE(in_read_only_file_mapping(p, n + page * 1024 * 1024));  // past the mapping's end
  ::munmap(m, n);
  ::close(fd);
  std::filesystem::remove(path);
}

TEST(FilePages, OtherMemoryIsLeftAlone) {
  const size_t page = size_t(sysconf(_SC_PAGESIZE)), n = 8 * page;
  void* a = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(a, MAP_FAILED);
  std::memset(a, 0x5A, n);
  EXPECT_FALSE(in_read_only_file_mapping(a, n));
  EXPECT_EQ(release_file_pages(a, n), 0u);
  const auto* p = static_cast<const unsigned char*>(a);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(p[i], 0x5A);
  ::munmap(a, n);
  std::vector<float> heap(100000, 1.5f);
  EXPECT_EQ(release_file_pages(heap.data(), heap.size() * sizeof(float)), 0u);
  EXPECT_EQ(heap[50000], 1.5f);
}

}  // namespace
}  // namespace weir::cpu
