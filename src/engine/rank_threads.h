// The ranks of a tensor-parallel group that live in this process: rank 0
// on the caller's thread, each other rank on a thread of its own, all
// running the same call at once (their collectives meet in the middle).
// When a rank fails, the group's collectives are aborted at once, so no
// rank waits for ever on one that will not come; the call then throws the
// failure (not the CommErrors it caused in the others).
#pragma once
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace weir {

class RankThreads {
 public:
  // n ranks (n - 1 threads); abort(why) stops the group's collectives.
  RankThreads(int n, std::function<void(const std::string&)> abort);
  ~RankThreads();
  RankThreads(const RankThreads&) = delete;
  RankThreads& operator=(const RankThreads&) = delete;

  int size() const { return int(workers_.size()) + 1; }
  // Runs f(r) for every rank r, rank 0 here; returns when all are done.
  void run(const std::function<void(int)>& f);

 private:
  struct Worker {
    std::thread thread;
    std::mutex m;
    std::condition_variable cv;
    const std::function<void(int)>* task = nullptr;
    bool done = true, quit = false;
    std::exception_ptr error;
  };
  void loop(int rank, Worker& w);
  std::exception_ptr guarded(int rank, const std::function<void(int)>& f);
  std::vector<std::unique_ptr<Worker>> workers_;
  std::function<void(const std::string&)> abort_;
};

}  // namespace weir
