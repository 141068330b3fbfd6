// The connection gate against misbehaving clients, with a trivial request
// handler (it answers the request line's path): slowloris and idle
// connections hold no worker, so a request on a fresh connection is served
// at once; heads that come too slowly or too large are closed with 408 /
// 431; over the connection cap the oldest waiting one goes; kept-alive and
// pipelined requests are served in order.
#include "server/connection_gate.h"

#include <gtest/gtest.h>
#include <sys/socket.h>

#include <atomic>
#include <thread>
#include <vector>

#include "server/raw_http.h"

namespace weir::server {
namespace {

using test::connect_local;
using test::read_response;
using test::send_all;

// A gate behind a listening socket on a free port.
struct Door {
  int listen_fd = -1, port = 0;
  std::unique_ptr<ConnectionGate> gate;
  std::thread acceptor;
  std::atomic<bool> stop{false};

  explicit Door(GateOptions o) {
    listen_fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(listen_fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    socklen_t n = sizeof a;
    ::getsockname(listen_fd, reinterpret_cast<sockaddr*>(&a), &n);
    port = ntohs(a.sin_port);
    ::listen(listen_fd, 1024);
    gate = std::make_unique<ConnectionGate>(o, [](Connection& c) {
      // The head is whole here: answer its path and consume it.
      const size_t head = c.head_bytes();
      const std::string line = c.in.substr(c.used, c.in.find("\r\n", c.used) - c.used);
      c.used += head;
      const std::string path = line.substr(line.find(' ') + 1, line.rfind(' ') - line.find(' ') - 1);
      const std::string out = "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(path.size()) + "\r\n\r\n" + path;
      return send_all(c.fd, out);
    });
    acceptor = std::thread([this] {
      while (!stop) {
        pollfd p{listen_fd, POLLIN, 0};
        if (::poll(&p, 1, 50) <= 0) continue;
        const int fd = ::accept(listen_fd, nullptr, nullptr);
        if (fd >= 0) gate->add(fd);
      }
    });
  }
  ~Door() {
    stop = true;
    acceptor.join();
    gate->shutdown();
    ::close(listen_fd);
  }
  // A GET on a fresh connection; seconds it took, or -1 without a 200.
  double timed_get(const std::string& path) const {
    const auto t0 = Clock::now();
    const test::RawResponse r = test::http_exchange(port, "GET " + path + " HTTP/1.1\r\nHost: x\r\n\r\n", 10);
    if (r.status != 200 || r.body != path) return -1;
    return std::chrono::duration<double>(Clock::now() - t0).count();
  }
};

bool closed_by_peer(int fd, double seconds) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, int(seconds * 1000)) <= 0) return false;
  char b[256];
  for (;;) {
    const ssize_t n = ::recv(fd, b, sizeof b, MSG_DONTWAIT);
    if (n == 0) return true;
    if (n < 0) return errno != EAGAIN;
  }
}

TEST(ConnectionGate, SlowAndIdleConnectionsHoldNoWorker) {
  GateOptions o;
  o.workers = 4;
  o.max_connections = 2000;
  o.header_timeout_s = 30;
  Door d(o);
  std::vector<int> idle, slow;
  for (int i = 0; i < 500; ++i) idle.push_back(connect_local(d.port));
  for (int i = 0; i < 100; ++i) {
    slow.push_back(connect_local(d.port));
    send_all(slow.back(), "GET /slow HTTP/1.1\r\n");
  }
  double worst = 0;
  for (int round = 0; round < 10; ++round) {
    for (int fd : slow) send_all(fd, "X-Drip: " + std::to_string(round) + "\r\n");  // a header line, never the end
    const double t = d.timed_get("/health");
    ASSERT_GE(t, 0) << "round " << round << ": no answer";
    worst = std::max(worst, t);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_LT(worst, 1.0) << "a request waited behind 600 slow or idle connections";
  const ConnectionGate::Stats s = d.gate->stats();
  EXPECT_EQ(s.waiting, 600u);
  for (int fd : idle) ::close(fd);
  for (int fd : slow) ::close(fd);
}

TEST(ConnectionGate, SlowHeadsAreClosedWith408AndIdleOnesQuietly) {
  GateOptions o;
  o.header_timeout_s = 0.5;
  Door d(o);
  const int slow = connect_local(d.port), idle = connect_local(d.port);
  send_all(slow, "POST /v1/completions HTTP/1.1\r\nHost: x\r\n");
  const test::RawResponse r = read_response(slow, 5);
  EXPECT_EQ(r.status, 408);
  EXPECT_NE(r.body.find("\"error\""), std::string::npos) << r.body;
  EXPECT_TRUE(closed_by_peer(idle, 5));
  EXPECT_EQ(d.gate->stats().header_timeouts, 1u);
  EXPECT_EQ(d.gate->stats().open, 0u);
  ::close(slow);
  ::close(idle);
}

TEST(ConnectionGate, OverTheCapTheOldestWaitingOneGoes) {
  GateOptions o;
  o.max_connections = 10;
  Door d(o);
  std::vector<int> fds;
  for (int i = 0; i < 10; ++i) {
    fds.push_back(connect_local(d.port));
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // in this order
  }
  for (int i = 0; i < 100 && d.gate->stats().open < 10; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_GE(d.timed_get("/new"), 0) << "the new connection was not served";
  EXPECT_TRUE(closed_by_peer(fds[0], 2)) << "the oldest idle connection is still open";
  EXPECT_EQ(d.gate->stats().evicted, 1u);
  for (int fd : fds) ::close(fd);
}

TEST(ConnectionGate, HeadOverTheLimitGets431) {
  GateOptions o;
  o.max_header_bytes = 4096;
  Door d(o);
  const int fd = connect_local(d.port);
  send_all(fd, "GET / HTTP/1.1\r\nX-Big: " + std::string(8192, 'a'));
  const test::RawResponse r = read_response(fd, 5);
  EXPECT_EQ(r.status, 431);
  EXPECT_TRUE(r.closed || closed_by_peer(fd, 2));
  ::close(fd);
}

// Everything that comes on fd within `seconds` (or until it closes).
std::string read_for(int fd, double seconds) {
  std::string in;
  const auto end = Clock::now() + std::chrono::milliseconds(int64_t(seconds * 1000));
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now()).count();
    pollfd p{fd, POLLIN, 0};
    if (left <= 0 || ::poll(&p, 1, int(left)) <= 0) return in;
    char b[4096];
    const ssize_t n = ::recv(fd, b, sizeof b, 0);
    if (n <= 0) return in;
    in.append(b, size_t(n));
  }
}

TEST(ConnectionGate, KeptAliveAndPipelinedRequestsAreServedInOrder) {
  Door d(GateOptions{});
  const int fd = connect_local(d.port);
  send_all(fd, "GET /one HTTP/1.1\r\nHost: x\r\n\r\nGET /two HTTP/1.1\r\nHost: x\r\n\r\n");
  const std::string both = read_for(fd, 1.0);
  const size_t one = both.find("\r\n\r\n/one"), two = both.find("\r\n\r\n/two");
  EXPECT_NE(one, std::string::npos) << both;
  EXPECT_NE(two, std::string::npos) << both;
  EXPECT_LT(one, two);
  send_all(fd, "GET /three HTTP/1.1\r\nHost: x\r\n\r\n");  // after a pause: back from the gate
  EXPECT_EQ(read_response(fd, 5).body, "/three");
  ::close(fd);
}

}  // namespace
}  // namespace weir::server
