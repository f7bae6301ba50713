#include "weft/net/socket.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <linux/sockios.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <memory>
#include <thread>
#include <utility>

namespace weft::net {
namespace {

using namespace std::chrono_literals;

// Connect retries back off from kFirstBackoff to kMaxBackoff: fast enough that a client
// started just before its server connects soon after, slow enough not to spin.
constexpr auto kFirstBackoff = 10ms;
constexpr auto kMaxBackoff = 100ms;

std::string address(const std::string& host, int port) {
  // IPv6 literals are bracketed so that the port stays readable.
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

void check_port(int port, int lowest, const char* what) {
  if (port < lowest || port > 65535) {
    throw InvalidArgument(std::string(what) + ": port " + std::to_string(port) + " is outside " +
                          std::to_string(lowest) + "..65535");
  }
}

// poll()'s timeout for `deadline`: milliseconds rounded up (rounding down would spin on
// the last sub-millisecond), -1 for a deadline that never passes.
int poll_millis(Deadline deadline) {
  if (deadline.is_never()) return -1;
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline.remaining());
  return static_cast<int>(std::min<std::chrono::milliseconds::rep>(left.count(), INT_MAX));
}

// Waits until `fd` reports one of `events` (or an error or hang-up, which the caller's
// next call will see); false when the deadline passed first.
bool wait_ready(int fd, short events, Deadline deadline) {
  while (true) {
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, poll_millis(deadline));
    if (r > 0) return true;
    if (r == 0) {
      if (deadline.expired()) return false;
      continue;  // woke a little early
    }
    if (errno != EINTR) throw SystemError("poll", errno);
  }
}

bool is_closed_error(int err) { return err == EPIPE || err == ECONNRESET || err == ENOTCONN; }

// Errors that mean "nobody is listening there yet" rather than a broken setup.
bool is_retryable_connect_error(int err) {
  switch (err) {
    case ECONNREFUSED:
    case ENETUNREACH:
    case EHOSTUNREACH:
    case ETIMEDOUT:
    case ECONNRESET:
    case ECONNABORTED:
    case EAGAIN:
    case EADDRNOTAVAIL:
    case ENETDOWN:
    case EHOSTDOWN:
    case EINTR:
      return true;
    default:
      return false;
  }
}

void set_nodelay(int fd) {
  const int one = 1;
  if (::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0) {
    throw SystemError("setsockopt(TCP_NODELAY)", errno);
  }
}

std::string sockaddr_string(const sockaddr_storage& sa) {
  char host[INET6_ADDRSTRLEN] = "?";
  if (sa.ss_family == AF_INET) {
    const auto& in = reinterpret_cast<const sockaddr_in&>(sa);
    ::inet_ntop(AF_INET, &in.sin_addr, host, sizeof(host));
    return address(host, ntohs(in.sin_port));
  }
  if (sa.ss_family == AF_INET6) {
    const auto& in6 = reinterpret_cast<const sockaddr_in6&>(sa);
    ::inet_ntop(AF_INET6, &in6.sin6_addr, host, sizeof(host));
    return address(host, ntohs(in6.sin6_port));
  }
  return "<non-IP peer>";
}

// A socket connected to itself: connecting to a free local port in the ephemeral range
// can pick that same port as the source and "succeed" by TCP simultaneous open.
bool connected_to_self(int fd) {
  sockaddr_storage self{}, peer{};
  socklen_t self_len = sizeof(self), peer_len = sizeof(peer);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&self), &self_len) != 0) return false;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) return false;
  return self_len == peer_len && std::memcmp(&self, &peer, self_len) == 0;
}

using AddrInfoPtr = std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)>;

// Resolves host:port; nullptr with `error` set when resolution failed.
AddrInfoPtr resolve(const std::string& host, int port, int flags, std::string& error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = flags | AI_NUMERICSERV;
  addrinfo* list = nullptr;
  // An empty host is getaddrinfo's null node: every interface for a listener, loopback for
  // a client.
  const char* node = host.empty() ? nullptr : host.c_str();
  const int r = ::getaddrinfo(node, std::to_string(port).c_str(), &hints, &list);
  if (r != 0) {
    error = std::string("cannot resolve host: ") +
            (r == EAI_SYSTEM ? std::strerror(errno) : ::gai_strerror(r));
    return AddrInfoPtr(nullptr, &::freeaddrinfo);
  }
  return AddrInfoPtr(list, &::freeaddrinfo);
}

// One non-blocking connect to `ai`; an invalid Socket with `error` set when it failed in a
// way worth retrying.
Socket connect_one(const addrinfo& ai, const std::string& where, Deadline deadline,
                   std::string& error) {
  const int fd =
      ::socket(ai.ai_family, ai.ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai.ai_protocol);
  if (fd < 0) throw SystemError("socket() for a connection to " + where, errno);
  Socket s(fd);
  int err = 0;
  if (::connect(fd, ai.ai_addr, ai.ai_addrlen) != 0) {
    err = errno;
    if (err == EINPROGRESS) {
      if (!wait_ready(fd, POLLOUT, deadline)) {
        error = "connection attempt timed out";
        return Socket();
      }
      socklen_t len = sizeof(err);
      if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
    }
  }
  if (err == 0 && connected_to_self(fd)) err = ECONNREFUSED;
  if (err != 0) {
    if (!is_retryable_connect_error(err)) throw SystemError("connect to " + where, err);
    error = std::strerror(err);
    return Socket();
  }
  set_nodelay(fd);
  return s;
}

}  // namespace

