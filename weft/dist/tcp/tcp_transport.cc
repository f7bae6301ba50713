// The tcp transport's life (the mesh, the background thread) and its receive calls. Sending
// is in tcp_send.cc, running the connections in tcp_progress.cc.
#include "weft/dist/tcp/tcp_transport.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "weft/dist/internal/cpu_sets.h"
#include "weft/dist/internal/machine_id.h"
#include "weft/dist/tcp/tcp_handshake.h"
#include "weft/dist/tcp/tcp_peer.h"

namespace weft::dist {
namespace {

// A peer that has sent nothing for this long, while its transport sends a heartbeat on
// every connection idle for kHeartbeat (tcp_send.cc), is gone, not slow.
constexpr auto kSilence = std::chrono::seconds(2);
// A receive whose deadline passed while its peer is alive waits this much longer for that
// peer's own failure: when the peer was itself waiting on a lost host, its abort names the
// lost rank, which says more than "rank 0 did not send in time". And, when the peer fell
// quiet shortly before the deadline, until its silence has lasted kSilence: then a lost peer
// is a PeerError naming it, within the deadline plus kSilence, however late it was lost.
constexpr Seconds kCauseGrace{1};
// How long a waiting call polls before it sleeps, when its host has a core for each of its
// ranks. 2 ranks' 4-byte all-reduce, 30 short runs each: 40 µs median sleeping at once or
// after 10 µs, 14.2 after 20 µs (mean 30: some runs hit 140), 14.5 after 50 µs (mean 52);
// 4 ranks on 2 cores: 115 µs not spinning, 280 spinning 100 µs (docs/PERFORMANCE_LOG.md, "The
// tcp transport").
constexpr auto kSpin = std::chrono::microseconds(20);

std::string seconds_text(Clock::duration d) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", std::chrono::duration<double>(d).count());
  return text;
}

}  // namespace

TcpTransport::TcpTransport(int rank, int world_size, std::shared_ptr<store::Store> store,
                           TcpTransportOptions options)
    : rank_(rank) {
  peers_.resize(static_cast<std::size_t>(world_size));
  // Counted (with this rank's CPUs) before this rank publishes its address, so every count is
  // in once the mesh is complete: each peer published before anyone could connect to it.
  const std::string ranks_here = "tcp/ranks_on/" + internal::machine_id();
  const std::int64_t index_here = store->add(ranks_here, 1) - 1;
  store->set(ranks_here + "/cpus/" + std::to_string(index_here), internal::allowed_cpus());
  std::vector<net::Socket> sockets = tcp::connect_mesh(rank, world_size, *store, options,
                                                       Deadline::after(options.connect_timeout));
  for (int p = 0; p < world_size; ++p) {
    if (p != rank)
      peers_[static_cast<std::size_t>(p)] = std::make_unique<Peer>(std::move(sockets[p]));
  }
  // The CPUs this host's ranks may run on, together (internal/cpu_sets.h); the host's count
  // where a rank's are not known.
  const std::int64_t ranks = store->add(ranks_here, 0);
  std::size_t cpus = internal::cpus_together(*store, ranks_here + "/cpus/", ranks);
  if (cpus == 0) cpus = static_cast<std::size_t>(std::max(0L, ::sysconf(_SC_NPROCESSORS_ONLN)));
  if (static_cast<std::int64_t>(cpus) >= ranks) spin_ = kSpin;
  // Said only of a job on one host, so that every rank says the same (the rings' pieces must
  // agree): across hosts each would judge its own.
  ranks_share_cpus_ = ranks == world_size && static_cast<std::int64_t>(cpus) < ranks;
  start();
}

TcpTransport::TcpTransport(int rank, std::vector<net::Socket> peers) : rank_(rank) {
  peers_.resize(peers.size());
  for (std::size_t p = 0; p < peers.size(); ++p) {
    if (static_cast<int>(p) != rank) peers_[p] = std::make_unique<Peer>(std::move(peers[p]));
  }
  start();
}

