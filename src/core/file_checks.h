// Checks on paths before weir reads or writes them, so that what a user
// names by mistake gets a one-line error naming the path, not a hang, a
// crash or a clobbered file.
#pragma once
#include <cstdint>
#include <string>

namespace weir {

// Whether a and b name the same existing file (same device and inode:
// hard links and symlinks included).
bool same_file(const std::string& a, const std::string& b);

// Throws Error naming `path` unless a file can be created there: it is not a
// directory (or another non-regular file) and its folder exists.
void check_output_path(const std::string& path);

// Throws Error naming `path` when its file system has fewer than `bytes`
// bytes free for it (a file that cannot fit is refused before it is begun).
void check_free_space(const std::string& path, uint64_t bytes);

// Throws Error unless `out` (and OUT.part, where it is written first) is a
// different file from `in`: an input is never overwritten by its output.
void check_not_input(const std::string& in, const std::string& out);

}  // namespace weir
