#include "core/thread_group.h"

#include <atomic>
#include <string>
#include <system_error>

#include "core/error.h"

namespace weir {
namespace {
std::atomic<int> g_fail_after{-1};
}  // namespace

void ThreadGroup::fail_after_for_testing(int n) { g_fail_after.store(n); }

void ThreadGroup::start(int n, int first, const std::function<void(int)>& body, const std::function<void()>& stop) {
  const int fail_after = g_fail_after.exchange(-1);
  const size_t before = threads_.size();
  std::string why;
  try {
    threads_.reserve(before + size_t(n > 0 ? n : 0));
    for (int i = 0; i < n; ++i) {
      if (i == fail_after) throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again));
      threads_.emplace_back(body, first + i);
    }
    return;
  } catch (const std::system_error& e) {
    why = e.code().message();
  } catch (const std::bad_alloc&) {
    why = "out of memory";
  }
  const size_t started = threads_.size() - before;
  if (stop) stop();
  join();
  throw ThreadStartError("cannot start " + std::to_string(n) + " threads (the system refused thread " +
                         std::to_string(started + 1) + ": " + why + ")");
}

void ThreadGroup::join() {
  for (std::thread& t : threads_)
    if (t.joinable()) t.join();
  threads_.clear();
}

}  // namespace weir
