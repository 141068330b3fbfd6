#include "core/warn.h"

#include <cstdio>
#include <mutex>
#include <utility>

namespace weir {
namespace {
std::mutex g_mutex;
std::function<void(const std::string&)> g_sink;
}  // namespace

void warn(const std::string& message) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_sink) return g_sink(message);
  std::fprintf(stderr, "weir: warning: %s\n", message.c_str());
}

std::function<void(const std::string&)> set_warning_sink(std::function<void(const std::string&)> sink) {
  std::lock_guard<std::mutex> lock(g_mutex);
  return std::exchange(g_sink, std::move(sink));
}

}  // namespace weir
