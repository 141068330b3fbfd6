#include "engine/rank_threads.h"

#include "core/collective.h"
#include "core/error.h"

namespace weir {

RankThreads::RankThreads(int n, std::function<void(const std::string&)> abort) : abort_(std::move(abort)) {
  for (int r = 1; r < n; ++r) workers_.push_back(std::make_unique<Worker>());
  for (int r = 1; r < n; ++r) {
    Worker& w = *workers_[size_t(r - 1)];
    try {
      w.thread = std::thread([this, r, &w] { loop(r, w); });
    } catch (const std::system_error& e) {
      for (auto& o : workers_) {
        {
          std::lock_guard<std::mutex> lk(o->m);
          o->quit = true;
        }
        o->cv.notify_all();
        if (o->thread.joinable()) o->thread.join();
      }
      throw ThreadStartError("tensor parallel: rank " + std::to_string(r) + " of " + std::to_string(n) +
                             " could not start a thread: " + e.what());
    }
  }
}

RankThreads::~RankThreads() {
  for (auto& w : workers_) {
    {
      std::lock_guard<std::mutex> lk(w->m);
      w->quit = true;
    }
    w->cv.notify_all();
    if (w->thread.joinable()) w->thread.join();
  }
}

std::exception_ptr RankThreads::guarded(int rank, const std::function<void(int)>& f) {
  try {
    f(rank);
    return nullptr;
  } catch (const CommError&) {
    return std::current_exception();  // caused by another rank's failure (or a timeout)
  } catch (const std::exception& e) {
    abort_("rank " + std::to_string(rank) + " failed: " + e.what());
    return std::current_exception();
  } catch (...) {
    abort_("rank " + std::to_string(rank) + " failed");
    return std::current_exception();
  }
}

void RankThreads::loop(int rank, Worker& w) {
  std::unique_lock<std::mutex> lk(w.m);
  for (;;) {
    w.cv.wait(lk, [&] { return w.quit || !w.done; });
    if (w.quit) return;
    const std::function<void(int)>* f = w.task;
    lk.unlock();
    std::exception_ptr e = guarded(rank, *f);
    lk.lock();
    w.error = e;
    w.done = true;
    w.cv.notify_all();
  }
}

void RankThreads::run(const std::function<void(int)>& f) {
  for (auto& w : workers_) {
    std::lock_guard<std::mutex> lk(w->m);
    w->task = &f;
    w->error = nullptr;
    w->done = false;
  }
  for (auto& w : workers_) w->cv.notify_all();
  std::exception_ptr first = guarded(0, f), comm;
  auto keep = [&](std::exception_ptr e) {
    if (!e) return;
    try {
      std::rethrow_exception(e);
    } catch (const CommError&) {
      if (!comm) comm = e;
    } catch (...) {
      if (!first) first = e;
    }
  };
  if (first) {  // rank 0's own: sort it like the others'
    std::exception_ptr e = first;
    first = nullptr;
    keep(e);
  }
  for (auto& w : workers_) {
    std::unique_lock<std::mutex> lk(w->m);
    w->cv.wait(lk, [&] { return w->done; });
    keep(w->error);
  }
  if (first) std::rethrow_exception(first);
  if (comm) std::rethrow_exception(comm);
}

}  // namespace weir
