#include "weft/dist/transport/tcp/tcp_transport.h"

#include <cstring>

namespace weft::dist {
namespace {

// Hello, sent by the connecting (higher) rank: [magic][version][rank][token length][token].
constexpr std::uint32_t kHelloMagic = 0x48544657;  // "WFTH"
constexpr std::uint32_t kAckMagic = 0x41544657;    // "WFTA"
constexpr std::uint32_t kFrameMagic = 0x54544657;  // "WFTT"
constexpr std::uint32_t kVersion = 1;
constexpr std::uint32_t kMaxToken = 256;
// Messages are single frames; a larger one would have to be split by the algorithms.
constexpr std::uint64_t kMaxMessage = std::uint64_t{4} << 30;  // 4 GiB

enum FrameKind : std::uint32_t { kData = 0, kAbort = 1 };

struct Hello {
  std::uint32_t magic;
  std::uint32_t version;
  std::int32_t rank;
  std::uint32_t token_length;
};

struct Ack {
  std::uint32_t magic;
  std::int32_t rank;
};

struct FrameHeader {
  std::uint32_t magic;
  std::uint32_t kind;
  Tag tag;
  std::uint64_t length;
};

template <class T>
std::span<const std::byte> bytes_of(const T& value) {
  return {reinterpret_cast<const std::byte*>(&value), sizeof(T)};
}

template <class T>
std::span<std::byte> bytes_of(T& value) {
  return {reinterpret_cast<std::byte*>(&value), sizeof(T)};
}

std::string closed_message(int peer, const std::string& detail) {
  return "rank " + std::to_string(peer) + " closed its connection (it exited, crashed or was "
         "killed: " + detail + ")";
}

std::string addr_key(int rank) { return "tcp/addr/" + std::to_string(rank); }

}  // namespace

TcpTransport::TcpTransport(int rank, int world_size, store::Store& store,
                           TcpTransportOptions options)
    : rank_(rank), world_size_(world_size), options_(std::move(options)) {
  if (options_.token.size() > kMaxToken) {
    throw InvalidArgument("tcp transport: the job token is longer than 256 bytes");
  }
  peers_.resize(static_cast<std::size_t>(world_size));
  connect_mesh(store, Deadline::after(options_.connect_timeout));
  for (int p = 0; p < world_size_; ++p) {
    if (p != rank_) peers_[static_cast<std::size_t>(p)]->reader = std::thread([this, p] { read_loop(p); });
  }
}

TcpTransport::~TcpTransport() {
  closing_.store(true);
  for (auto& peer : peers_) {
    if (peer) peer->socket.shutdown();
  }
  for (auto& peer : peers_) {
    if (peer && peer->reader.joinable()) peer->reader.join();
  }
}

void TcpTransport::connect_mesh(store::Store& store, Deadline deadline) {
  net::Listener listener = net::Listener::bind(options_.listen_host, 0);
  const std::string host =
      options_.advertise_host.empty() ? options_.listen_host : options_.advertise_host;
  store.set(addr_key(rank_), host + ":" + std::to_string(listener.port()));
  // Lower ranks never wait on higher ones before accepting, so the order cannot deadlock.
  connect_lower(store, deadline);
  accept_higher(listener, deadline);
}

void TcpTransport::connect_lower(store::Store& store, Deadline deadline) {
  for (int p = 0; p < rank_; ++p) {
    const std::string addr = store.get(addr_key(p));
    const auto colon = addr.rfind(':');
    if (colon == std::string::npos) {
      throw PeerError("tcp transport: rank " + std::to_string(p) + " published a bad address '" +
                      addr + "'");
    }
    auto peer = std::make_unique<Peer>();
    peer->socket = net::Socket::connect(addr.substr(0, colon), std::stoi(addr.substr(colon + 1)),
                                        deadline);
    const Hello hello{kHelloMagic, kVersion, rank_,
                      static_cast<std::uint32_t>(options_.token.size())};
    peer->socket.send_all(bytes_of(hello), deadline);
    peer->socket.send_all(std::as_bytes(std::span(options_.token)), deadline);
    Ack ack{};
    try {
      peer->socket.recv_all(bytes_of(ack), deadline);
    } catch (const net::ConnectionClosed&) {
      throw PeerError("tcp transport: rank " + std::to_string(p) + " at " + addr +
                      " refused this rank's connection: a wrong job token (WEFT_JOB_TOKEN), or "
                      "a process of another job on that address");
    }
    if (ack.magic != kAckMagic || ack.rank != p) {
      throw PeerError("tcp transport: " + addr + " is not rank " + std::to_string(p) +
                      " of this job");
    }
    peers_[static_cast<std::size_t>(p)] = std::move(peer);
  }
}

void TcpTransport::accept_higher(net::Listener& listener, Deadline deadline) {
  int missing = world_size_ - 1 - rank_;
  while (missing > 0) {
    net::Socket socket = listener.accept(deadline);
    Hello hello{};
    try {
      socket.recv_all(bytes_of(hello), deadline);
      const bool ok = hello.magic == kHelloMagic && hello.version == kVersion &&
                      hello.rank > rank_ && hello.rank < world_size_ &&
                      hello.token_length <= kMaxToken &&
                      !peers_[static_cast<std::size_t>(hello.rank)];
      if (!ok) continue;  // not one of our peers: drop the connection
      std::string token(hello.token_length, '\0');
      socket.recv_all(std::as_writable_bytes(std::span(token)), deadline);
      if (token != options_.token) continue;  // wrong job: refused, by closing
      socket.send_all(bytes_of(Ack{kAckMagic, rank_}), deadline);
    } catch (const net::ConnectionClosed&) {
      continue;  // a stray connection that went away
    }
    auto peer = std::make_unique<Peer>();
    peer->socket = std::move(socket);
    peers_[static_cast<std::size_t>(hello.rank)] = std::move(peer);
    --missing;
  }
}

void TcpTransport::send_frame(int peer, std::uint32_t kind, Tag tag,
                              std::span<const std::byte> bytes, Deadline deadline) {
  Peer& p = *peers_[static_cast<std::size_t>(peer)];
  const FrameHeader header{kFrameMagic, kind, tag, bytes.size()};
  std::lock_guard lock(p.send_mu);
  try {
    p.socket.send_all(bytes_of(header), deadline);
    p.socket.send_all(bytes, deadline);
  } catch (const net::ConnectionClosed& e) {
    throw PeerError(closed_message(peer, e.what()));
  } catch (const weft::TimeoutError&) {
    throw PeerTimeout(peer, "rank " + std::to_string(peer) + " did not take a message in time");
  }
}

void TcpTransport::send(int peer, Tag tag, std::span<const std::byte> bytes, Deadline deadline) {
  if (bytes.size() > kMaxMessage) {
    throw InvalidArgument("tcp transport: a message of " + std::to_string(bytes.size()) +
                          " bytes exceeds the 4 GiB limit of one frame");
  }
  if (peer == rank_) {
    mailbox_.deliver(rank_, tag, {bytes.begin(), bytes.end()});
    return;
  }
  send_frame(peer, kData, tag, bytes, deadline);
}

void TcpTransport::recv(int peer, Tag tag, std::span<std::byte> out, Deadline deadline) {
  mailbox_.recv(peer, tag, out, deadline);
}

int TcpTransport::recv_any(Tag tag, std::span<std::byte> out, Deadline deadline) {
  return mailbox_.recv_any(tag, out, deadline);
}

void TcpTransport::abort(const std::string& reason) {
  mailbox_.abort(reason);
  // Best effort: tell every peer why, so that they fail with the cause, not a closed socket.
  const Deadline soon = Deadline::after(Seconds(1));
  for (int p = 0; p < world_size_; ++p) {
    if (p == rank_) continue;
    try {
      send_frame(p, kAbort, 0, std::as_bytes(std::span(reason)), soon);
    } catch (const weft::Error&) {
      // That peer is gone or stuck; its own reader will report it.
    }
  }
}

// The reader blocks without a deadline on purpose: it waits for whatever the peer sends
// next, for as long as the job lives, and the destructor ends it by shutting the socket down.
void TcpTransport::read_loop(int peer) {
  Peer& p = *peers_[static_cast<std::size_t>(peer)];
  try {
    for (;;) {
      FrameHeader header{};
      p.socket.recv_all(bytes_of(header), Deadline::never());
      if (header.magic != kFrameMagic || header.length > kMaxMessage ||
          (header.kind != kData && header.kind != kAbort)) {
        mailbox_.fail_peer(peer, "rank " + std::to_string(peer) +
                                     " sent a malformed frame; the connection is closed");
        p.socket.shutdown();
        return;
      }
      std::vector<std::byte> payload(header.length);
      p.socket.recv_all(payload, Deadline::never());
      if (header.kind == kAbort) {
        mailbox_.abort(std::string(reinterpret_cast<const char*>(payload.data()), payload.size()));
      } else {
        mailbox_.deliver(peer, header.tag, std::move(payload));
      }
    }
  } catch (const std::exception& e) {
    if (!closing_.load()) mailbox_.fail_peer(peer, closed_message(peer, e.what()));
  }
}

}  // namespace weft::dist
