// Transport: the small point-to-point interface every collective algorithm is written
// against (weft/dist/algorithms). A backend provides one Transport per rank, each in a folder
// of its own: transport/thread (ranks as threads), transport/shm (processes on one host, with
// a shared-memory step engine for the collectives: DirectCollectives below) and
// transport/tcp (across hosts).
//
// Messages are matched by (source rank, tag) in the order they were sent. Sends are eager:
// send() returns without waiting for the receiver to post a receive, so two ranks that send
// to each other and then receive cannot deadlock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "weft/base/deadline.h"
#include "weft/dist/errors.h"
#include "weft/dist/transport/direct_collectives.h"

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
  virtual void send(int peer, Tag tag, std::span<const std::byte> bytes, Deadline deadline) = 0;

  // Blocks for the next message from `peer` under `tag` and copies it into `out`, whose size
  // must equal the message's (else PeerError: the ranks disagree about the operation).
  // Throws PeerTimeout when `deadline` passes, PeerError if the peer failed.
  virtual void recv(int peer, Tag tag, std::span<std::byte> out, Deadline deadline) = 0;

  // As recv, from whichever peer sends first under `tag`; returns that peer.
  virtual int recv_any(Tag tag, std::span<std::byte> out, Deadline deadline) = 0;

  // The arrival board, for naming the ranks a timed-out collective waited for: a rank notes
  // that it entered the collective tagged `op` (of a group of `group_size` ranks), and on a
  // timeout asks which of `ranks` (global) have not. Transports that cannot tell return
  // std::nullopt (the default); the timeout then names the rank it was waiting on.
  virtual void note_arrival(Tag /*op*/, int /*group_size*/) {}
  virtual std::optional<std::vector<int>> not_arrived(Tag /*op*/,
                                                      const std::vector<int>& /*ranks*/) {
    return std::nullopt;
  }

  // Collectives over all of this transport's ranks that bypass send/recv, for the group of
  // all ranks in rank order; handed out once (later calls get nullptr). nullptr by default.
  virtual std::unique_ptr<DirectCollectives> take_direct_collectives() { return nullptr; }
  // The same for other groups, from a small pool of engine regions per rank: each member
  // reserves one of its own (reserve_direct_region: an index, or -1 when none is left), the
  // members exchange their indices, and if all have one, direct_collectives_for builds the
  // engine over them. Transports without an engine keep the defaults.
  virtual bool has_direct_regions() const { return false; }
  virtual int reserve_direct_region() { return -1; }
  // members: the group's ranks (global, in group order); regions[i]: members[i]'s index.
  virtual std::unique_ptr<DirectCollectives> direct_collectives_for(
      const std::vector<int>& /*members*/, const std::vector<int>& /*regions*/) {
    return nullptr;
  }

  // The largest message send() takes; ProcessGroup rejects larger buffers up front.
  virtual std::size_t max_message_bytes() const { return static_cast<std::size_t>(-1); }

  // Makes every pending and later call on every rank of this transport fail with
  // PeerError(reason): a rank that failed tells the others instead of leaving them waiting.
  virtual void abort(const std::string& reason) = 0;
};

}  // namespace weft::dist
