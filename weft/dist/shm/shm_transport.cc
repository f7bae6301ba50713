#include "weft/dist/shm/shm_transport.h"

#include <sched.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <numeric>
#include <optional>

#include "weft/base/futex.h"
#include "weft/base/spin.h"
#include "weft/dist/internal/cpu_sets.h"
#include "weft/dist/shm/shm_collectives.h"

namespace weft::dist {
namespace shm {

constexpr std::uint32_t kMagic = 0x35534657;  // "WFS5"; changed with every change of layout
constexpr Tag kAbortTag = ~Tag{0};            // an abort notice, not a message

// A word that is bumped to wake the threads waiting on it.
struct Bell {
  std::atomic<std::uint32_t> count;
  std::atomic<std::uint32_t> waiters;  // threads sleeping on `count`
};

// The first cache line of every segment.
struct alignas(64) Control {
  // News for this rank's receiving and sending threads: a message, room in a ring, a failure.
  Bell doorbell;
  // Work for its drain thread, which a sender rings only when it needs room (a receiving
  // thread drains the rings itself): woken for every message, the drain thread would compete
  // with the receiver for the core and cost tens of microseconds a message.
  Bell drainer;
  std::atomic<std::int32_t> receiving;  // threads of this rank in a receive, draining the rings
  std::uint32_t magic;
  std::uint32_t world_size;
  std::int32_t pid;
  std::uint64_t ring_bytes;
  std::uint64_t self_address;  // where this segment is mapped in its owner (single-copy probe)
  std::uint64_t arena_bytes;   // its shared arena's size (arena.h), and descriptor there
  std::int32_t arena_fd;
};
static_assert(sizeof(Control) == 64);

// One single-producer, single-consumer byte ring; the data follows the header.
struct Ring {
  alignas(64) std::atomic<std::uint64_t> head;  // bytes written, by the producer
  std::atomic<std::uint32_t> writer_waits;      // 1: the producer sleeps until the tail moves
  alignas(64) std::atomic<std::uint64_t> tail;  // bytes consumed, by the consumer
};

struct MessageHeader {
  Tag tag;
  std::uint64_t length;
};

static_assert(std::atomic<std::uint32_t>::is_always_lock_free);
static_assert(std::atomic<std::uint64_t>::is_always_lock_free);

}  // namespace shm

namespace {

using shm::Control;
using shm::Ring;

constexpr std::size_t ring_stride(std::size_t ring_bytes) { return sizeof(Ring) + ring_bytes; }
constexpr auto kLivenessPeriod = std::chrono::milliseconds(100);
constexpr std::uint64_t kMaxMessage = std::uint64_t{4} << 30;  // as the tcp transport
constexpr int kSpinRounds = 200;
// A receive watches its doorbell this many pauses (a few microseconds) before it yields: a
// sender on another core rings it within a cache line's round trip, and a sched_yield is a
// system call that costs more than the message (docs/PERFORMANCE.md, "Point-to-point").
constexpr int kReceiveSpins = 200;
constexpr auto kYieldFor = std::chrono::milliseconds(1);
// Receives from this size on are written straight into the receiver's buffer when it waits
// (ShmTransport::Posted); smaller ones gain nothing from it.
constexpr std::size_t kDirectBytes = 16 << 10;
constexpr std::uint64_t kWritePiece = 128 << 10;

// A process is gone once /proc has no entry for it, or it is a zombie (killed, not reaped).
bool process_alive(int pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return false;
  std::string line;
  std::getline(stat, line);
  const auto close = line.rfind(')');
  if (close == std::string::npos || close + 2 >= line.size()) return true;
  const char state = line[close + 2];
  return state != 'Z' && state != 'X';
}

// A rank's entry `what` in the store is key_prefix(what) + its rank.
std::string key_prefix(const std::string& what) { return "shm/" + what + "/"; }

std::string key(const std::string& what, int rank) {
  return key_prefix(what) + std::to_string(rank);
}

}  // namespace

// A message being reassembled by the drain thread.
struct ShmTransport::Inbound {
  std::byte header_bytes[sizeof(shm::MessageHeader)];
  std::size_t header_have = 0;
  std::vector<std::byte> payload;  // unless it goes to `direct`
  Posted* direct = nullptr;        // the waiting receive it is written into
  std::size_t payload_have = 0;
  bool in_payload = false;
  shm::MessageHeader header{};
};

// A receive of a large message, waiting for the drainer to write it straight into `out`:
// one copy fewer than the mailbox's, and no buffer to allocate and fault in.
struct ShmTransport::Posted {
  enum State : int { kWaiting, kFilling, kDone, kWithdrawn };
  int from;
  Tag tag;
  std::span<std::byte> out;
  // kWaiting -> kFilling -> kDone by the drainer, or kWaiting -> kWithdrawn by the receiving
  // thread when the mailbox already holds an earlier message for it.
  std::atomic<int> state{kWaiting};
};

ShmTransport::ShmTransport(int rank, int world_size, std::shared_ptr<store::Store> store,
                           ShmTransportOptions options)
    : rank_(rank),
      world_size_(world_size),
      options_(options),
      store_(std::move(store)),
      segment_bytes_(sizeof(Control) +
                     static_cast<std::size_t>(world_size) * ring_stride(options.ring_bytes) +
                     (1 + kGroupRegions) * shm::Collectives::region_bytes()),
      dead_(static_cast<std::size_t>(world_size)),
      known_tail_(static_cast<std::size_t>(world_size)) {
  const auto n = static_cast<std::size_t>(world_size);
  segments_.resize(n);
  peer_arenas_.resize(n);
  segments_[static_cast<std::size_t>(rank)] = shm::Segment::create(segment_bytes_);
  Control& me = control(rank);
  me.magic = shm::kMagic;
  me.world_size = static_cast<std::uint32_t>(world_size);
  me.ring_bytes = options_.ring_bytes;
  me.pid = ::getpid();
  me.self_address = reinterpret_cast<std::uintptr_t>(&me);
  me.arena_fd = -1;    // none: a process whose address space is limited (ulimit -v) may have no
  me.arena_bytes = 0;  // room for one, and the job then runs without in-place collectives
  try {
    const shm::Arena& arena = shm::Arena::instance();
    me.arena_fd = arena.fd();
    me.arena_bytes = arena.capacity();
  } catch (const Error&) {
  }
  store_->set(key("name", rank), segments_[static_cast<std::size_t>(rank)].name());
  int mapped_arenas = 0;
  for (int p = 0; p < world_size; ++p) {
    if (p == rank) continue;
    segments_[static_cast<std::size_t>(p)] =
        shm::Segment::open(store_->get(key("name", p)), segment_bytes_);
    const Control& c = control(p);
    if (c.magic != shm::kMagic || c.world_size != me.world_size || c.ring_bytes != me.ring_bytes) {
      throw PeerError("shm: rank " + std::to_string(p) +
                      "'s segment does not match this one "
                      "(different weft builds or options)");
    }
    peer_arenas_[static_cast<std::size_t>(p)] =
        shm::PeerArena::map(c.pid, c.arena_fd, c.arena_bytes);
    mapped_arenas += peer_arenas_[static_cast<std::size_t>(p)].base() != nullptr ? 1 : 0;
  }
  // Counted before "mapped", so the counts are complete once every rank has mapped: every
  // rank then reads the same facts, and its engines pick the same algorithms.
  store_->add("shm/single_copy", can_read_peers() ? 1 : 0);
  store_->add("shm/peer_arenas", me.arena_fd >= 0 && mapped_arenas == world_size - 1 ? 1 : 0);
  store_->set(key("cpus", rank), internal::allowed_cpus());
  // Every rank has mapped every segment: the names can go, nothing is left in /dev/shm.
  if (store_->add("shm/mapped", 1) == world_size) store_->set("shm/all_mapped", "1");
  store_->wait({"shm/all_mapped"}, options_.connect_timeout);
  segments_[static_cast<std::size_t>(rank)].unlink();
  job_.size = world_size;
  job_.single_copy = store_->add("shm/single_copy", 0) == world_size;
  job_.peer_arenas = store_->add("shm/peer_arenas", 0) == world_size;
  const std::size_t together = internal::cpus_together(*store_, key_prefix("cpus"), world_size);
  job_.oversubscribed = together > 0 && together < n;
  for (int p = 0; p < world_size; ++p) {
    send_mu_.push_back(std::make_unique<std::mutex>());
    inbound_.push_back(std::make_unique<Inbound>());
  }
  drainer_ = std::thread([this] { drain_loop(); });
}

ShmTransport::~ShmTransport() {
  closing_.store(true);
  ring(control(rank_).drainer);
  drainer_.join();
}

Control& ShmTransport::control(int rank) const {
  return *static_cast<Control*>(segments_[static_cast<std::size_t>(rank)].data());
}

Ring& ShmTransport::ring(int to, int from) const {
  auto* base = static_cast<std::byte*>(segments_[static_cast<std::size_t>(to)].data());
  return *reinterpret_cast<Ring*>(
      base + sizeof(Control) + static_cast<std::size_t>(from) * ring_stride(options_.ring_bytes));
}

std::byte* ShmTransport::ring_data(int to, int from) const {
  return reinterpret_cast<std::byte*>(&ring(to, from)) + sizeof(Ring);
}

// The collective engine's regions, after the rings.
std::byte* ShmTransport::collective_region(int rank, int index) const {
  return reinterpret_cast<std::byte*>(&ring(rank, 0)) +
         static_cast<std::size_t>(world_size_) * ring_stride(options_.ring_bytes) +
         static_cast<std::size_t>(index) * shm::Collectives::region_bytes();
}

std::vector<std::byte*> ShmTransport::collective_regions() const {
  std::vector<std::byte*> regions;
  for (int r = 0; r < world_size_; ++r) regions.push_back(collective_region(r));
  return regions;
}

std::unique_ptr<shm::Collectives> ShmTransport::world_collectives(
    std::unique_ptr<CollectiveEngine> rings) {
  std::vector<int> everyone(static_cast<std::size_t>(world_size_));
  std::iota(everyone.begin(), everyone.end(), 0);
  return std::make_unique<shm::Collectives>(
      collective_regions(), rank_, everyone, job_, [this](int peer) { check_peer(peer); },
      pids_of(everyone), arenas_of(everyone), std::move(rings));
}

// A region is used by one group for good: a step count restarting at zero in a region that
// peers remember at a later step would look like progress. kGroupRegions bounds the
// subgroups with an engine; later ones use the general algorithms.
int ShmTransport::reserve_region() {
  const int index = next_group_region_.fetch_add(1);
  return index <= kGroupRegions ? index : -1;
}

std::unique_ptr<shm::Collectives> ShmTransport::collectives_for(
    const std::vector<int>& members, const std::vector<std::int64_t>& regions,
    std::unique_ptr<CollectiveEngine> rings) {
  std::vector<std::byte*> group_regions;
  int me = -1;
  for (std::size_t i = 0; i < members.size(); ++i) {
    if (regions[i] < 1 || regions[i] > kGroupRegions) return nullptr;
    group_regions.push_back(collective_region(members[i], static_cast<int>(regions[i])));
    if (members[i] == rank_) me = static_cast<int>(i);
  }
  if (me < 0) return nullptr;
  return std::make_unique<shm::Collectives>(
      group_regions, me, members, job_, [this](int peer) { check_peer(peer); }, pids_of(members),
      arenas_of(members), std::move(rings));
}

// Reads each peer's magic number out of the peer's own address space: process_vm_readv works
// between processes of one user unless a ptrace policy (Yama, a container's seccomp profile)
// forbids it, and the engine's single-copy algorithms need it between every pair.
bool ShmTransport::can_read_peers() const {
  for (int p = 0; p < world_size_; ++p) {
    if (p == rank_) continue;
    const Control& c = control(p);
    const auto magic_offset =
        reinterpret_cast<const std::byte*>(&c.magic) - reinterpret_cast<const std::byte*>(&c);
    std::uint32_t magic = 0;
    iovec local{&magic, sizeof magic};
    iovec remote{reinterpret_cast<void*>(c.self_address + static_cast<std::uint64_t>(magic_offset)),
                 sizeof magic};
    if (::process_vm_readv(c.pid, &local, 1, &remote, 1, 0) != sizeof magic ||
        magic != shm::kMagic) {
      return false;
    }
  }
  return true;
}

std::vector<int> ShmTransport::pids_of(const std::vector<int>& ranks) const {
  std::vector<int> pids;
  for (int r : ranks) pids.push_back(control(r).pid);
  return pids;
}

std::vector<std::span<std::byte>> ShmTransport::arenas_of(const std::vector<int>& ranks) const {
  std::vector<std::span<std::byte>> arenas;
  if (!job_.peer_arenas) return arenas;
  const shm::Arena& own = shm::Arena::instance();
  for (int r : ranks) {
    const shm::PeerArena& peer = peer_arenas_[static_cast<std::size_t>(r)];
    arenas.push_back(r == rank_ ? std::span(own.base(), own.capacity())
                                : std::span(peer.base(), peer.size()));
  }
  return arenas;
}

void ShmTransport::check_peer(int peer) {
  if (aborted_.load()) throw PeerError(mailbox_.abort_reason());
  if (dead_[static_cast<std::size_t>(peer)].load()) {
    throw PeerError("rank " + std::to_string(peer) + " (pid " + std::to_string(control(peer).pid) +
                    ") died (crashed or was killed)");
  }
}

// After the mailbox holds the reason: wakes this rank's waiters to read it.
void ShmTransport::mark_aborted() {
  aborted_.store(true);
  ring_doorbell(rank_);
  std::vector<std::byte*> all;
  for (int r = 0; r < world_size_; ++r) {
    for (int i = 0; i <= kGroupRegions; ++i) all.push_back(collective_region(r, i));
  }
  shm::Collectives::wake_all(all);
}

void ShmTransport::ring(shm::Bell& bell) {
  bell.count.fetch_add(1);
  if (bell.waiters.load() > 0) futex_wake_all(bell.count, FutexScope::kShared);
}

void ShmTransport::ring_doorbell(int rank) { ring(control(rank).doorbell); }

void ShmTransport::wait_bell(shm::Bell& bell, std::uint32_t seen, const Deadline& deadline) {
  for (int i = 0; i < kSpinRounds; ++i) {
    if (bell.count.load(std::memory_order_acquire) != seen) return;
  }
  const Clock::duration slice = std::min<Clock::duration>(deadline.remaining(), kLivenessPeriod);
  // Announce the sleeper before the futex re-checks the word, so a ringer cannot miss us.
  bell.waiters.fetch_add(1);
  if (bell.count.load() == seen) {
    futex_wait(bell.count, seen, Deadline::after(slice), FutexScope::kShared);
  }
  bell.waiters.fetch_sub(1);
}

bool ShmTransport::peer_alive(int peer) const {
  return !dead_[static_cast<std::size_t>(peer)].load() && process_alive(control(peer).pid);
}

void ShmTransport::send(int peer, Tag tag, std::span<const std::byte> bytes,
                        const Deadline& deadline) {
  if (peer == rank_) {
    mailbox_.deliver(rank_, tag, {bytes.begin(), bytes.end()});
    ring_doorbell(rank_);  // a receive of this rank may be asleep on it
    return;
  }
  std::lock_guard lock(*send_mu_[static_cast<std::size_t>(peer)]);
  write_message(peer, tag, bytes, deadline);
}

// Streams the header and payload into peer's ring, waiting for space as its drainer frees it.
// What is written is published (head, then the doorbell) once a message, or every kWritePiece
// bytes so that the receiver copies out one piece while this thread copies in the next: each
// doorbell is a cache line taken from the receiver's core.
void ShmTransport::write_message(int peer, Tag tag, std::span<const std::byte> bytes,
                                 const Deadline& deadline) {
  const shm::MessageHeader header{tag, bytes.size()};
  const std::span<const std::byte> parts[] = {
      {reinterpret_cast<const std::byte*>(&header), sizeof(header)}, bytes};
  Ring& r = ring(peer, rank_);
  std::byte* data = ring_data(peer, rank_);
  const std::uint64_t cap = options_.ring_bytes;
  std::uint64_t head = r.head.load(std::memory_order_relaxed);  // this thread's (send_mu_)
  std::uint64_t published = head;
  std::atomic<std::uint64_t>& known_tail = known_tail_[static_cast<std::size_t>(peer)];
  std::uint64_t tail = known_tail.load(std::memory_order_relaxed);
  const auto publish = [&] {
    if (head == published) return;
    r.head.store(head, std::memory_order_release);
    published = head;
    ring_doorbell(peer);
  };
  Clock::time_point last_check;  // of the peer's liveness, once the ring fills
  Clock::time_point full_since;  // while the ring stays full
  bool full = false;
  for (const auto& part : parts) {
    std::size_t done = 0;
    while (done < part.size()) {
      const std::uint32_t seen = control(rank_).doorbell.count.load(std::memory_order_acquire);
      std::uint64_t free = cap - (head - tail);
      if (free < part.size() - done) {
        tail = r.tail.load(std::memory_order_acquire);
        known_tail.store(tail, std::memory_order_relaxed);
        free = cap - (head - tail);
      }
      if (free == 0) {
        publish();
        if (deadline.expired()) {
          throw PeerTimeout(peer,
                            "rank " + std::to_string(peer) + " did not take a message in time");
        }
        const auto now = Clock::now();
        if (!full) last_check = full_since = now;
        full = true;
        if (now - last_check > kLivenessPeriod) {
          last_check = now;
          if (!peer_alive(peer)) {
            throw PeerError("rank " + std::to_string(peer) + " (pid " +
                            std::to_string(control(peer).pid) + ") died");
          }
        }
        // A receiving thread there drains the ring; else its drain thread must, and it must
        // before this thread sleeps, whatever happened meanwhile.
        if (now - full_since < kYieldFor) {
          if (control(peer).receiving.load() == 0) ring(control(peer).drainer);
          ::sched_yield();
          continue;
        }
        ring(control(peer).drainer);
        // A drainer rings this rank only when told it waits (drain_rings): told, then one more
        // look, so that one that made room before it saw the word is not waited for.
        r.writer_waits.store(1);
        if (head - r.tail.load() == cap) wait_bell(control(rank_).doorbell, seen, deadline);
        r.writer_waits.store(0, std::memory_order_relaxed);
        continue;
      }
      full = false;
      const std::uint64_t at = head % cap;
      const std::size_t n = static_cast<std::size_t>(
          std::min<std::uint64_t>({free, part.size() - done, cap - at, kWritePiece}));
      std::memcpy(data + at, part.data() + done, n);
      head += n;
      done += n;
      if (head - published >= kWritePiece) publish();
    }
  }
  publish();
}

bool ShmTransport::sends_at_once(int peer, std::size_t bytes) const {
  if (peer == rank_) return true;
  const Ring& r = ring(peer, rank_);
  const std::uint64_t head = r.head.load(std::memory_order_relaxed);
  const std::uint64_t need = sizeof(shm::MessageHeader) + bytes;
  const auto fits = [&](std::uint64_t tail) { return need <= options_.ring_bytes - (head - tail); };
  return fits(known_tail_[static_cast<std::size_t>(peer)].load(std::memory_order_relaxed)) ||
         fits(r.tail.load());
}

// The receiving thread drains the rings itself rather than wait for the drain thread to wake
// and hand the message over: one wake-up a message instead of two. Before it sleeps it yields
// for a while, as the collective engine's waits do: a sleeping rank takes tens of
// microseconds to wake (docs/PERFORMANCE.md, "Point-to-point on shared memory").
template <class Take>
int ShmTransport::receive(int peer, const Deadline& deadline, const Take& take) {
  struct Receiving {
    std::atomic<std::int32_t>& count;
    explicit Receiving(std::atomic<std::int32_t>& c) : count(c) { ++count; }
    ~Receiving() { --count; }
  } receiving(control(rank_).receiving);
  const std::atomic<std::uint32_t>& doorbell = control(rank_).doorbell.count;
  // A sender publishes its ring's head before it rings the doorbell: a receive from one peer
  // watches that head too, and sees the message a cache line's transfer sooner.
  const std::atomic<std::uint64_t>* head =
      peer >= 0 && peer != rank_ ? &ring(rank_, peer).head : nullptr;
  const auto head_now = [head] { return head ? head->load(std::memory_order_relaxed) : 0; };
  std::optional<Clock::time_point> start;  // of the yielding, after the spinning
  int spins = 0;
  for (;;) {
    const std::uint32_t seen = doorbell.load(std::memory_order_acquire);
    const std::uint64_t head_seen = head_now();
    // Drained first: a peer's last message is in the mailbox before its death is reported.
    const Drained drained = drain_rings(1);
    if (const int from = take(); from >= 0) return from;
    if (drained == Drained::kNothing && !job_.oversubscribed && spins < kReceiveSpins) {
      while (spins < kReceiveSpins && doorbell.load(std::memory_order_acquire) == seen &&
             head_now() == head_seen) {
        cpu_relax();
        ++spins;
      }
      continue;
    }
    if (deadline.expired()) {
      throw PeerTimeout(peer, peer >= 0
                                  ? "no message from rank " + std::to_string(peer) + " in time"
                                  : "no message from any rank in time");
    }
    if (drained == Drained::kMoved) continue;
    if (!start) start = Clock::now();
    // Another thread drains: what it moves may be this one's, and it rings no one when it
    // moves nothing, so this thread looks again rather than sleep.
    if (drained == Drained::kBusy || Clock::now() - *start < kYieldFor) {
      ::sched_yield();
      continue;
    }
    wait_bell(control(rank_).doorbell, seen, deadline);
  }
}

void ShmTransport::recv(int peer, Tag tag, std::span<std::byte> out, const Deadline& deadline) {
  recv_after(peer, tag, out, deadline, [] {});
}

// The receive is posted before the send starts: in a ring round the peer's message arrives
// while this rank is still sending, and one larger than the ring is drained (by the drain
// thread) before the receive would otherwise be posted, into a buffer of the mailbox's from
// which it is copied again.
void ShmTransport::send_recv(int to, Tag send_tag, std::span<const std::byte> bytes, int from,
                             Tag recv_tag, std::span<std::byte> out, const Deadline& deadline) {
  recv_after(from, recv_tag, out, deadline, [&] { send(to, send_tag, bytes, deadline); });
}

void ShmTransport::recv_after(int peer, Tag tag, std::span<std::byte> out, const Deadline& deadline,
                              FunctionRef<void()> send_first) {
  if (out.size() < kDirectBytes) {
    send_first();
    receive(peer, deadline, [&] { return mailbox_.try_recv(peer, tag, out) ? peer : -1; });
    return;
  }
  Posted posted{.from = peer, .tag = tag, .out = out};
  {
    std::lock_guard lock(drain_mu_);
    if (!adopt(posted)) posted_.push_back(&posted);
  }
  struct Unpost {
    ShmTransport& transport;
    Posted& posted;
    ~Unpost() { transport.unpost(posted); }
  } unpost{*this, posted};
  send_first();
  receive(peer, deadline, [&] { return take_posted(posted) ? peer : -1; });
}

bool ShmTransport::take_posted(Posted& posted) {
  for (;;) {
    int state = posted.state.load(std::memory_order_acquire);
    if (state == Posted::kWithdrawn) return mailbox_.try_recv(posted.from, posted.tag, posted.out);
    const bool queued = mailbox_.has(posted.from, posted.tag);
    try {
      mailbox_.throw_if_failed(posted.from, state == Posted::kDone || queued);
    } catch (const PeerError&) {
      // The peer failed, or the job aborted; the message may have landed meanwhile.
      if (state != Posted::kDone && posted.state.load(std::memory_order_acquire) == Posted::kDone)
        continue;
      throw;
    }
    if (state == Posted::kDone) return true;
    if (state == Posted::kFilling || !queued) return false;
    // A message that reached the mailbox first comes first: take it there, unless the
    // drainer claimed this receive meanwhile (then it is for a later message, and it
    // cannot have, as the mailbox held an earlier one: claim() checks).
    posted.state.compare_exchange_strong(state, Posted::kWithdrawn);
  }
}

// Requires drain_mu_. The first receive waiting for this message, if it can take it whole.
ShmTransport::Posted* ShmTransport::claim(int from, const shm::MessageHeader& header) {
  for (auto it = posted_.begin(); it != posted_.end(); ++it) {
    Posted& p = **it;
    if (p.from != from || p.tag != header.tag) continue;
    // A size the receiver does not expect goes to the mailbox, whose receive reports it.
    if (p.out.size() != header.length || mailbox_.has(from, header.tag)) return nullptr;
    int waiting = Posted::kWaiting;
    if (!p.state.compare_exchange_strong(waiting, Posted::kFilling)) continue;  // withdrawn
    posted_.erase(it);
    return &p;
  }
  return nullptr;
}

// Requires drain_mu_. A message for `posted` may be on its way into the mailbox already (its
// sender filled the ring before the receive came): the rest of it goes straight to `posted`.
bool ShmTransport::adopt(Posted& posted) {
  if (posted.from == rank_) return false;
  Inbound& in = *inbound_[static_cast<std::size_t>(posted.from)];
  if (!in.in_payload || in.direct != nullptr || in.header.tag != posted.tag ||
      in.header.length != posted.out.size() || mailbox_.has(posted.from, posted.tag)) {
    return false;
  }
  std::memcpy(posted.out.data(), in.payload.data(), in.payload_have);
  std::vector<std::byte>().swap(in.payload);
  in.direct = &posted;
  posted.state.store(Posted::kFilling);
  return true;
}

// A receive that leaves (done, or failed) is forgotten; a message it was half filled with
// goes on into a buffer of the drainer's, for the mailbox.
void ShmTransport::unpost(Posted& posted) {
  std::lock_guard lock(drain_mu_);
  std::erase(posted_, &posted);
  if (posted.state.load() != Posted::kFilling) return;
  for (auto& in : inbound_) {
    if (in->direct != &posted) continue;
    const auto have = posted.out.first(in->payload_have);
    in->payload.reserve(static_cast<std::size_t>(in->header.length));
    in->payload.assign(have.begin(), have.end());
    in->direct = nullptr;
  }
}

int ShmTransport::recv_any(Tag tag, std::span<std::byte> out, const Deadline& deadline) {
  return receive(-1, deadline, [&] { return mailbox_.try_recv_any(tag, out).value_or(-1); });
}

void ShmTransport::abort(const std::string& reason) {
  mailbox_.abort(reason);
  mark_aborted();
  const Deadline soon = Deadline::after(Seconds(1));
  for (int p = 0; p < world_size_; ++p) {
    if (p == rank_ || dead_[static_cast<std::size_t>(p)].load()) continue;
    std::unique_lock lock(*send_mu_[static_cast<std::size_t>(p)], std::try_to_lock);
    if (!lock.owns_lock()) continue;  // a send to it is stuck; its own failure will show
    try {
      write_message(p, shm::kAbortTag, std::as_bytes(std::span(reason)), soon);
      ring(control(p).drainer);  // it may be in a collective, receiving nothing
    } catch (const weft::Error&) {
      // That peer is gone or stuck: it learns nothing from us, and fails on its own.
    }
  }
}

// Moves every whole message available in `from`'s ring into the mailbox; true if it moved
// any bytes.
bool ShmTransport::drain(int from, Inbound& in) {
  Ring& r = ring(rank_, from);
  const std::byte* data = ring_data(rank_, from);
  const std::uint64_t cap = options_.ring_bytes;
  bool moved = false;
  // A header rejected as malformed stays in place: this ring is not read again.
  if (!in.in_payload && in.header_have == sizeof(in.header)) return false;
  for (;;) {
    const std::uint64_t tail = r.tail.load(std::memory_order_relaxed);
    const std::uint64_t avail = r.head.load(std::memory_order_acquire) - tail;
    if (avail == 0) return moved;
    const std::uint64_t at = tail % cap;
    const std::uint64_t want =
        in.in_payload ? in.header.length - in.payload_have : sizeof(in.header) - in.header_have;
    const auto n = static_cast<std::size_t>(std::min<std::uint64_t>({avail, want, cap - at}));
    const std::byte* src = data + at;
    if (!in.in_payload) {
      std::memcpy(in.header_bytes + in.header_have, src, n);
    } else if (in.direct != nullptr) {
      std::memcpy(in.direct->out.data() + in.payload_have, src, n);
    } else {
      in.payload.insert(in.payload.end(), src, src + n);
    }
    r.tail.store(tail + n, std::memory_order_release);
    moved = true;
    if (!in.in_payload) {
      in.header_have += n;
      if (in.header_have < sizeof(in.header)) continue;
      std::memcpy(&in.header, in.header_bytes, sizeof(in.header));
      if (in.header.length > kMaxMessage) {
        // Never allocate what a corrupted header claims: this peer's stream is unusable.
        dead_[static_cast<std::size_t>(from)].store(true);
        mailbox_.fail_peer(from, "rank " + std::to_string(from) +
                                     " wrote a malformed message "
                                     "header into shared memory");
        return moved;
      }
      in.direct = in.header.tag == shm::kAbortTag ? nullptr : claim(from, in.header);
      // Reserved, not filled: its pages are faulted in as the message arrives.
      if (in.direct == nullptr) in.payload.reserve(static_cast<std::size_t>(in.header.length));
      in.payload_have = 0;
      in.in_payload = true;
    } else {
      in.payload_have += n;
    }
    if (in.in_payload && in.payload_have == in.header.length) {
      if (in.direct != nullptr) {
        in.direct->state.store(Posted::kDone, std::memory_order_release);
      } else if (in.header.tag == shm::kAbortTag) {
        mailbox_.abort(
            std::string(reinterpret_cast<const char*>(in.payload.data()), in.payload.size()));
        mark_aborted();
      } else {
        mailbox_.deliver(from, in.header.tag, std::move(in.payload));
      }
      in = Inbound{};
    }
  }
}

void ShmTransport::check_peers() {
  for (int p = 0; p < world_size_; ++p) {
    if (p == rank_ || dead_[static_cast<std::size_t>(p)].load()) continue;
    if (!process_alive(control(p).pid)) {
      dead_[static_cast<std::size_t>(p)].store(true);
      mailbox_.fail_peer(p, "rank " + std::to_string(p) + " (pid " +
                                std::to_string(control(p).pid) + ") died (crashed or was killed)");
      ring_doorbell(rank_);  // its receivers learn it
      shm::Collectives::wake_all(collective_regions());
    }
  }
}

ShmTransport::Drained ShmTransport::drain_rings(int receiving_here) {
  std::unique_lock lock(drain_mu_, std::try_to_lock);
  if (!lock.owns_lock()) return Drained::kBusy;
  bool moved = false;
  for (int p = 0; p < world_size_; ++p) {
    if (p == rank_) continue;
    if (drain(p, *inbound_[static_cast<std::size_t>(p)])) {
      moved = true;
      // Room made: a sender asleep for it is woken. The tail is bumped in the same total
      // order as the sender's flag (write_message), so that one of the two sees the other.
      Ring& r = ring(rank_, p);
      r.tail.fetch_add(0);
      if (r.writer_waits.load() != 0) ring_doorbell(p);
    }
  }
  lock.unlock();
  // What was moved may be another receiving thread's message, and that thread may have
  // gone to sleep while this one held the lock.
  if (moved && control(rank_).receiving.load() > receiving_here) ring_doorbell(rank_);
  return moved ? Drained::kMoved : Drained::kNothing;
}

// The drain thread: waits on its bell, then empties every inbound ring. It blocks without a
// deadline on purpose (it serves the rank for its whole life) but wakes every 100 ms to check
// that its peers are alive (and so also moves what no one has received meanwhile); the
// destructor ends it.
void ShmTransport::drain_loop() {
  shm::Bell& bell = control(rank_).drainer;
  auto last_check = Clock::now();
  while (!closing_.load()) {
    const std::uint32_t seen = bell.count.load(std::memory_order_acquire);
    // Busy: a receiving thread drains; a sender that finds its ring full rings this bell.
    const bool moved = drain_rings(0) == Drained::kMoved;
    if (Clock::now() - last_check > kLivenessPeriod) {
      last_check = Clock::now();
      check_peers();
    }
    if (!moved) wait_bell(bell, seen, Deadline::after(Seconds(1)));
  }
}

}  // namespace weft::dist
