#include "core/file_checks.h"

#include <sys/stat.h>
#include <sys/statvfs.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace weir {

bool same_file(const std::string& a, const std::string& b) {
  struct stat sa {}, sb {};
  if (::stat(a.c_str(), &sa) != 0 || ::stat(b.c_str(), &sb) != 0) return false;
  return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

void check_output_path(const std::string& path) {
  if (path.empty()) throw Error("no output path given");
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) throw Error(path + ": is a directory; give a file name to write");
    if (!S_ISREG(st.st_mode)) throw Error(path + ": is not a regular file; give a file name to write");
  }
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (dir.empty()) dir = ".";
  if (::stat(dir.c_str(), &st) != 0)
    throw Error(path + ": cannot write there: " + dir.string() + ": " + std::strerror(errno));
  if (!S_ISDIR(st.st_mode)) throw Error(path + ": cannot write there: " + dir.string() + " is not a directory");
}

void check_free_space(const std::string& path, uint64_t bytes) {
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (dir.empty()) dir = ".";
  struct statvfs fs {};
  if (::statvfs(dir.c_str(), &fs) != 0) return;  // unknown: the writes will tell
  const uint64_t avail = uint64_t(fs.f_bavail) * uint64_t(fs.f_frsize);
  if (avail < bytes) {
    char msg[160];
    std::snprintf(msg, sizeof msg, ": needs %.3f GB but its file system has %.3f GB free", double(bytes) / 1e9,
                  double(avail) / 1e9);
    throw Error(path + msg);
  }
}

void check_not_input(const std::string& in, const std::string& out) {
  if (same_file(in, out) || same_file(in, out + ".part"))
    throw Error(out + ": is the input file " + in + "; write to another path");
}

}  // namespace weir
