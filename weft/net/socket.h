// TCP sockets with deadlines: every call that can block takes a Deadline and throws
// weft::TimeoutError when it passes. Listeners bind 127.0.0.1 unless told otherwise.
#pragma once

#include <cstddef>
#include <span>
#include <string>

#include "weft/base/deadline.h"
#include "weft/base/error.h"
#include "weft/base/unique_fd.h"

namespace weft::net {

// The peer closed the connection (or reset it) while we were reading or writing.
class ConnectionClosed : public weft::Error {
 public:
  using weft::Error::Error;
};

// A connected TCP stream. Move-only; closes its descriptor on destruction. Sockets made by
// connect() and accept() are close-on-exec, non-blocking underneath (waits are poll()s
// bounded by the caller's deadline) and have TCP_NODELAY set. Writes use MSG_NOSIGNAL, so a
// closed peer is an exception, never SIGPIPE. Not thread-safe, except that one thread may
// send while another receives, and shutdown() may be called from any thread.
class Socket {
 public:
  Socket() = default;
  // Takes ownership of the socket `fd` (-1: an invalid Socket).
  explicit Socket(int fd) : fd_(fd) {}
  Socket(Socket&& other) noexcept = default;
  Socket& operator=(Socket&& other) noexcept = default;
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

  // Non-blocking variants for poll()-driven loops (they never wait, whatever the socket's
  // mode). send_some returns how many bytes the kernel took now (possibly 0); recv_some
  // returns how many bytes were read (0: nothing available yet). Both throw ConnectionClosed
  // when the peer closed or reset the connection, and weft::SystemError on other failures.
  std::size_t send_some(std::span<const std::byte> bytes);
  // As send_some(bytes), for `first` followed by `second` in one system call (a frame's
  // header and its payload).
  std::size_t send_some(std::span<const std::byte> first, std::span<const std::byte> second);
  std::size_t recv_some(std::span<std::byte> out);

  // Bytes handed to the kernel and not yet acknowledged by the peer (SIOCOUTQ).
  std::size_t unsent_bytes() const;

  bool valid() const { return static_cast<bool>(fd_); }
  int fd() const { return fd_.get(); }
  // Shuts both directions down, so that a thread blocked in recv_all on this socket returns.
  void shutdown();
  // Closes the descriptor (not retried on EINTR: on Linux it is released regardless).
  void close() { fd_.reset(); }
  // "host:port" of the peer, for messages.
  std::string peer_name() const;

 private:
  UniqueFd fd_;
};

// A listening TCP socket. Its descriptor is non-blocking and close-on-exec, so that it can
// sit in a poll() set (fd()). Not thread-safe.
class Listener {
 public:
  // Binds host:port (port 0: the system picks a free one, see port()) with SO_REUSEADDR.
  // The default host is the loopback address: listening on other interfaces is an explicit
  // choice ("0.0.0.0", "::", or "" for every interface). Throws weft::SystemError naming
  // host:port if the address cannot be bound, weft::InvalidArgument for a bad port or host.
  static Listener bind(const std::string& host = "127.0.0.1", int port = 0, int backlog = 128);

  Listener() = default;
  Listener(Listener&&) noexcept = default;
  Listener& operator=(Listener&&) noexcept = default;

  int port() const { return port_; }
  // Waits for a connection until `deadline` (weft::TimeoutError).
  Socket accept(Deadline deadline);
  // A pending connection, or an invalid Socket when none is waiting; never blocks.
  Socket try_accept();
  int fd() const { return socket_.fd(); }
  void close() { socket_.close(); }

 private:
  Socket socket_;
  int port_ = 0;
};

// The address of this host's interface on the route to `host` (the source address the
// routing table picks), as text: what other hosts that reach `host` can reach this one at.
// Sends nothing. Throws InvalidArgument when `host` does not resolve, SystemError when no
// route leads there.
std::string local_address_towards(const std::string& host);

// The address of network interface `name` ("eth1"), as text: its IPv4 address, else its
// first IPv6 one (with `prefer_ipv6`, the other way round). Link-local IPv6 addresses
// (fe80::/10) are never chosen: they mean nothing without the interface's scope. Throws
// InvalidArgument naming the interfaces there are when it has none.
std::string interface_address(const std::string& name, bool prefer_ipv6 = false);

}  // namespace weft::net
