#include "weft/dist/transport/tcp/tcp_transport.h"

#include <algorithm>
#include <cstring>
#include <new>

namespace weft::dist {
namespace {

// Hello, sent by the connecting (higher) rank: [magic][version][rank][token length][token].
constexpr std::uint32_t kHelloMagic = 0x48544657;  // "WFTH"
constexpr std::uint32_t kAckMagic = 0x41544657;    // "WFTA"
constexpr std::uint32_t kFrameMagic = 0x54544657;  // "WFTT"
constexpr std::uint32_t kVersion = 1;
constexpr std::uint32_t kMaxToken = 256;
// Messages are single frames; a larger one would have to be split by the algorithms.

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
  return "rank " + std::to_string(peer) +
         " closed its connection (it exited, crashed or was "
         "killed: " +
         detail + ")";
}

std::string addr_key(int rank) { return "tcp/addr/" + std::to_string(rank); }

// Compares every byte whatever the first difference, so timing does not leak the token.
bool same_token(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  }
  return diff == 0;
}

}  // namespace

TcpTransport::TcpTransport(int rank, int world_size, std::shared_ptr<store::Store> store,
                           TcpTransportOptions options)
    : rank_(rank), world_size_(world_size), options_(std::move(options)), store_(std::move(store)) {
  if (options_.token.size() > kMaxToken) {
    throw InvalidArgument("tcp transport: the job token is longer than 256 bytes");
  }
  peers_.resize(static_cast<std::size_t>(world_size));
  connect_mesh(Deadline::after(options_.connect_timeout));
  for (int p = 0; p < world_size_; ++p) {
    if (p != rank_)
      peers_[static_cast<std::size_t>(p)]->reader = std::thread([this, p] { read_loop(p); });
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

void TcpTransport::connect_mesh(Deadline deadline) {
  net::Listener listener = net::Listener::bind(options_.listen_host, 0);
  const std::string host =
      options_.advertise_host.empty() ? options_.listen_host : options_.advertise_host;
  store_->set(addr_key(rank_), host + ":" + std::to_string(listener.port()));
  // Lower ranks never wait on higher ones before accepting, so the order cannot deadlock.
  connect_lower(deadline);
  accept_higher(listener, deadline);
}

void TcpTransport::connect_lower(Deadline deadline) {
  for (int p = 0; p < rank_; ++p) {
    const std::string addr = store_->get(addr_key(p));
    const auto colon = addr.rfind(':');
    if (colon == std::string::npos) {
      throw PeerError("tcp transport: rank " + std::to_string(p) + " published a bad address '" +
                      addr + "'");
    }
    auto peer = std::make_unique<Peer>();
    peer->socket =
        net::Socket::connect(addr.substr(0, colon), std::stoi(addr.substr(colon + 1)), deadline);
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
    try {
      if (accept_one(listener, deadline)) --missing;
    } catch (const weft::TimeoutError&) {
      std::string ranks;
      for (int p = rank_ + 1; p < world_size_; ++p) {
        if (!peers_[static_cast<std::size_t>(p)]) ranks += " " + std::to_string(p);
      }
      throw weft::TimeoutError("tcp transport: rank " + std::to_string(rank_) +
                               " was not reached in time by ranks" + ranks +
                               "; check that they started, and the job token (WEFT_JOB_TOKEN)");
    }
  }
}

// Takes one connection and checks its hello; false (and the connection dropped) when it is
// not a peer of this job. Each hello gets a few seconds at most, so a silent stray connection
// cannot hold up the mesh.
bool TcpTransport::accept_one(net::Listener& listener, Deadline deadline) {
  net::Socket socket = listener.accept(deadline);
  const Deadline hello_deadline =
      std::min(deadline, Deadline::after(Seconds(5)),
               [](const Deadline& a, const Deadline& b) { return a.when() < b.when(); });
  Hello hello{};
  try {
    socket.recv_all(bytes_of(hello), hello_deadline);
    const bool ok = hello.magic == kHelloMagic && hello.version == kVersion && hello.rank > rank_ &&
                    hello.rank < world_size_ && hello.token_length <= kMaxToken &&
                    !peers_[static_cast<std::size_t>(hello.rank)];
    if (!ok) return false;
    std::string token(hello.token_length, '\0');
    socket.recv_all(std::as_writable_bytes(std::span(token)), hello_deadline);
    if (!same_token(token, options_.token)) return false;  // wrong job: refused by closing
    socket.send_all(bytes_of(Ack{kAckMagic, rank_}), hello_deadline);
  } catch (const net::ConnectionClosed&) {
    return false;  // a stray connection that went away
  } catch (const weft::TimeoutError&) {
    if (deadline.expired()) throw;
    return false;  // a silent stray connection
  }
  auto peer = std::make_unique<Peer>();
  peer->socket = std::move(socket);
  peers_[static_cast<std::size_t>(hello.rank)] = std::move(peer);
  return true;
}

void TcpTransport::send_frame(int peer, std::uint32_t kind, Tag tag,
                              std::span<const std::byte> bytes, Deadline deadline) {
  Peer& p = *peers_[static_cast<std::size_t>(peer)];
  if (p.poisoned.load()) {
    throw PeerError("rank " + std::to_string(peer) +
                    ": an earlier send to it failed part-way; "
                    "the connection is closed");
  }
  const FrameHeader header{kFrameMagic, kind, tag, bytes.size()};
  std::unique_lock lock(p.send_mu, std::defer_lock);
  if (deadline.is_never()) {
    lock.lock();
  } else if (!lock.try_lock_until(deadline.when())) {
    throw PeerTimeout(peer, "rank " + std::to_string(peer) + " did not take a message in time");
  }
  try {
    p.socket.send_all(bytes_of(header), deadline);
    p.socket.send_all(bytes, deadline);
  } catch (const net::ConnectionClosed& e) {
    poison(p);
    throw PeerError(closed_message(peer, e.what()));
  } catch (const weft::TimeoutError&) {
    poison(p);  // part of the frame may have gone out
    throw PeerTimeout(peer, "rank " + std::to_string(peer) + " did not take a message in time");
  }
}

void TcpTransport::poison(Peer& p) {
  p.poisoned.store(true);
  p.socket.shutdown();  // the peer's reader sees the close instead of a torn frame
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
  // Best effort, within a second: tell every peer why, so that they fail with the cause
  // rather than a closed socket. A peer that cannot take it in time gets its connection
  // closed (send_frame poisons it), which its reader reports.
  const Deadline soon = Deadline::after(Seconds(1));
  for (int p = 0; p < world_size_; ++p) {
    if (p == rank_ || peers_[static_cast<std::size_t>(p)]->poisoned.load()) continue;
    try {
      send_frame(p, kAbort, 0, std::as_bytes(std::span(reason)), soon);
    } catch (const weft::Error&) {
      poison(*peers_[static_cast<std::size_t>(p)]);
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
  } catch (const std::bad_alloc&) {
    mailbox_.fail_peer(peer, "rank " + std::to_string(peer) +
                                 " sent a message too large for this process's memory");
    poison(p);
  } catch (const std::exception& e) {
    if (!closing_.load()) mailbox_.fail_peer(peer, closed_message(peer, e.what()));
  }
}

}  // namespace weft::dist