void TcpTransport::start() {
  wake_fd_ = UniqueFd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!wake_fd_) throw SystemError("tcp transport: eventfd", errno);
  background_ = std::thread([this] { background_loop(); });
}

TcpTransport::~TcpTransport() {
  {
    std::lock_guard lock(mu_);
    closing_ = true;
  }
  idle_.notify_all();
  wake_poller();
  background_.join();
}

TcpTransport::Posted* TcpTransport::match_posted(int from, Tag tag) {
  const auto queued = incoming_.find({from, tag});
  if (queued != incoming_.end() && !queued->second.empty()) return nullptr;  // order first
  for (Posted* posted : posted_) {
    if (posted->from == from && posted->tag == tag) return posted;
  }
  return nullptr;
}

// Messages that come before their receive land in reused buffers: a fresh one per message
// is faulted in page by page, which costs more than receiving it.
std::vector<std::byte> TcpTransport::spare_buffer() {
  if (spare_.empty()) return {};
  std::vector<std::byte> buffer = std::move(spare_.back());
  spare_.pop_back();
  buffer.clear();  // keeps its capacity
  return buffer;
}

void TcpTransport::take(std::deque<Incoming>& queue, int from, std::span<std::byte> out) {
  Incoming& message = queue.front();
  if (message.size != out.size()) {
    throw PeerError("rank " + std::to_string(from) + " sent " + std::to_string(message.size) +
                    " bytes where " + std::to_string(out.size()) +
                    " were expected: the ranks called different operations or sizes (run "
                    "with WEFT_DIST_DEBUG=detail to see each rank's call)");
  }
  if (!out.empty()) std::memcpy(out.data(), message.data.data(), out.size());
  constexpr std::size_t kSpares = 4;
  if (spare_.size() < kSpares && message.data.capacity() > 0) {
    spare_.push_back(std::move(message.data));
  }
  queue.pop_front();
}

// A receive that returns (or throws) no longer owns a place in posted_ or a landing: later
// bytes of a message that was landing in it are dropped.
void TcpTransport::detach(Posted& posted) {
  std::erase(posted_, &posted);
  if (!posted.matched || posted.done || posted.from == rank_) return;
  auto& landings = peers_[static_cast<std::size_t>(posted.from)]->landings;
  const auto it = landings.find(posted.tag);
  if (it != landings.end() && it->second.posted == &posted) it->second.posted = nullptr;
}

bool TcpTransport::silent(int peer) const {
  return peer >= 0 && peer != rank_ &&
         Clock::now() - peers_[static_cast<std::size_t>(peer)]->last_heard >= kSilence;
}

void TcpTransport::throw_timeout(int peer, const char* what) {
  if (silent(peer)) {
    const Clock::duration quiet = Clock::now() - peers_[static_cast<std::size_t>(peer)]->last_heard;
    throw PeerError("rank " + std::to_string(peer) + " has sent nothing for " +
                    seconds_text(quiet) +
                    " s, not even the heartbeats every rank sends twice a second: its host is "
                    "down or stopped, or the network between us is (a link, a firewall)");
  }
  throw PeerTimeout(peer, "rank " + std::to_string(peer) + " " + what);
}

void TcpTransport::recv(int from, Tag tag, std::span<std::byte> out, const Deadline& deadline) {
  receive(from, tag, out, deadline, nullptr);
}

// The receive is posted before the send starts, so that the peer's message, which in a ring
// round arrives while this rank is still sending, lands in `out` instead of being copied.
void TcpTransport::send_recv(int to, Tag send_tag, std::span<const std::byte> bytes, int from,
                             Tag recv_tag, std::span<std::byte> out, const Deadline& deadline) {
  const std::function<void()> send_first = [&] { send(to, send_tag, bytes, deadline); };
  receive(from, recv_tag, out, deadline, &send_first);
}

