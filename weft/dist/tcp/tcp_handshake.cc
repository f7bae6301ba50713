#include "weft/dist/tcp/tcp_handshake.h"

#include <poll.h>

#include <algorithm>
#include <chrono>

#include "weft/dist/errors.h"
#include "weft/dist/tcp/tcp_acceptor.h"
#include "weft/dist/tcp/tcp_transport.h"
#include "weft/net/auth.h"

namespace weft::dist::tcp {
namespace {

struct Ack {
  std::uint32_t magic = kAckMagic;
  std::int32_t rank = 0;  // the listener's
};

template <class T>
std::span<std::byte> bytes_of(T& value) {
  return {reinterpret_cast<std::byte*>(&value), sizeof(T)};
}

std::string addr_key(int rank) { return "tcp/addr/" + std::to_string(rank); }

// A stray or silent connection gets this long at most, so it cannot hold up the mesh.
constexpr Seconds kHelloTimeout{5};
constexpr std::chrono::milliseconds kAcceptPoll{10};

Deadline earlier(const Deadline& a, const Deadline& b) { return a.when() < b.when() ? a : b; }

net::Socket dial(int rank, int peer, int world_size, store::Store& store, const std::string& token,
                 Deadline deadline) {
  const std::string addr = store.get(addr_key(peer));
  const auto colon = addr.rfind(':');
  if (colon == std::string::npos) {
    throw PeerError("tcp transport: rank " + std::to_string(peer) + " published a bad address '" +
                    addr + "'");
  }
  std::string host = addr.substr(0, colon);
  if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  net::Socket socket = net::Socket::connect(host, std::stoi(addr.substr(colon + 1)), deadline);
  Hello hello{.rank = rank, .world_size = world_size};
  socket.send_all(bytes_of(hello), deadline);
  const std::string refused = "tcp transport: rank " + std::to_string(peer) + " at " + addr +
                              " refused this rank's connection: a wrong job token "
                              "(WEFT_JOB_TOKEN), or a process of another job on that address";
  Ack ack;
  try {
    net::prove_token_as_dialer(socket, token, auth_context(rank, peer, world_size), deadline);
    socket.recv_all(bytes_of(ack), deadline);
  } catch (const net::ConnectionClosed&) {
    throw PeerError(refused);
  } catch (const net::AuthError& e) {
    throw PeerError("tcp transport: rank " + std::to_string(peer) + " at " + addr +
                    " is not of this job: " + e.what());
  }
  if (ack.magic != kAckMagic || ack.rank != peer) {
    throw PeerError("tcp transport: " + addr + " is not rank " + std::to_string(peer) +
                    " of this job");
  }
  return socket;
}

// A connection waiting on `listener`, after at most kAcceptPoll (an invalid Socket if none):
// short, so that finished handshakes are taken soon.
net::Socket next_connection(net::Listener& listener, const Deadline& deadline) {
  pollfd p{.fd = listener.fd(), .events = POLLIN, .revents = 0};
  const auto wait = std::min<Clock::duration>(deadline.remaining(), kAcceptPoll);
  const int ready =
      ::poll(&p, 1, static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(wait).count()));
  return ready > 0 ? listener.try_accept() : net::Socket();
}

weft::TimeoutError not_reached(int rank, int world_size, const std::vector<net::Socket>& peers) {
  std::string ranks;
  for (int p = rank + 1; p < world_size; ++p) {
    if (!peers[static_cast<std::size_t>(p)].valid()) ranks += " " + std::to_string(p);
  }
  return weft::TimeoutError("tcp transport: rank " + std::to_string(rank) +
                            " was not reached in time by ranks" + ranks +
                            "; check that they started, and the job token (WEFT_JOB_TOKEN)");
}

}  // namespace

std::string check_hello(const Hello& hello, int rank, int world_size) {
  if (hello.magic != kHelloMagic) return "not a weft tcp hello";
  if (hello.version != kVersion) {
    return "protocol version " + std::to_string(hello.version) + " (this rank speaks " +
           std::to_string(kVersion) + ")";
  }
  if (hello.world_size != world_size) {
    return "a job of " + std::to_string(hello.world_size) + " ranks (this one has " +
           std::to_string(world_size) + ")";
  }
  if (hello.rank <= rank || hello.rank >= world_size) {
    return "rank " + std::to_string(hello.rank) + " dialing rank " + std::to_string(rank);
  }
  return {};
}

std::string auth_context(int dialer, int listener, int world_size) {
  return "weft tcp transport v2: rank " + std::to_string(dialer) + " to rank " +
         std::to_string(listener) + " of " + std::to_string(world_size);
}

int accept_peer(net::Socket& socket, int rank, int world_size, const std::string& token,
                Deadline deadline) {
  Hello hello;
  try {
    socket.recv_all(bytes_of(hello), deadline);
    if (!check_hello(hello, rank, world_size).empty()) return -1;
    net::prove_token_as_listener(socket, token, auth_context(hello.rank, rank, world_size),
                                 deadline);
    Ack ack{.rank = rank};
    socket.send_all(bytes_of(ack), deadline);
  } catch (const net::ConnectionClosed&) {
    return -1;
  } catch (const net::AuthError&) {
    return -1;
  } catch (const weft::TimeoutError&) {
    return -1;
  }
  return hello.rank;
}

std::vector<net::Socket> connect_mesh(int rank, int world_size, store::Store& store,
                                      const TcpTransportOptions& options, Deadline deadline) {
  std::vector<net::Socket> peers(static_cast<std::size_t>(world_size));
  net::Listener listener = net::Listener::bind(options.listen_host, 0);
  std::string host = options.advertise_host.empty() ? options.listen_host : options.advertise_host;
  if (host.find(':') != std::string::npos) host = "[" + host + "]";  // IPv6
  store.set(addr_key(rank), host + ":" + std::to_string(listener.port()));
  // Lower ranks never wait on higher ones before accepting, so the order cannot deadlock.
  for (int p = 0; p < rank; ++p) {
    peers[static_cast<std::size_t>(p)] = dial(rank, p, world_size, store, options.token, deadline);
  }
  // Higher ranks' handshakes run side by side (HandshakeAcceptor): a stray connection that
  // stays silent cannot hold up the ranks behind it.
  HandshakeAcceptor acceptor(rank, world_size, options.token);
  int missing = world_size - 1 - rank;
  while (true) {
    for (auto& [peer, socket] : acceptor.take_peers()) {
      if (peers[static_cast<std::size_t>(peer)].valid()) continue;  // that rank is connected
      peers[static_cast<std::size_t>(peer)] = std::move(socket);
      --missing;
    }
    if (missing == 0) break;
    if (deadline.expired()) throw not_reached(rank, world_size, peers);
    if (net::Socket socket = next_connection(listener, deadline); socket.valid()) {
      acceptor.start(std::move(socket), earlier(deadline, Deadline::after(kHelloTimeout)));
    }
  }
  return peers;
}

}  // namespace weft::dist::tcp
