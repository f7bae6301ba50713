// TCP sockets with deadlines: every call that can block takes a Deadline and throws
// weft::TimeoutError when it passes. Listeners bind 127.0.0.1 unless told otherwise.
#pragma once

#include <cstddef>
#include <span>
#include <string>

#include "weft/base/deadline.h"
#include "weft/base/error.h"

namespace weft::net {

// The peer closed the connection (or reset it) while we were reading or writing.
class ConnectionClosed : public weft::Error {
 public:
  using weft::Error::Error;
};

// A connected TCP stream. Move-only; closes its descriptor on destruction. TCP_NODELAY is
// set. Not thread-safe, except that one thread may send while another receives.
class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd);
  ~Socket();
  Socket(Socket&& other) noexcept;
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  // Connects to host:port, retrying refused or unreachable attempts (the peer may not be
  // listening yet) until `deadline`; then throws weft::TimeoutError naming host:port and the
  // last error. `host` is a name or a numeric IPv4/IPv6 address.
  static Socket connect(const std::string& host, int port, Deadline deadline);

  // Sends all of `bytes`; throws ConnectionClosed or weft::TimeoutError.
  void send_all(std::span<const std::byte> bytes, Deadline deadline);
  // Fills all of `out`; throws ConnectionClosed on end of file (naming how many bytes were
  // still missing) or weft::TimeoutError.
  void recv_all(std::span<std::byte> out, Deadline deadline);

  bool valid() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  // Shuts both directions down, so that a thread blocked in recv_all on this socket returns.
  void shutdown();
  void close();
  // "host:port" of the peer, for messages.
  std::string peer_name() const;

 private:
  int fd_ = -1;
};

// A listening TCP socket.
class Listener {
 public:
  // Binds host:port (port 0: the system picks a free one, see port()). The default host is
  // the loopback address: listening on other interfaces is an explicit choice.
  static Listener bind(const std::string& host = "127.0.0.1", int port = 0, int backlog = 128);

  Listener() = default;
  Listener(Listener&&) noexcept = default;
  Listener& operator=(Listener&&) noexcept = default;

  int port() const { return port_; }
  // Waits for a connection until `deadline` (weft::TimeoutError).
  Socket accept(Deadline deadline);
  int fd() const { return socket_.fd(); }
  void close() { socket_.close(); }

 private:
  Socket socket_;
  int port_ = 0;
};

}  // namespace weft::net
