#include "server/connection_stream.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

namespace weir::server {

namespace {

// poll() one socket for `events` up to `ms` milliseconds; the revents (0: timed out).
short poll_one(int fd, short events, int ms) {
  pollfd p{fd, events, 0};
  for (;;) {
    const int n = ::poll(&p, 1, ms);
    if (n >= 0) return n == 0 ? 0 : p.revents;
    if (errno != EINTR) return POLLERR;
  }
}

void address_of(int fd, bool peer, std::string& ip, int& port) {
  sockaddr_storage a{};
  socklen_t n = sizeof a;
  const int rc = peer ? getpeername(fd, reinterpret_cast<sockaddr*>(&a), &n) : getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n);
  if (rc != 0) return;
  char buf[INET6_ADDRSTRLEN] = {};
  if (a.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&a);
    inet_ntop(AF_INET, &v4->sin_addr, buf, sizeof buf);
    port = ntohs(v4->sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&a);
    inet_ntop(AF_INET6, &v6->sin6_addr, buf, sizeof buf);
    port = ntohs(v6->sin6_port);
  }
  ip = buf;
}

}  // namespace

bool ConnectionStream::wait_readable() const {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now()).count();
    if (left <= 0) return false;
    const short r = poll_one(c_.fd, POLLIN, int(std::min<long long>(left, 1000)));
    if (r != 0) return true;  // data, EOF or an error: read() tells which
  }
}

bool ConnectionStream::is_readable() const { return c_.used < c_.in.size() || wait_readable(); }

bool ConnectionStream::is_writable() const {
  const short r = poll_one(c_.fd, POLLOUT, int(write_timeout_.count()));
  return (r & POLLOUT) && !(r & (POLLERR | POLLHUP));
}

ssize_t ConnectionStream::read(char* ptr, size_t size) {
  if (c_.used == c_.in.size()) {
    c_.in.clear();
    c_.used = 0;
    for (;;) {
      if (!wait_readable()) return -1;
      char buf[16 << 10];
      const ssize_t n = ::recv(c_.fd, buf, sizeof buf, MSG_DONTWAIT);
      if (n > 0) {
        c_.in.append(buf, size_t(n));
        break;
      }
      if (n == 0) return 0;
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return -1;
    }
  }
  const size_t n = std::min(size, c_.in.size() - c_.used);
  std::memcpy(ptr, c_.in.data() + c_.used, n);
  c_.used += n;
  return ssize_t(n);
}

ssize_t ConnectionStream::write(const char* ptr, size_t size) {
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::send(c_.fd, ptr + done, size - done, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      done += size_t(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return -1;
    const short r = poll_one(c_.fd, POLLOUT, int(write_timeout_.count()));
    if (!(r & POLLOUT) || (r & (POLLERR | POLLHUP))) return -1;  // the client reads no more
  }
  return ssize_t(size);
}

void ConnectionStream::get_remote_ip_and_port(std::string& ip, int& port) const { address_of(c_.fd, true, ip, port); }
void ConnectionStream::get_local_ip_and_port(std::string& ip, int& port) const { address_of(c_.fd, false, ip, port); }

bool ConnectionStream::peer_closed() const {
  const short r = poll_one(c_.fd, POLLIN | POLLRDHUP, 0);
  if (r & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return true;
  if (!(r & POLLIN)) return false;
  char b;
  const ssize_t n = ::recv(c_.fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

}  // namespace weir::server
