// The shm backend's transport: ranks are processes on one host, and each owns a shared-memory
// segment holding one ring per peer (the messages that peer sends it). A sender copies into
// the receiver's ring. A receiving thread moves whole messages from the rings into its Mailbox
// itself while it waits; a sender that finds a ring full wakes the receiving rank's drain
// thread, so sends stay eager (a full ring is drained whatever the receiving rank is doing).
// Waiting is a short spin, then a futex on one of the rank's bell words. A peer that dies is
// noticed within about 100 ms (its /proc entry) and fails receives from it with PeerError.
//
// The rings carry point-to-point messages, and the collectives of a subgroup when the pool of
// regions is used up. The group of all ranks, and every subgroup whose members each reserve
// one of the pooled regions (reserve_region), run their collectives on the engine in
// shm_collectives.h instead, over a region of the same segments (world_collectives,
// collectives_for; the shm backend asks for them). Layout: docs/COLLECTIVES.md.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "weft/base/function_ref.h"
#include "weft/dist/shm/arena.h"
#include "weft/dist/shm/shm_collectives.h"
#include "weft/dist/shm/shm_segment.h"
#include "weft/dist/transport/mailbox.h"
#include "weft/dist/transport/transport.h"
#include "weft/store/store.h"

namespace weft::dist {

namespace shm {
struct Bell;
struct Control;
struct MessageHeader;
struct Ring;
}  // namespace shm

struct ShmTransportOptions {
  std::size_t ring_bytes = 1 << 20;  // per ordered pair of ranks
  Seconds connect_timeout{300};
};

class ShmTransport final : public Transport {
 public:
  // Creates this rank's segment, exchanges names through `store`, maps every peer's, and
  // unlinks its own once all ranks have mapped theirs. Blocks until then or the timeout.
  ShmTransport(int rank, int world_size, std::shared_ptr<store::Store> store,
               ShmTransportOptions options);
  ~ShmTransport() override;

  int rank() const override { return rank_; }
  int size() const override { return world_size_; }
  void send(int peer, Tag tag, std::span<const std::byte> bytes, const Deadline& deadline) override;
  bool sends_at_once(int peer, std::size_t bytes) const override;
  void recv(int peer, Tag tag, std::span<std::byte> out, const Deadline& deadline) override;
  // Posts the receive, then sends: a large message lands straight in `out`.
  void send_recv(int to, Tag send_tag, std::span<const std::byte> bytes, int from, Tag recv_tag,
                 std::span<std::byte> out, const Deadline& deadline) override;
  int recv_any(Tag tag, std::span<std::byte> out, const Deadline& deadline) override;
  void abort(const std::string& reason) override;
  bool ranks_share_cpus() const override { return job_.oversubscribed; }
  // The step engine of the group of every rank, over each rank's first region; made once (the
  // world group's), and it starts this rank on a CPU of its own. `rings`: that group's
  // generic engine, for what the step engine leaves to it.
  std::unique_ptr<shm::Collectives> world_collectives(std::unique_ptr<CollectiveEngine> rings);
  // Engines for subgroups: each rank's segment holds kGroupRegions more regions. Each member
  // reserves one of its own (an index, or -1 when none is left), the members exchange their
  // indices, and if all have one collectives_for builds the engine over them (else nullptr).
  static constexpr int kGroupRegions = 6;
  int reserve_region();
  // members: the group's ranks (global, in group order); regions[i]: members[i]'s index.
  std::unique_ptr<shm::Collectives> collectives_for(const std::vector<int>& members,
                                                    const std::vector<std::int64_t>& regions,
                                                    std::unique_ptr<CollectiveEngine> rings);

 private:
  struct Inbound;  // the drain thread's state for one ring
  struct Posted;   // a receive waiting to be written into

  shm::Control& control(int rank) const;
  shm::Ring& ring(int to, int from) const;  // in `to`'s segment, written by `from`
  std::byte* ring_data(int to, int from) const;
  static void ring(shm::Bell& bell);
  void ring_doorbell(int rank);
  // Waits until `bell` moves past `seen`, `deadline`, or about 100 ms.
  static void wait_bell(shm::Bell& bell, std::uint32_t seen, const Deadline& deadline);
  bool peer_alive(int peer) const;
  // Region `index` of `rank`'s segment: 0 the world's engine, 1 .. kGroupRegions subgroups'.
  std::byte* collective_region(int rank, int index = 0) const;
  std::vector<std::byte*> collective_regions() const;  // the world's, by rank
  // Throws PeerError if the job aborted or `peer` died: the engine's waits call it.
  void check_peer(int peer);
  void mark_aborted();
  void write_message(int peer, Tag tag, std::span<const std::byte> bytes, const Deadline& deadline);
  void drain_loop();
  // Unless another thread is draining (kBusy): moves every whole message in the rings into
  // the mailbox and tells the senders there is room. `receiving_here`: 1 when the caller is a
  // receiving thread, which need not be woken.
  enum class Drained { kBusy, kNothing, kMoved };
  Drained drain_rings(int receiving_here);
  bool drain(int from, Inbound& in);  // requires drain_mu_
  // Waits for `take` (a mailbox lookup: the sender, or -1) to find a message, draining the
  // rings meanwhile. `peer`: the one awaited, -1 for any (for the timeout's message).
  template <class Take>
  int receive(int peer, const Deadline& deadline, const Take& take);
  bool take_posted(Posted& posted);
  Posted* claim(int from, const shm::MessageHeader& header);  // requires drain_mu_
  bool adopt(Posted& posted);                                 // requires drain_mu_
  // recv, running `send_first` once the receive is posted (large messages) or before it waits.
  void recv_after(int peer, Tag tag, std::span<std::byte> out, const Deadline& deadline,
                  FunctionRef<void()> send_first);
  void unpost(Posted& posted);
  void check_peers();
  // Whether this rank can read every peer's memory with process_vm_readv.
  bool can_read_peers() const;
  std::vector<int> pids_of(const std::vector<int>& ranks) const;
  // Where each of `ranks`' arenas is mapped here; empty unless every rank maps every other's.
  std::vector<std::span<std::byte>> arenas_of(const std::vector<int>& ranks) const;

  int rank_;
  int world_size_;
  ShmTransportOptions options_;
  std::shared_ptr<store::Store> store_;
  std::size_t segment_bytes_;
  std::atomic<int> next_group_region_{1};
  std::vector<shm::Segment> segments_;                // index: rank
  std::vector<shm::PeerArena> peer_arenas_;           // index: rank (this rank's stays empty)
  std::vector<std::unique_ptr<std::mutex>> send_mu_;  // whole messages per peer
  std::mutex drain_mu_;                               // one drainer at a time
  std::vector<std::unique_ptr<Inbound>> inbound_;     // guarded by drain_mu_
  std::vector<Posted*> posted_;                       // guarded by drain_mu_; in posting order
  std::vector<std::atomic<bool>> dead_;
  // Per peer: its ring's tail as this rank's sender last read it, never ahead of the real one.
  // Room is counted against it first, so that the line the receiver writes is read only when
  // the ring looks full (a producer's cached tail, as in any single-producer ring).
  std::vector<std::atomic<std::uint64_t>> known_tail_;
  Mailbox mailbox_;
  std::atomic<bool> closing_{false};
  std::atomic<bool> aborted_{false};
  shm::Collectives::JobFacts job_;  // agreed by every rank at start-up
  std::thread drainer_;
};

}  // namespace weft::dist
