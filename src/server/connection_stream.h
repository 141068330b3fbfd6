// cpp-httplib's Stream over a Connection of the gate: reads take the bytes
// the gate has buffered first, then the socket, and fail once the
// request's deadline has passed (a body that trickles in holds a worker no
// longer than that); bytes read past the request stay in the connection
// for the next one. Writes wait at most write_timeout for room.
#pragma once
#include <httplib.h>

#include "server/connection_gate.h"

namespace weir::server {

class ConnectionStream : public httplib::Stream {
 public:
  ConnectionStream(Connection& c, Clock::time_point read_deadline, std::chrono::milliseconds write_timeout)
      : c_(c), deadline_(read_deadline), write_timeout_(write_timeout) {}

  bool is_readable() const override;
  bool is_writable() const override;
  ssize_t read(char* ptr, size_t size) override;
  ssize_t write(const char* ptr, size_t size) override;
  void get_remote_ip_and_port(std::string& ip, int& port) const override;
  void get_local_ip_and_port(std::string& ip, int& port) const override;
  int socket() const override { return c_.fd; }

  // Whether the client has closed its side (or the socket failed), without
  // reading anything: for a handler waiting on a long answer.
  bool peer_closed() const;

 private:
  bool wait_readable() const;  // until data, EOF or the deadline
  Connection& c_;
  Clock::time_point deadline_;
  std::chrono::milliseconds write_timeout_;
};

}  // namespace weir::server
