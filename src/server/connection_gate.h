// The door of weir serve: every accepted connection waits here, on one
// epoll thread, until its request head (request line and headers, up to
// the blank line) has arrived; only then does a worker thread take it, for
// one request. Between requests a kept-alive connection comes back here.
// So a worker is never held by a client that is slow to send its headers
// (slowloris) or that keeps a connection open doing nothing, and
// /health answers however many such connections there are.
//
// Limits:
// - a connection whose head has not come within header_timeout of its
//   opening (or of the previous response) is closed;
// - a head over max_header_bytes gets 431 and is closed;
// - at most max_connections are open; a new one over that closes the
//   connection that has waited longest for its head (the new one is
//   served);
// - `workers` requests are handled at once; ready ones wait their turn in
//   arrival order.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace weir::server {

using Clock = std::chrono::steady_clock;

// One client connection: its socket and the bytes read from it that no
// request has consumed yet.
struct Connection {
  explicit Connection(int fd) : fd(fd) {}
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  int fd = -1;
  std::string in;   // bytes read, from `used` on not yet consumed
  size_t used = 0;
  Clock::time_point opened, waiting_since;
  uint64_t requests = 0;  // served on it so far
  // The bytes of the whole request head at the front of the unconsumed
  // ones (blank line included), or 0 while it is incomplete.
  size_t head_bytes() const;
  // Drops consumed bytes (between requests).
  void compact();
};

struct GateOptions {
  int max_connections = 1000;
  int workers = 64;
  double header_timeout_s = 10.0;
  size_t max_header_bytes = 16 << 10;  // nginx's 4 x 8 KiB lines hold about as much
};

class ConnectionGate {
 public:
  // serve: handles one request on a worker thread; returns true to keep the
  // connection for another request.
  using Serve = std::function<bool(Connection&)>;
  ConnectionGate(GateOptions o, Serve serve);
  ~ConnectionGate();
  // An accepted socket (any thread); the gate owns it from now on.
  void add(int fd);
  // Closes the connections that wait; the requests being handled finish.
  void shutdown();

  struct Stats {
    size_t open = 0, waiting = 0, ready = 0, busy = 0;
    uint64_t accepted = 0, evicted = 0, header_timeouts = 0, too_large = 0;
  };
  Stats stats() const;

 private:
  void gate_loop();
  void worker_loop();
  void read_some(Connection& c);             // under m_: what the socket has now
  void to_ready(std::unique_ptr<Connection> c);  // under m_
  void watch(std::unique_ptr<Connection> c);     // under m_: back on epoll
  void evict_oldest();                           // under m_
  void close_waiting(int fd);                    // under m_

  GateOptions o_;
  Serve serve_;
  int epoll_fd_ = -1, wake_fd_ = -1;
  mutable std::mutex m_;
  std::condition_variable ready_cv_;
  std::unordered_map<int, std::unique_ptr<Connection>> waiting_;
  std::deque<std::unique_ptr<Connection>> ready_;
  size_t busy_ = 0;
  bool stopping_ = false;
  Stats counts_;
  std::thread gate_;
  std::vector<std::thread> workers_;
};

}  // namespace weir::server