// `send_first`, when given, runs (without mu_) once the receive is posted, or before the
// receive takes a message that came earlier.
void TcpTransport::receive(int from, Tag tag, std::span<std::byte> out, const Deadline& deadline,
                           const std::function<void()>* send_first) {
  std::unique_lock lock(mu_);
  const auto run_send = [&] {
    if (send_first == nullptr) return;
    lock.unlock();
    try {
      (*send_first)();
    } catch (...) {
      lock.lock();
      throw;
    }
    lock.lock();
    send_first = nullptr;
  };
  const Key key{from, tag};
  for (;;) {
    if (!abort_reason_.empty()) throw PeerError(abort_reason_);
    const auto it = incoming_.find(key);
    if (it != incoming_.end() && !it->second.empty()) {
      run_send();
      if (!abort_reason_.empty()) throw PeerError(abort_reason_);
      const auto queued = incoming_.find(key);
      if (queued->second.front().complete) {
        take(queued->second, from, out);
        if (queued->second.empty()) incoming_.erase(queued);
        return;
      }
      // An earlier message under this key is still arriving; it comes first.
      const auto arrived = [&] {
        const auto i = incoming_.find(key);
        return i == incoming_.end() || i->second.empty() || i->second.front().complete ||
               !abort_reason_.empty();
      };
      if (!drive(lock, deadline, arrived)) throw_timeout(from, "did not send in time");
      continue;
    }
    if (from != rank_ && !peers_[static_cast<std::size_t>(from)]->live) {
      run_send();
      throw PeerError(peers_[static_cast<std::size_t>(from)]->failure);
    }
    Posted posted{from, tag, out};
    posted_.push_back(&posted);
    struct Detach {
      TcpTransport* t;
      Posted* p;
      ~Detach() { t->detach(*p); }
    } detach_on_exit{this, &posted};
    run_send();
    const auto settled = [&] { return posted.done || !posted.error.empty(); };
    if (drive(lock, deadline, settled)) {
      if (posted.done) return;
      throw PeerError(posted.error);
    }
    // Past the deadline. A peer that is alive may be failing itself, waiting on a lost host:
    // its abort, if it comes soon, names the cause. Its message, if that comes instead, is
    // too late: the deadline is the caller's, and the receive fails all the same.
    if (!silent(from)) {
      Seconds grace = kCauseGrace;
      if (from != rank_) {
        const auto silent_at = peers_[static_cast<std::size_t>(from)]->last_heard + kSilence;
        grace = std::max<Seconds>(grace, silent_at - Clock::now());
      }
      drive(lock, Deadline::after(grace), settled);
    }
    if (!posted.error.empty()) throw PeerError(posted.error);
    throw_timeout(from, "did not send in time");
  }
}

int TcpTransport::recv_any(Tag tag, std::span<std::byte> out, const Deadline& deadline) {
  std::unique_lock lock(mu_);
  // Looks from the rank after the last one served, wrapping around, so that a busy low rank
  // cannot starve the others.
  const auto find_complete = [&]() -> std::map<Key, std::deque<Incoming>>::iterator {
    for (int i = 0; i < size(); ++i) {
      const int from = (next_any_ + i) % size();
      const auto it = incoming_.find({from, tag});
      if (it != incoming_.end() && !it->second.empty() && it->second.front().complete) return it;
    }
    return incoming_.end();
  };
  const auto ready = [&] { return find_complete() != incoming_.end() || !abort_reason_.empty(); };
  if (!drive(lock, deadline, ready)) throw PeerTimeout(-1, "no message from any rank in time");
  if (!abort_reason_.empty()) throw PeerError(abort_reason_);
  const auto it = find_complete();
  const int from = it->first.first;
  take(it->second, from, out);
  if (it->second.empty()) incoming_.erase(it);
  next_any_ = (from + 1) % size();
  return from;
}

}  // namespace weft::dist
