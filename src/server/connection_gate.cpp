#include "server/connection_gate.h"

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace weir::server {

Connection::~Connection() {
  if (fd >= 0) {
    ::shutdown(fd, SHUT_RDWR);
    ::close(fd);
  }
}

size_t Connection::head_bytes() const {
  // A request head ends at its first blank line; blank lines before a
  // request line are allowed (RFC 9112 2.2), so skip leading CRLFs.
  size_t from = used;
  while (from < in.size() && (in[from] == '\r' || in[from] == '\n')) ++from;
  const size_t crlf = in.find("\r\n\r\n", from), lf = in.find("\n\n", from);
  const size_t end = std::min(crlf == std::string::npos ? crlf : crlf + 4, lf == std::string::npos ? lf : lf + 2);
  return end == std::string::npos ? 0 : end - used;
}

void Connection::compact() {
  in.erase(0, used);
  used = 0;
  if (in.capacity() > (64 << 10) && in.size() < (4 << 10)) in.shrink_to_fit();  // a big body's buffer goes
}

ConnectionGate::ConnectionGate(GateOptions o, Serve serve) : o_(o), serve_(std::move(serve)) {
  o_.max_connections = std::max(1, o_.max_connections);
  o_.workers = std::max(1, o_.workers);
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (epoll_fd_ < 0 || wake_fd_ < 0) throw Error(std::string("serve: cannot make an epoll set: ") + std::strerror(errno));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = wake_fd_;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
  gate_ = std::thread([this] { gate_loop(); });
  for (int i = 0; i < o_.workers; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ConnectionGate::~ConnectionGate() {
  shutdown();
  if (epoll_fd_ >= 0) ::close(epoll_fd_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

void ConnectionGate::add(int fd) {
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  auto c = std::make_unique<Connection>(fd);
  c->opened = c->waiting_since = Clock::now();
  std::lock_guard<std::mutex> lk(m_);
  if (stopping_) return;  // closed by c's destructor
  ++counts_.accepted;
  if (waiting_.size() + ready_.size() + busy_ >= size_t(o_.max_connections)) {
    if (waiting_.empty()) return;  // every open one has a request in: this one is refused
    evict_oldest();
  }
  watch(std::move(c));
}

void ConnectionGate::watch(std::unique_ptr<Connection> c) {
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.fd = c->fd;
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, c->fd, &ev) != 0) return;  // closed
  const int fd = c->fd;
  waiting_[fd] = std::move(c);
}

void ConnectionGate::evict_oldest() {
  auto oldest = std::min_element(waiting_.begin(), waiting_.end(), [](const auto& a, const auto& b) {
    return a.second->waiting_since < b.second->waiting_since;
  });
  ++counts_.evicted;
  close_waiting(oldest->first);
}

void ConnectionGate::close_waiting(int fd) {
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  waiting_.erase(fd);
}

void ConnectionGate::to_ready(std::unique_ptr<Connection> c) {
  ready_.push_back(std::move(c));
  ready_cv_.notify_one();
}

namespace {

// Reads what the socket holds now, up to `cap` bytes unconsumed. False: the
// peer closed or the socket failed.
bool read_available(Connection& c, size_t cap) {
  char buf[16 << 10];
  while (c.in.size() - c.used <= cap) {
    const size_t room = std::min(sizeof buf, cap + 1 - (c.in.size() - c.used));  // one byte past the cap tells "over"
    const ssize_t n = ::recv(c.fd, buf, room, MSG_DONTWAIT);
    if (n > 0) {
      c.in.append(buf, size_t(n));
      continue;
    }
    if (n == 0) return false;
    if (errno == EINTR) continue;
    return errno == EAGAIN || errno == EWOULDBLOCK;
  }
  return true;
}

// A last answer to a connection about to be closed (best effort: the
// socket's buffer takes it or it is lost).
void answer_and_forget(int fd, const char* status, const char* message) {
  const std::string body = std::string("{\"error\":{\"message\":\"") + message +
                           "\",\"type\":\"invalid_request_error\",\"param\":null,\"code\":null}}";
  const std::string text = std::string("HTTP/1.1 ") + status + "\r\nContent-Type: application/json\r\nConnection: close\r\n" +
                           "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  (void)!::send(fd, text.data(), text.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
}

}  // namespace

void ConnectionGate::gate_loop() {
  epoll_event events[64];
  auto last_sweep = Clock::now();
  for (;;) {
    const int n = epoll_wait(epoll_fd_, events, 64, 200);
    std::lock_guard<std::mutex> lk(m_);
    if (stopping_) return;
    for (int k = 0; k < n; ++k) {
      const int fd = events[k].data.fd;
      if (fd == wake_fd_) {
        uint64_t v;
        (void)!::read(wake_fd_, &v, sizeof v);
        continue;
      }
      auto it = waiting_.find(fd);
      if (it == waiting_.end()) continue;
      Connection& c = *it->second;
      const bool open = read_available(c, o_.max_header_bytes);
      const size_t head = c.head_bytes();
      if (head > 0 && head <= o_.max_header_bytes) {
        std::unique_ptr<Connection> mine = std::move(it->second);
        epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
        waiting_.erase(it);
        to_ready(std::move(mine));
      } else if (head > o_.max_header_bytes || c.in.size() - c.used > o_.max_header_bytes) {
        ++counts_.too_large;
        answer_and_forget(fd, "431 Request Header Fields Too Large", "the request head is over the server's limit");
        close_waiting(fd);
      } else if (!open) {
        close_waiting(fd);
      }
    }
    const auto now = Clock::now();
    if (now - last_sweep < std::chrono::milliseconds(100)) continue;
    last_sweep = now;
    const auto limit = std::chrono::duration<double>(o_.header_timeout_s);
    std::vector<int> late;
    for (const auto& [fd, c] : waiting_)
      if (now - c->waiting_since > limit) late.push_back(fd);
    for (int fd : late) {
      // A kept-alive connection with nothing sent is just idle: closed
      // without a word. One that began a request is told why.
      Connection& c = *waiting_[fd];
      if (c.in.size() > c.used) {
        ++counts_.header_timeouts;
        answer_and_forget(fd, "408 Request Timeout", "the request head did not arrive in time (the server's header timeout)");
      }
      close_waiting(fd);
    }
  }
}

void ConnectionGate::worker_loop() {
  for (;;) {
    std::unique_ptr<Connection> c;
    {
      std::unique_lock<std::mutex> lk(m_);
      ready_cv_.wait(lk, [&] { return stopping_ || !ready_.empty(); });
      if (ready_.empty()) return;  // stopping
      c = std::move(ready_.front());
      ready_.pop_front();
      ++busy_;
    }
    bool keep = false;
    try {
      keep = serve_(*c);
    } catch (...) {
      keep = false;
    }
    ++c->requests;
    std::lock_guard<std::mutex> lk(m_);
    --busy_;
    if (!keep || stopping_) continue;  // closed by c's destructor
    c->compact();
    c->waiting_since = Clock::now();
    const size_t head = c->head_bytes();
    if (head > 0 && head <= o_.max_header_bytes) to_ready(std::move(c));
    else watch(std::move(c));
  }
}

void ConnectionGate::shutdown() {
  {
    std::lock_guard<std::mutex> lk(m_);
    if (stopping_ && !gate_.joinable()) return;
    stopping_ = true;
    for (auto& [fd, c] : waiting_) epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
    waiting_.clear();
    ready_.clear();
  }
  ready_cv_.notify_all();
  const uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof one);
  if (gate_.joinable()) gate_.join();
  for (auto& w : workers_)
    if (w.joinable()) w.join();
}

ConnectionGate::Stats ConnectionGate::stats() const {
  std::lock_guard<std::mutex> lk(m_);
  Stats s = counts_;
  s.waiting = waiting_.size();
  s.ready = ready_.size();
  s.busy = busy_;
  s.open = s.waiting + s.ready + s.busy;
  return s;
}

}  // namespace weir::server
