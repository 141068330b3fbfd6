// Files being written that must not outlive the process unfinished
// (GGUFWriter's OUT.part). Writers remove their own partial file on every
// path they control (errors, exceptions, a stop flag); this list is for the
// paths they do not: a fatal signal arrives while a write is under way and
// the process is about to die. remove_partial_files() is async-signal-safe.
#pragma once
#include <string>

namespace weir {

// Registers a path; returns a slot for forget_partial_file(), or -1 when the
// list is full (the path is then only removed by its writer).
int track_partial_file(const std::string& path);
void forget_partial_file(int slot);
// Unlinks every tracked path. Safe in a signal handler.
void remove_partial_files() noexcept;

}  // namespace weir
