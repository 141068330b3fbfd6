// HTTP over plain sockets, for tests that play a misbehaving client: a
// connection that sends part of a head and waits, a body sent chunked, a
// client that leaves. A response is read whole (Content-Length or close).
#pragma once
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>

namespace weir::test {

// A connected socket to 127.0.0.1:port, or -1.
inline int connect_local(int port) {
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  if (s < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(uint16_t(port));
  if (::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(s);
    return -1;
  }
  return s;
}

inline bool send_all(int fd, const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    const ssize_t n = ::send(fd, s.data() + done, s.size() - done, MSG_NOSIGNAL);
    if (n <= 0) return false;
    done += size_t(n);
  }
  return true;
}

struct RawResponse {
  int status = 0;  // 0: none came (closed or timed out)
  std::string head, body;
  bool closed = false;  // the server closed the connection
  std::string header(const std::string& name) const {
    std::string lower_head = head, key = "\r\n" + name + ":";
    for (char& c : lower_head) c = char(std::tolower(static_cast<unsigned char>(c)));
    for (char& c : key) c = char(std::tolower(static_cast<unsigned char>(c)));
    const size_t p = lower_head.find(key);
    if (p == std::string::npos) return "";
    size_t b = p + key.size();
    while (b < head.size() && head[b] == ' ') ++b;
    return head.substr(b, head.find("\r\n", b) - b);
  }
};

// Reads one response (head, then Content-Length bytes or until close),
// waiting up to `seconds` in all.
inline RawResponse read_response(int fd, double seconds) {
  using Clock = std::chrono::steady_clock;
  const auto end = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  RawResponse r;
  std::string in;
  bool have_head = false;
  size_t need = std::string::npos;  // bytes of the whole response (npos: until close)
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now()).count();
    if (left <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, int(left)) <= 0) break;
    char buf[65536];
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) {
      r.closed = true;
      break;
    }
    in.append(buf, size_t(n));
    if (!have_head) {
      const size_t h = in.find("\r\n\r\n");
      if (h == std::string::npos) continue;
      have_head = true;
      r.head = in.substr(0, h);
      r.status = std::atoi(r.head.c_str() + r.head.find(' ') + 1);
      const std::string len = r.header("Content-Length");
      if (!len.empty()) need = h + 4 + std::stoul(len);
    }
    if (in.size() >= need) break;
  }
  if (!r.head.empty()) r.body = in.substr(r.head.size() + 4);
  return r;
}

// A whole request: method, path, JSON body (Content-Length).
inline std::string json_request(const std::string& method, const std::string& path, const std::string& body,
                                const std::string& content_type = "application/json") {
  return method + " " + path + " HTTP/1.1\r\nHost: localhost\r\nContent-Type: " + content_type +
         "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

// One request on a new connection; its response.
inline RawResponse http_exchange(int port, const std::string& request, double seconds = 30) {
  const int fd = connect_local(port);
  if (fd < 0) return {};
  RawResponse r;
  if (send_all(fd, request)) r = read_response(fd, seconds);
  ::close(fd);
  return r;
}

}  // namespace weir::test
