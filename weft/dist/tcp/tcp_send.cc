// The tcp transport's sending side: messages cut into segments, each written whole by one
// sender at a time; heartbeats on idle connections; abort frames.
#include <algorithm>
#include <cstring>

#include "weft/dist/tcp/tcp_peer.h"
#include "weft/dist/tcp/tcp_transport.h"

namespace weft::dist {
namespace {

using tcp::FrameHeader;
using tcp::FrameKind;

// A connection with nothing sent for this long gets a heartbeat frame (see kSilence).
constexpr auto kHeartbeat = std::chrono::milliseconds(500);

std::string closed_message(int peer, const std::string& detail) {
  return "rank " + std::to_string(peer) +
         " closed its connection (it exited, crashed or was killed: " + detail + ")";
}

std::span<const std::byte> bytes_of(const FrameHeader& header) {
  return {reinterpret_cast<const std::byte*>(&header), sizeof header};
}

}  // namespace

void TcpTransport::send(int peer, Tag tag, std::span<const std::byte> bytes,
                        const Deadline& deadline) {
  if (bytes.size() > kMaxMessage) {
    throw InvalidArgument("tcp transport: a message of " + std::to_string(bytes.size()) +
                          " bytes exceeds the 4 GiB limit of one message");
  }
  if (peer == rank_) {
    std::lock_guard lock(mu_);
    if (!abort_reason_.empty()) throw PeerError(abort_reason_);
    land(tag, bytes);
    return;
  }
  std::uint64_t offset = 0;
  do {
    const std::uint64_t length = std::min<std::uint64_t>(tcp::kMaxSegment, bytes.size() - offset);
    const FrameHeader header{.kind = static_cast<std::uint32_t>(FrameKind::kData),
                             .tag = tag,
                             .total = bytes.size(),
                             .offset = offset,
                             .length = length};
    send_segment(peer, header, bytes.subspan(offset, length), deadline);
    offset += length;
  } while (offset < bytes.size());
}

void TcpTransport::abort(const std::string& reason) {
  {
    std::lock_guard lock(mu_);
    abort_locally(reason);
  }
  // Best effort, within a second: tell every peer why, so that they fail with the cause
  // rather than a closed connection. A peer that cannot take it in time has its connection
  // closed, which it reports as this rank's failure.
  const std::string text = reason.substr(0, tcp::kMaxAbortReason);
  const FrameHeader header{.kind = static_cast<std::uint32_t>(FrameKind::kAbort),
                           .total = text.size(),
                           .length = text.size()};
  const Deadline soon = Deadline::after(Seconds(1));
  for (int p = 0; p < size(); ++p) {
    if (p == rank_) continue;
    try {
      send_segment(p, header, std::as_bytes(std::span(text)), soon, /*aborting=*/true);
    } catch (const weft::Error&) {
      // Closing the connection is the message, then.
      std::lock_guard lock(mu_);
      fail_peer(p, "this rank aborted: " + text);
    }
  }
}

void TcpTransport::send_segment(int peer, const FrameHeader& header,
                                std::span<const std::byte> payload, Deadline deadline,
                                bool aborting) {
  Peer& p = *peers_[static_cast<std::size_t>(peer)];
  {
    std::unique_lock lock(mu_);
    while (p.sending && p.live) {
      if (deadline.expired()) throw_timeout(peer, "did not take a message in time");
      ++waiters_;
      cv_.wait_until(lock, deadline.when());
      --waiters_;
    }
    if (!p.live) throw PeerError(p.failure);
    p.sending = true;
  }
  struct Release {
    TcpTransport* t;
    Peer& p;
    ~Release() {
      std::lock_guard lock(t->mu_);
      p.sending = false;
      if (t->waiters_ > 0) t->cv_.notify_all();
    }
  } release{this, p};
  const std::span<const std::byte> head = bytes_of(header);
  const std::size_t total = head.size() + payload.size();
  std::size_t done = 0;
  try {
    while (done < total) {
      const std::size_t n = done < head.size()
                                ? p.socket.send_some(head.subspan(done), payload)
                                : p.socket.send_some(payload.subspan(done - head.size()));
      done += n;
      if (done < total && n == 0) wait_writable(peer, deadline, aborting);
    }
  } catch (const net::ConnectionClosed& e) {
    std::lock_guard lock(mu_);
    fail_peer(peer, closed_message(peer, e.what()));
    throw PeerError(closed_message(peer, e.what()));
  } catch (const weft::SystemError& e) {
    // The connection itself failed (unreachable, timed out by the kernel): it is gone.
    const std::string reason =
        "the connection to rank " + std::to_string(peer) + " failed: " + e.what();
    std::lock_guard lock(mu_);
    fail_peer(peer, reason);
    throw PeerError(reason);
  } catch (const weft::Error& e) {
    // Part of the frame may have gone out: the stream is out of step and cannot be used.
    if (done > 0 && done < total) {
      std::lock_guard lock(mu_);
      fail_peer(peer, "rank " + std::to_string(rank_) + " closed its connection to rank " +
                          std::to_string(peer) + " after a send failed part-way: " + e.what());
    }
    throw;
  }
  p.last_sent.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed);
}

void TcpTransport::wait_writable(int peer, Deadline deadline, bool aborting) {
  Peer& p = *peers_[static_cast<std::size_t>(peer)];
  std::unique_lock lock(mu_);
  const std::uint64_t seen = p.writable_seen;
  ++p.want_write;
  if (polling_) wake_poller();  // so that the thread in poll() watches for room here too
  const bool ready = drive(lock, deadline, [&] {
    return p.writable_seen != seen || !p.live || (!aborting && !abort_reason_.empty());
  });
  --p.want_write;
  if (!aborting && !abort_reason_.empty()) throw PeerError(abort_reason_);
  if (!p.live) throw PeerError(p.failure);
  if (!ready) throw_timeout(peer, "did not take a message in time (it is not receiving)");
}

// A heartbeat goes only where nothing is queued in the kernel (so its 40 bytes go out
// whole) and no segment is being sent: a queued byte will reach the peer anyway.
void TcpTransport::send_heartbeats() {
  const Clock::time_point now = Clock::now();
  const FrameHeader heartbeat{.kind = static_cast<std::uint32_t>(FrameKind::kHeartbeat)};
  for (int peer = 0; peer < size(); ++peer) {
    if (peer == rank_) continue;
    Peer& p = *peers_[static_cast<std::size_t>(peer)];
    const Clock::time_point sent{Clock::duration(p.last_sent.load(std::memory_order_relaxed))};
    // A segment part-way out must not be cut by a heartbeat; the caller holds mu_, so no
    // sender can start while this writes.
    if (!p.live || p.sending || now - sent < kHeartbeat) continue;
    try {
      if (p.socket.unsent_bytes() != 0) continue;
      if (p.socket.send_some(bytes_of(heartbeat)) != sizeof heartbeat) {
        fail_peer(peer, "rank " + std::to_string(rank_) +
                            " could not send a whole heartbeat to rank " + std::to_string(peer) +
                            " into an empty socket");
        continue;
      }
      p.last_sent.store(now.time_since_epoch().count(), std::memory_order_relaxed);
    } catch (const net::ConnectionClosed& e) {
      fail_peer(peer, closed_message(peer, e.what()));
    } catch (const weft::SystemError& e) {
      fail_peer(peer, "the connection to rank " + std::to_string(peer) + " failed: " + e.what());
    }
  }
}

}  // namespace weft::dist