void Socket::shutdown() {
  if (fd_) ::shutdown(fd_.get(), SHUT_RDWR);  // ENOTCONN (never connected) is harmless
}

std::string Socket::peer_name() const {
  sockaddr_storage sa{};
  socklen_t len = sizeof(sa);
  if (!fd_ || ::getpeername(fd_.get(), reinterpret_cast<sockaddr*>(&sa), &len) != 0) {
    return "<unconnected socket>";
  }
  return sockaddr_string(sa);
}

Socket Socket::connect(const std::string& host, int port, Deadline deadline) {
  check_port(port, 1, "Socket::connect");
  const std::string where = address(host, port);
  const Clock::time_point start = Clock::now();
  std::string error = "no attempt was made";
  auto backoff = std::chrono::duration_cast<Clock::duration>(kFirstBackoff);
  while (true) {
    if (AddrInfoPtr list = resolve(host, port, 0, error)) {
      for (const addrinfo* ai = list.get(); ai != nullptr; ai = ai->ai_next) {
        Socket s = connect_one(*ai, where, deadline, error);
        if (s.valid()) return s;
      }
    }
    if (deadline.expired()) break;
    std::this_thread::sleep_for(std::min(backoff, deadline.remaining()));
    backoff = std::min(backoff * 2, std::chrono::duration_cast<Clock::duration>(kMaxBackoff));
  }
  char waited[32];
  std::snprintf(waited, sizeof(waited), "%.1f", Seconds(Clock::now() - start).count());
  throw TimeoutError("could not connect to " + where + " within " + waited + " s (last error: " +
                     error + "); check that the server is running and listening on that address");
}

std::size_t Socket::send_some(std::span<const std::byte> bytes) { return send_some(bytes, {}); }

std::size_t Socket::send_some(std::span<const std::byte> first, std::span<const std::byte> second) {
  if (!fd_) throw InvalidArgument("Socket::send on a closed socket");
  iovec parts[2] = {{const_cast<std::byte*>(first.data()), first.size()},
                    {const_cast<std::byte*>(second.data()), second.size()}};
  msghdr message{};
  message.msg_iov = parts;
  message.msg_iovlen = second.empty() ? 1 : 2;
  while (true) {
    const ssize_t n = ::sendmsg(fd_.get(), &message, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) return static_cast<std::size_t>(n);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    if (is_closed_error(errno)) {
      throw ConnectionClosed("the connection to " + peer_name() + " was closed by the peer (" +
                             std::strerror(errno) + ") while sending");
    }
    throw SystemError("send to " + peer_name(), errno);
  }
}

std::size_t Socket::unsent_bytes() const {
  int queued = 0;
  if (::ioctl(fd_.get(), SIOCOUTQ, &queued) != 0) throw SystemError("ioctl(SIOCOUTQ)", errno);
  return static_cast<std::size_t>(queued);
}

std::size_t Socket::recv_some(std::span<std::byte> out) {
  if (!fd_) throw InvalidArgument("Socket::recv on a closed socket");
  if (out.empty()) return 0;
  while (true) {
    const ssize_t n = ::recv(fd_.get(), out.data(), out.size(), MSG_DONTWAIT);
    if (n > 0) return static_cast<std::size_t>(n);
    if (n == 0) throw ConnectionClosed("the peer " + peer_name() + " closed the connection");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    if (is_closed_error(errno)) {
      throw ConnectionClosed("the connection to " + peer_name() + " was reset (" +
                             std::strerror(errno) + ")");
    }
    throw SystemError("recv from " + peer_name(), errno);
  }
}

void Socket::send_all(std::span<const std::byte> bytes, Deadline deadline) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const std::size_t n = send_some(bytes.subspan(done));
    done += n;
    if (n == 0 && !wait_ready(fd_.get(), POLLOUT, deadline)) {
      throw TimeoutError("sending to " + peer_name() + " timed out with " +
                         std::to_string(bytes.size() - done) + " of " +
                         std::to_string(bytes.size()) + " bytes unsent; the peer is not reading");
    }
  }
}

void Socket::recv_all(std::span<std::byte> out, Deadline deadline) {
  std::size_t done = 0;
  while (done < out.size()) {
    std::size_t n = 0;
    try {
      n = recv_some(out.subspan(done));
    } catch (const ConnectionClosed& e) {
      throw ConnectionClosed(std::string(e.what()) + " with " + std::to_string(out.size() - done) +
                             " of " + std::to_string(out.size()) + " expected bytes still missing");
    }
    done += n;
    if (n == 0 && !wait_ready(fd_.get(), POLLIN, deadline)) {
      throw TimeoutError("receiving from " + peer_name() + " timed out with " +
                         std::to_string(out.size() - done) + " of " + std::to_string(out.size()) +
                         " bytes still missing");
    }
  }
}

