// Transport: the small point-to-point interface that send/recv of a process group and the
// generic collective engine (weft/dist/engine) are written against. A backend provides one
// Transport per rank, in its backend's folder: threads/ (ranks as threads), shm/ (processes on
// one host, with the shared-memory step engine its groups run their collectives on), tcp/
// (across hosts) and mpi/.
//
// Messages are matched by (source rank, tag) in the order they were sent. Sends are eager:
// send() returns without waiting for the receiver to post a receive, so two ranks that send
// to each other and then receive cannot deadlock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "weft/base/deadline.h"
#include "weft/dist/errors.h"

namespace weft::dist {

using Tag = std::uint64_t;

// Thrown by Transport::recv when the deadline passes; says which rank did not send.
class PeerTimeout : public TimeoutError {
 public:
  PeerTimeout(int peer, const std::string& what) : TimeoutError(what), peer_(peer) {}
  int peer() const { return peer_; }

 private:
  int peer_;
};

class Transport {
 public:
  virtual ~Transport() = default;

  virtual int rank() const = 0;  // this rank in the whole job
  virtual int size() const = 0;  // ranks in the whole job

  // Queues `bytes` for `peer` under `tag`. Throws PeerError if the peer is known to be gone.
  virtual void send(int peer, Tag tag, std::span<const std::byte> bytes,
                    const Deadline& deadline) = 0;

  // Whether send(peer, ...) of `bytes` would return at once, without waiting for the peer to
  // make room: a process group then runs an asynchronous send on its caller's thread rather
  // than handing it to a queue thread (a wake-up on each side). A hint: a send it allowed may
  // still wait, briefly, where another thread filled the room first.
  virtual bool sends_at_once(int /*peer*/, std::size_t /*bytes*/) const { return false; }
  // Whether the job's ranks outnumber the CPUs they may run on, so that an exchange often
  // waits for its peer to be scheduled: the rings then move whole blocks, not pieces. The
  // same on every rank of the transport (the rings' pieces must agree); false where unknown.
  virtual bool ranks_share_cpus() const { return false; }
  // Blocks for the next message from `peer` under `tag` and copies it into `out`, whose size
  // must equal the message's (else PeerError: the ranks disagree about the operation).
  // Throws PeerTimeout when `deadline` passes, PeerError if the peer failed.
  virtual void recv(int peer, Tag tag, std::span<std::byte> out, const Deadline& deadline) = 0;

  // As recv, from whichever peer sends first under `tag`; returns that peer.
  virtual int recv_any(Tag tag, std::span<std::byte> out, const Deadline& deadline) = 0;

  // send(to, send_tag, bytes) and recv(from, recv_tag, out) as one round. This one sends and
  // then receives; a transport that can post the receive first (so that the message lands
  // in `out` rather than in a buffer of its own and is copied) overrides it.
  virtual void send_recv(int to, Tag send_tag, std::span<const std::byte> bytes, int from,
                         Tag recv_tag, std::span<std::byte> out, const Deadline& deadline) {
    send(to, send_tag, bytes, deadline);
    recv(from, recv_tag, out, deadline);
  }

  // Makes every pending and later call on every rank of this transport fail with
  // PeerError(reason): a rank that failed tells the others instead of leaving them waiting.
  virtual void abort(const std::string& reason) = 0;
};

}  // namespace weft::dist
