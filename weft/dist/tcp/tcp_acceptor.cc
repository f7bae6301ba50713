#include "weft/dist/tcp/tcp_acceptor.h"

#include <algorithm>
#include <system_error>

#include "weft/dist/tcp/tcp_handshake.h"

namespace weft::dist::tcp {
namespace {

// "127.0.0.1" of "127.0.0.1:5000", "[::1]" of "[::1]:5000".
std::string host_of(const net::Socket& socket) {
  std::string name = socket.peer_name();
  const auto colon = name.rfind(':');
  if (colon != std::string::npos) name.resize(colon);
  return name;
}

}  // namespace

HandshakeAcceptor::HandshakeAcceptor(int rank, int world_size, std::string token)
    : rank_(rank), world_size_(world_size), token_(std::move(token)) {}

HandshakeAcceptor::~HandshakeAcceptor() {
  {
    std::lock_guard lock(mu_);
    for (auto& h : handshakes_) {
      if (!h->done) h->socket.shutdown();
    }
  }
  for (auto& h : handshakes_) h->thread.join();
}

// The oldest running handshake from `host` past the per-host bound, then the oldest of all
// past the total, are shut down: their threads see the connection closed and finish at once.
void HandshakeAcceptor::make_room(const std::string& host) {
  auto running = [](const auto& h) { return !h->done && !h->evicted; };
  auto evict_oldest = [&](auto matches) {
    for (auto& h : handshakes_) {
      if (running(h) && matches(*h)) {
        h->evicted = true;
        h->socket.shutdown();
        return;
      }
    }
  };
  const auto from_host = [&](const Handshake& h) { return h.host == host; };
  const auto count = [&](auto matches) {
    return std::count_if(handshakes_.begin(), handshakes_.end(),
                         [&](const auto& h) { return running(h) && matches(*h); });
  };
  if (count(from_host) >= kMaxPendingPerHost) evict_oldest(from_host);
  const auto any = [](const Handshake&) { return true; };
  if (count(any) >= kMaxPending) evict_oldest(any);
}

void HandshakeAcceptor::start(net::Socket socket, Deadline deadline) {
  auto h = std::make_unique<Handshake>();
  h->host = host_of(socket);
  h->socket = std::move(socket);
  Handshake* raw = h.get();
  std::lock_guard lock(mu_);
  make_room(raw->host);
  try {
    raw->thread = std::thread([this, raw, deadline] {
      const int peer = accept_peer(raw->socket, rank_, world_size_, token_, deadline);
      std::lock_guard done_lock(mu_);
      raw->peer = peer;
      raw->done = true;
    });
  } catch (const std::system_error&) {
    return;  // no thread to be had: the connection is dropped, as a failed handshake would be
  }
  handshakes_.push_back(std::move(h));
}

std::vector<std::pair<int, net::Socket>> HandshakeAcceptor::take_peers() {
  std::vector<std::pair<int, net::Socket>> peers;
  std::list<std::unique_ptr<Handshake>> finished;
  {
    std::lock_guard lock(mu_);
    for (auto it = handshakes_.begin(); it != handshakes_.end();) {
      auto next = std::next(it);
      if ((*it)->done) finished.splice(finished.end(), handshakes_, it);
      it = next;
    }
  }
  for (auto& h : finished) {
    h->thread.join();
    if (h->peer >= 0 && !h->evicted) peers.emplace_back(h->peer, std::move(h->socket));
  }
  return peers;
}

}  // namespace weft::dist::tcp