Listener Listener::bind(const std::string& host, int port, int backlog) {
  check_port(port, 0, "Listener::bind");
  const std::string where = address(host, port);
  std::string error;
  const AddrInfoPtr list = resolve(host, port, AI_PASSIVE, error);
  if (!list) throw InvalidArgument("Listener::bind " + where + ": " + error);
  int last_errno = 0;
  for (const addrinfo* ai = list.get(); ai != nullptr; ai = ai->ai_next) {
    const int fd =
        ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) throw SystemError("socket() for a listener on " + where, errno);
    Socket s(fd);
    const int one = 1;
    // Lets a restarted server reuse its port while old connections sit in TIME_WAIT.
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(fd, backlog) != 0) {
      last_errno = errno;
      continue;
    }
    sockaddr_storage sa{};
    socklen_t len = sizeof(sa);
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) != 0) {
      throw SystemError("getsockname of the listener on " + where, errno);
    }
    Listener l;
    l.port_ = ntohs(sa.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6&>(sa).sin6_port
                                             : reinterpret_cast<sockaddr_in&>(sa).sin_port);
    l.socket_ = std::move(s);
    return l;
  }
  throw SystemError("bind/listen on " + where +
                        " (choose another port, or port 0 to let the system pick a free one)",
                    last_errno);
}

Socket Listener::try_accept() {
  if (!socket_.valid()) throw InvalidArgument("Listener::accept on a closed listener");
  while (true) {
    const int fd = ::accept4(socket_.fd(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      Socket s(fd);
      set_nodelay(fd);
      return s;
    }
    // A connection that was reset while queued is the client's problem, not ours.
    if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return Socket();
    throw SystemError("accept on port " + std::to_string(port_), errno);
  }
}

Socket Listener::accept(Deadline deadline) {
  while (true) {
    Socket s = try_accept();
    if (s.valid()) return s;
    if (!wait_ready(socket_.fd(), POLLIN, deadline)) {
      throw TimeoutError("no connection arrived on port " + std::to_string(port_) +
                         " before the deadline; check that the clients were started and "
                         "point at this port");
    }
  }
}

std::string local_address_towards(const std::string& host) {
  std::string error;
  const AddrInfoPtr list = resolve(host, 9, 0, error);  // any port: nothing is sent
  if (!list) throw InvalidArgument("cannot find a route to '" + host + "': " + error);
  // connect() on a datagram socket only asks the routing table which source address to use.
  UniqueFd fd(::socket(list->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) throw SystemError("socket() to find the route to " + host, errno);
  sockaddr_storage self{};
  socklen_t len = sizeof(self);
  if (::connect(fd.get(), list->ai_addr, list->ai_addrlen) != 0 ||
      ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&self), &len) != 0) {
    throw SystemError("finding the route to " + host, errno);
  }
  char text[INET6_ADDRSTRLEN] = "";
  const void* at = self.ss_family == AF_INET6
                       ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6&>(self).sin6_addr)
                       : static_cast<const void*>(&reinterpret_cast<sockaddr_in&>(self).sin_addr);
  ::inet_ntop(self.ss_family, at, text, sizeof(text));
  return text;
}

std::string interface_address(const std::string& name, bool prefer_ipv6) {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) throw SystemError("getifaddrs", errno);
  const std::unique_ptr<ifaddrs, decltype(&::freeifaddrs)> owned(list, &::freeifaddrs);
  std::string v4, v6, names;
  for (const ifaddrs* at = list; at != nullptr; at = at->ifa_next) {
    if (at->ifa_addr == nullptr) continue;
    const int family = at->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    if (names.find(std::string(" ") + at->ifa_name + ",") == std::string::npos) {
      names += std::string(" ") + at->ifa_name + ",";
    }
    if (name != at->ifa_name) continue;
    if (family == AF_INET6 &&
        IN6_IS_ADDR_LINKLOCAL(&reinterpret_cast<const sockaddr_in6*>(at->ifa_addr)->sin6_addr)) {
      continue;
    }
    char text[INET6_ADDRSTRLEN] = "";
    const void* address =
        family == AF_INET ? static_cast<const void*>(
                                &reinterpret_cast<const sockaddr_in*>(at->ifa_addr)->sin_addr)
                          : static_cast<const void*>(
                                &reinterpret_cast<const sockaddr_in6*>(at->ifa_addr)->sin6_addr);
    ::inet_ntop(family, address, text, sizeof(text));
    std::string& slot = family == AF_INET ? v4 : v6;
    if (slot.empty()) slot = text;
  }
  if (prefer_ipv6 && !v6.empty()) return v6;
  if (!v4.empty()) return v4;
  if (!v6.empty()) return v6;
  if (!names.empty()) names.pop_back();  // the last comma
  throw InvalidArgument("network interface '" + name + "' has no IP address here; interfaces" +
                        " with one:" + names);
}

}  // namespace weft::net
