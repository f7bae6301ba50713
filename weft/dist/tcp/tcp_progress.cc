// Running the tcp transport's connections: one poll() over every socket, by the thread that
// waits (or the background thread while nobody does); incoming frames decoded, checked and
// landed where their receive wants them.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <new>

#include "weft/dist/tcp/tcp_peer.h"
#include "weft/dist/tcp/tcp_transport.h"

namespace weft::dist {
namespace {

using tcp::FrameHeader;
using tcp::FrameKind;

// The longest a polling thread sleeps before it looks at heartbeats again.
constexpr auto kTick = std::chrono::milliseconds(250);
// The background thread watches the sockets only once no call has waited for this long:
// between the calls of a busy job it would only wake when they do, and compete with them
// for the CPU. Meanwhile data that arrives waits in the kernel for the next call.
constexpr auto kIdleGrace = std::chrono::milliseconds(5);

std::span<std::byte> header_bytes(FrameHeader& header) {
  return {reinterpret_cast<std::byte*>(&header), sizeof header};
}

int poll_millis(const Deadline& deadline) {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(
      std::min<Clock::duration>(deadline.remaining(), kTick));
  return static_cast<int>(std::max<std::chrono::milliseconds::rep>(left.count(), 0));
}

}  // namespace

bool TcpTransport::drive(std::unique_lock<std::mutex>& lock, const Deadline& deadline,
                         const std::function<bool()>& done) {
  ++active_;
  struct Leave {
    TcpTransport* t;
    ~Leave() {
      if (--t->active_ == 0) t->last_call_ = Clock::now();
    }
  } leave{this};
  while (!done()) {
    if (deadline.expired()) return false;
    if (polling_) {
      ++waiters_;
      cv_.wait_until(lock, deadline.when());
      --waiters_;
      continue;
    }
    polling_ = true;
    struct Release {
      TcpTransport* t;
      ~Release() {
        t->polling_ = false;
        if (t->waiters_ > 0) t->cv_.notify_all();
      }
    } release{this};
    poll_once(lock, deadline);
  }
  return true;
}

void TcpTransport::poll_once(std::unique_lock<std::mutex>& lock, const Deadline& deadline) {
  pollfds_.clear();
  for (int peer = 0; peer < size(); ++peer) {
    if (peer == rank_ || !peers_[static_cast<std::size_t>(peer)]->live) continue;
    const Peer& p = *peers_[static_cast<std::size_t>(peer)];
    pollfds_.push_back(
        pollfd{p.socket.fd(), static_cast<short>(POLLIN | (p.want_write > 0 ? POLLOUT : 0)), 0});
  }
  pollfds_.push_back(pollfd{wake_fd_.get(), POLLIN, 0});
  lock.unlock();
  const int ready = wait_ready(deadline);
  const int poll_errno = errno;
  lock.lock();
  if (ready < 0 && poll_errno != EINTR) throw SystemError("tcp transport: poll", poll_errno);
  if (pollfds_.back().revents != 0) {
    std::uint64_t count = 0;
    [[maybe_unused]] const ssize_t n = ::read(wake_fd_.get(), &count, sizeof count);
  }
  std::size_t i = 0;
  for (int peer = 0; ready > 0 && peer < size(); ++peer) {
    if (peer == rank_ || i + 1 >= pollfds_.size()) continue;
    Peer& p = *peers_[static_cast<std::size_t>(peer)];
    if (pollfds_[i].fd != p.socket.fd()) continue;  // not in the set: it had failed
    const short revents = pollfds_[i++].revents;
    if (revents & POLLOUT) ++p.writable_seen;
    if (revents & (POLLIN | POLLHUP | POLLERR)) read_available(peer);
  }
  send_heartbeats();
}

// Polls without sleeping for up to spin_ first: a thread that sleeps in poll() takes 20-25 µs
// to wake here (a vCPU halting and being woken), more than a loopback hop. Only ranks that
// have a core each spin (spin_ is zero otherwise): with more ranks than cores, spinning takes
// the core from the rank being waited for (docs/PERFORMANCE_LOG.md, "The tcp transport").
int TcpTransport::wait_ready(const Deadline& deadline) {
  const Clock::time_point spin_until = std::min(Clock::now() + spin_, deadline.when());
  do {
    const int ready = ::poll(pollfds_.data(), pollfds_.size(), 0);
    if (ready != 0) return ready;
  } while (Clock::now() < spin_until);
  return ::poll(pollfds_.data(), pollfds_.size(), poll_millis(deadline));
}

void TcpTransport::read_available(int peer) {
  Peer& p = *peers_[static_cast<std::size_t>(peer)];
  while (p.live) {
    const std::span<std::byte> into = p.in_payload ? p.payload.subspan(p.payload_got)
                                                   : header_bytes(p.header).subspan(p.header_got);
    std::size_t n = 0;
    try {
      n = p.socket.recv_some(into);
    } catch (const net::ConnectionClosed& e) {
      fail_peer(peer, "rank " + std::to_string(peer) +
                          " closed its connection (it exited, crashed or was killed: " + e.what() +
                          ")");
      return;
    } catch (const weft::SystemError& e) {
      fail_peer(peer, "the connection to rank " + std::to_string(peer) + " failed: " + e.what());
      return;
    }
    if (n == 0) return;
    p.last_heard = Clock::now();
    advance(peer, n);
  }
}

void TcpTransport::advance(int peer, std::size_t n) {
  Peer& p = *peers_[static_cast<std::size_t>(peer)];
  if (p.in_payload) {
    p.payload_got += n;
    if (p.payload_got == p.payload.size()) segment_done(peer);
    return;
  }
  p.header_got += n;
  if (p.header_got == sizeof(FrameHeader)) header_done(peer);
}

// Checks the header before anything is allocated for it, and finds where its payload goes.
void TcpTransport::header_done(int peer) {
  Peer& p = *peers_[static_cast<std::size_t>(peer)];
  const FrameHeader& h = p.header;
  const auto malformed = [&](const std::string& what) {
    fail_peer(peer, "rank " + std::to_string(peer) + " sent a malformed frame (" + what +
                        "); its connection is closed");
  };
  if (const std::string problem = tcp::check_frame(h); !problem.empty()) return malformed(problem);
  p.in_payload = true;
  p.payload_got = 0;
  switch (static_cast<FrameKind>(h.kind)) {
    case FrameKind::kHeartbeat:
      p.payload = {};
      break;
    case FrameKind::kAbort:
      p.scratch.resize(h.length);
      p.payload = p.scratch;
      break;
    case FrameKind::kData: {
      const auto it = p.landings.find(h.tag);
      if (h.offset == 0) {
        if (it != p.landings.end()) return malformed("a new message before the last one ended");
        start_message(peer, h);
        if (!p.live) return;
      } else if (it == p.landings.end() || it->second.total != h.total ||
                 it->second.received != h.offset) {
        return malformed("a segment out of order");
      }
      Landing& landing = p.landings.at(h.tag);
      if (landing.posted != nullptr) {
        p.payload = landing.posted->out.subspan(h.offset, h.length);
      } else if (landing.incoming != nullptr) {
        std::vector<std::byte>& data = landing.incoming->data;
        try {
          data.resize(h.offset + h.length);
        } catch (const std::bad_alloc&) {
          fail_peer(peer, "rank " + std::to_string(peer) + " sent a message of " +
                              std::to_string(h.total) + " bytes, more than this process can hold");
          return;
        }
        p.payload = std::span(data).subspan(h.offset, h.length);
      } else {
        p.scratch.resize(h.length);
        p.payload = p.scratch;
      }
      break;
    }
  }
  if (p.payload.empty()) segment_done(peer);
}

void TcpTransport::start_message(int peer, const FrameHeader& h) {
  Peer& p = *peers_[static_cast<std::size_t>(peer)];
  Landing landing{.total = h.total};
  Posted* posted = match_posted(peer, h.tag);
  if (posted != nullptr) std::erase(posted_, posted);
  if (posted != nullptr && posted->out.size() == h.total) {
    posted->matched = true;
    landing.posted = posted;
  } else {
    if (posted != nullptr) {
      posted->error = "rank " + std::to_string(peer) + " sent " + std::to_string(h.total) +
                      " bytes where " + std::to_string(posted->out.size()) +
                      " were expected: the ranks called different operations or sizes (run "
                      "with WEFT_DIST_DEBUG=detail to see each rank's call)";
    }
    std::deque<Incoming>& queue = incoming_[{peer, h.tag}];
    queue.push_back(Incoming{spare_buffer(), h.total});
    landing.incoming = &queue.back();
  }
  p.landings.emplace(h.tag, landing);
}

void TcpTransport::segment_done(int peer) {
  Peer& p = *peers_[static_cast<std::size_t>(peer)];
  p.in_payload = false;
  p.header_got = 0;
  const FrameHeader& h = p.header;
  if (static_cast<FrameKind>(h.kind) == FrameKind::kAbort) {
    abort_locally(std::string(reinterpret_cast<const char*>(p.scratch.data()), p.scratch.size()));
    return;
  }
  if (static_cast<FrameKind>(h.kind) != FrameKind::kData) return;
  const auto it = p.landings.find(h.tag);
  Landing& landing = it->second;
  landing.received += h.length;
  if (landing.received < landing.total) return;
  if (landing.posted != nullptr) landing.posted->done = true;
  if (landing.incoming != nullptr) landing.incoming->complete = true;
  p.landings.erase(it);
}

void TcpTransport::land(Tag tag, std::span<const std::byte> bytes) {
  Posted* posted = match_posted(rank_, tag);
  if (posted != nullptr && posted->out.size() == bytes.size()) {
    std::erase(posted_, posted);
    if (!bytes.empty()) std::memcpy(posted->out.data(), bytes.data(), bytes.size());
    posted->matched = posted->done = true;
  } else {
    incoming_[{rank_, tag}].push_back(Incoming{{bytes.begin(), bytes.end()}, bytes.size(), true});
  }
  if (waiters_ > 0) cv_.notify_all();
}

// Later receives from `peer` that find no message fail with PeerError(reason); messages it
// sent whole before failing can still be received.
void TcpTransport::fail_peer(int peer, const std::string& reason) {
  Peer& p = *peers_[static_cast<std::size_t>(peer)];
  if (!p.live) return;
  p.live = false;
  p.failure = reason;
  p.socket.shutdown();
  for (auto& [tag, landing] : p.landings) {
    if (landing.posted != nullptr) landing.posted->error = reason;
    if (landing.incoming != nullptr) incoming_[{peer, tag}].pop_back();  // the last, unfinished
  }
  p.landings.clear();
  for (Posted* posted : posted_) {
    if (posted->from == peer) posted->error = reason;
  }
  std::erase_if(posted_, [&](const Posted* posted) { return posted->from == peer; });
  if (waiters_ > 0) cv_.notify_all();
}

void TcpTransport::abort_locally(const std::string& reason) {
  if (abort_reason_.empty()) abort_reason_ = reason.empty() ? "aborted" : reason;
  for (Posted* posted : posted_) posted->error = abort_reason_;
  posted_.clear();
  for (auto& peer : peers_) {
    if (!peer) continue;
    for (auto& [tag, landing] : peer->landings) {
      if (landing.posted == nullptr) continue;
      landing.posted->error = abort_reason_;
      landing.posted = nullptr;
    }
  }
  if (waiters_ > 0) cv_.notify_all();
}

// While a call waits, it runs the connections; in between, this thread does, so that peers'
// sends drain into memory, heartbeats go out and failures are seen. It watches the sockets
// without holding polling_ (a call that starts never waits for it), and reads only when it
// finds no call waiting. Woken by a call's data, it sleeps until the calls pause.
void TcpTransport::background_loop() {
  std::unique_lock lock(mu_);
  while (!closing_) {
    if (active_ > 0 || polling_ || Clock::now() - last_call_ < kIdleGrace) {
      idle_.wait_for(lock, kIdleGrace);
      continue;
    }
    pollfds_background_.clear();
    for (int peer = 0; peer < size(); ++peer) {
      if (peer == rank_ || !peers_[static_cast<std::size_t>(peer)]->live) continue;
      pollfds_background_.push_back(
          pollfd{peers_[static_cast<std::size_t>(peer)]->socket.fd(), POLLIN, 0});
    }
    pollfds_background_.push_back(pollfd{wake_fd_.get(), POLLIN, 0});
    lock.unlock();
    ::poll(pollfds_background_.data(), pollfds_background_.size(), static_cast<int>(kTick.count()));
    lock.lock();
    if (closing_ || active_ > 0 || polling_) continue;
    polling_ = true;
    try {
      poll_once(lock, Deadline::after(Seconds(0)));
    } catch (const weft::Error&) {
      // poll() itself failed (out of memory for its set): try again on the next round.
    }
    polling_ = false;
    if (waiters_ > 0) cv_.notify_all();
  }
}

void TcpTransport::wake_poller() {
  const std::uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = ::write(wake_fd_.get(), &one, sizeof one);
}

}  // namespace weft::dist
