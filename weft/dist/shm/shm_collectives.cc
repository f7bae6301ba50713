#include "weft/dist/shm/shm_collectives.h"

#include <sched.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <exception>
#include <optional>
#include <string>
#include <utility>

#include "weft/base/futex.h"
#include "weft/base/spin.h"
#include "weft/dist/shm/arena.h"
#include "weft/dist/shm/vector_copy.h"
#include "weft/dist/transport/transport.h"

namespace weft::dist::shm {

// The first cache line of a region: the last step its rank published, and how many threads
// (of any rank) sleep waiting for it to move.
struct alignas(64) Collectives::Line {
  std::atomic<std::uint32_t> published;
  std::atomic<std::uint32_t> waiters;
};

namespace {

static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t));

// Waiting: checks of the flag before yielding (when every rank has a core of its own), then
// how long to keep yielding before sleeping on the futex. Measured (docs/PERFORMANCE_LOG.md,
// "Spin, yield, sleep"): spinning only helps while the peer runs on another core; with more
// ranks than cores it steals the core from the rank being waited for, so oversubscribed ranks
// yield at once.
// Sleeping costs about 25 us per wake-up, so ranks yield for a while before they sleep.
constexpr int kSpinChecks = 100;
constexpr auto kYieldFor = std::chrono::milliseconds(1);
constexpr auto kSleepSlice = std::chrono::milliseconds(100);
constexpr std::size_t kReduceBlockBytes = 4096;
// Fewer, larger kernel copies measured faster, though the scratch then outgrows L2 (2-rank
// all-reduce, docs/PERFORMANCE_LOG.md, "Single copy's chunk": 4 MiB in 386-391 us with 1-2 MiB
// chunks, 393-405 with 512 KiB, 403-405 with 256 KiB).
constexpr std::size_t kSingleCopyChunkBytes = std::size_t{1} << 20;
// An in-place all-reduce's chunk: reduced into this rank's buffer and the next's, then copied
// to the others' from L2 (docs/COLLECTIVES.md, "Shared buffers").
constexpr std::size_t kMappedChunkBytes = std::size_t{64} << 10;
// With more ranks than cores, broadcasts of SharedBuffers run in place only from this size:
// the root of one must wait for the others to copy, a round of the scheduler (16 us on 4 ranks
// of 2 vCPUs), where through the slots it leaves up to 6 chunks ahead of them
// (docs/COLLECTIVES.md, "Shared buffers").
constexpr std::size_t kOversubscribedInPlaceBroadcastMin = std::size_t{512} << 10;
// Broadcast chunks through the slots: measured in docs/PERFORMANCE_LOG.md, "Slots and chunks"
// (64 KiB: 6.8-7.0 GB/s in one chunk, 7.8-8.1 in four).
constexpr std::size_t kBroadcastPieces = 4;
constexpr std::size_t kMinBroadcastChunk = std::size_t{16} << 10;

bool reached(std::uint32_t published, std::uint32_t step) {
  return static_cast<std::int32_t>(published - step) >= 0;  // wraps after 2^31 steps
}

// Below glibc's `rep movsb` threshold its memcpy is the quickest (and small messages are the
// latency-critical ones).
constexpr std::size_t kVectorCopyMin = 2048;

void copy_chunk(std::byte* dst, const std::byte* src, std::size_t bytes) {
  if (bytes < kVectorCopyMin) {
    std::memcpy(dst, src, bytes);
  } else {
    vector_copy(dst, src, bytes);
  }
}

void copy_bytes(std::byte* dst, const std::byte* src, std::size_t bytes) {
  if (dst != src && bytes > 0) copy_chunk(dst, src, bytes);
}

}  // namespace

// The start of each slot: the step it holds (stored last, with release: a reader that sees
// it sees the data) and the call. It shares its cache line with a small message, so a reader
// polling for the step of a small message receives the message in the same transfer, and
// nothing else crosses between cores.
struct Collectives::SlotHeader {
  std::atomic<std::uint32_t> step;
  std::uint32_t unused;
  Call call;
  std::int64_t arena_offset;  // where the call's buffer lies in its rank's arena, or -1
};

namespace {
// A slot: its header (32 bytes) and, on the same cache line, the start of a small message;
// larger payloads start on the next line, where the vector copies run aligned (a copy 32
// bytes off the line measured 6-13 GB/s against 22-24 aligned: docs/PERFORMANCE_LOG.md,
// "Copies through the slots").
constexpr std::size_t kSlotHeader = 32;
constexpr std::size_t kBulkAt = 64;
constexpr std::size_t kSlotStride = kBulkAt + Collectives::kSlotBytes;
static_assert(kSlotHeader + kVectorCopyMin <= kSlotStride);

std::string describe(const Collectives::Call& c) {
  return std::string(op_name(static_cast<Op>(c.op))) + " of " + std::to_string(c.count) + " " +
         std::string(dtype_name(static_cast<DType>(c.dtype))) + " elements" +
         (c.root >= 0 ? " from root " + std::to_string(c.root) : "");
}
}  // namespace

std::size_t Collectives::region_bytes() {
  static_assert(sizeof(SlotHeader) <= kSlotHeader);
  return sizeof(Line) + kSlots * kSlotStride;
}

void Collectives::wake_all(const std::vector<std::byte*>& regions) {
  for (std::byte* region : regions) {
    if (region != nullptr) {
      futex_wake_all(reinterpret_cast<Line*>(region)->published, FutexScope::kShared);
    }
  }
}

Collectives::Collectives(std::vector<std::byte*> regions, int rank, std::vector<int> job_ranks,
                         JobFacts job, std::function<void(int)> check_peer, std::vector<int> pids,
                         std::vector<std::span<std::byte>> arenas,
                         std::unique_ptr<CollectiveEngine> rings)
    : ForwardingEngine(std::move(rings)),
      regions_(std::move(regions)),
      rank_(rank),
      job_ranks_(std::move(job_ranks)),
      check_peer_(std::move(check_peer)),
      oversubscribed_(job.oversubscribed),
      known_(regions_.size(), 0),
      can_read_peers_(job.single_copy),
      pids_(std::move(pids)),
      arenas_(std::move(arenas)) {
  cpu_set_t cpus;
  if (size() == job.size && ::sched_getaffinity(0, sizeof(cpus), &cpus) == 0) {
    start_on_own_cpu(cpus);
  }
}

// Ranks forked by one launcher start on the same CPU, and since waiting ranks spin and yield
// rather than sleep, the scheduler takes milliseconds to separate them (docs/PERFORMANCE.md).
// Moving this thread to the (rank mod CPUs)-th allowed CPU and then allowing every CPU again
// spreads the ranks from the start without binding them. With more ranks than CPUs it also
// decides which ranks share a CPU, and the balancer then mostly leaves them there: rank 0 (the
// barrier's releaser) shares with rank 2 on two CPUs, which measured faster than whatever
// pairs the balancer made (docs/PERFORMANCE_LOG.md, "CPU placement").
void Collectives::start_on_own_cpu(const cpu_set_t& allowed) {
  int index = rank_ % CPU_COUNT(&allowed);
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &allowed) || index-- > 0) continue;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    if (::sched_setaffinity(0, sizeof(one), &one) == 0) {
      ::sched_setaffinity(0, sizeof(allowed), &allowed);
    }
    return;
  }
}

Collectives::Line& Collectives::line(int rank) const {
  return *reinterpret_cast<Line*>(regions_[static_cast<std::size_t>(rank)]);
}

std::byte* Collectives::slot_start(int rank, std::uint32_t step) const {
  return regions_[static_cast<std::size_t>(rank)] + sizeof(Line) + (step % kSlots) * kSlotStride;
}

std::byte* Collectives::slot(int rank, std::uint32_t step) const {
  return slot_start(rank, step) + kBulkAt;
}

std::byte* Collectives::payload(int rank, std::uint32_t step, std::size_t bytes) const {
  return bytes < kVectorCopyMin ? slot_start(rank, step) + kSlotHeader : slot(rank, step);
}

Collectives::SlotHeader& Collectives::header(int rank, std::uint32_t step) const {
  return *reinterpret_cast<SlotHeader*>(slot_start(rank, step));
}

Collectives::Call& Collectives::call_of(int rank, std::uint32_t step) const {
  return header(rank, step).call;
}

void Collectives::start(Op op, std::uint64_t count, DType dtype, int root) {
  // A job another rank aborted fails here, before this call could complete on data that
  // rank published for the operation it then gave up.
  check_peer_(job_rank(rank_));
  call_ = Call{count, root, static_cast<std::uint8_t>(op), static_cast<std::uint8_t>(dtype)};
  offset_ = -1;
}

void Collectives::offer_in_place(const Buffer& buf, std::size_t from) {
  if (arenas_.empty() || buf.size_bytes() < from) return;
  offset_ = offset_in(arenas_[static_cast<std::size_t>(rank_)], buf.data, buf.size_bytes());
}

std::byte* Collectives::mapped_buffer(int rank, std::uint32_t step, std::size_t bytes) const {
  const std::int64_t at = header(rank, step).arena_offset;
  if (at < 0) return nullptr;
  const std::span<std::byte> arena = arenas_[static_cast<std::size_t>(rank)];
  if (bytes > arena.size() || static_cast<std::size_t>(at) > arena.size() - bytes) {
    throw PeerError("dist: rank " + std::to_string(job_rank(rank)) + " published a buffer of " +
                    std::to_string(bytes) + " bytes at " + std::to_string(at) +
                    ", outside its shared arena of " + std::to_string(arena.size()) +
                    " bytes (a corrupted segment or mismatched weft builds)");
  }
  return arena.data() + at;
}

bool Collectives::any_buffer_shared(std::uint32_t step) const {
  for (int q = 0; q < size() && !arenas_.empty(); ++q) {
    if (header(q, step).arena_offset >= 0) return true;
  }
  return false;
}

std::vector<std::byte*> Collectives::mapped_buffers(std::uint32_t step, std::size_t bytes) const {
  if (offset_ < 0) return {};  // then some rank's is not: this one's
  std::vector<std::byte*> bufs;
  for (int q = 0; q < size(); ++q) {
    std::byte* b = mapped_buffer(q, step, bytes);
    if (b == nullptr) return {};
    bufs.push_back(b);
  }
  return bufs;
}

class Collectives::TimedStores {
 public:
  // writes: whether this rank writes its slots in the operation (a broadcast's root only).
  // in_place: an in-place operation on SharedBuffers (timed apart from the slots').
  TimedStores(Collectives& c, Op op, std::size_t bytes, bool writes = true, bool in_place = false)
      : c_(c) {
    if (writes) choice_ = c.slot_stores_.choose(op, bytes, in_place);
    c.stream_ = choice_.streaming;
    if (choice_.timed) start_ = std::chrono::steady_clock::now();
  }
  TimedStores(const TimedStores&) = delete;
  TimedStores& operator=(const TimedStores&) = delete;
  // The operation went on in place: its time says nothing of this choice.
  void forget() { choice_.timed = false; }
  ~TimedStores() {
    c_.stream_ = false;
    if (choice_.timed && std::uncaught_exceptions() == 0)
      c_.slot_stores_.record(choice_, std::chrono::steady_clock::now() - start_);
  }

 private:
  Collectives& c_;
  SlotStores::Choice choice_;
  std::chrono::steady_clock::time_point start_;
};

void Collectives::write_slot(std::byte* dst, const std::byte* src, std::size_t bytes) const {
  if (stream_) {
    stream_copy(dst, src, bytes);
  } else {
    copy_chunk(dst, src, bytes);
  }
}

void Collectives::check_same_call(int rank, std::uint32_t step) const {
  const Call theirs = call_of(rank, step);
  if (theirs == call_) return;
  throw InvalidArgument(
      "dist: the ranks' collectives do not match: rank " + std::to_string(job_rank(rank)) +
      " called " + describe(theirs) + " where this rank called " + describe(call_) +
      "; every rank must make the same calls in the same order with the same sizes");
}

std::byte* Collectives::begin_step(const Deadline& deadline) {
  // Step t reads slots t and t - 1 (the sliced all-reduce reads the previous step's
  // reductions), and a rank publishes t + 1 only after its reads of step t: so slot s may be
  // rewritten once every rank has published s + 1 - kSlots + 1.
  wait_all(step_ + 3 - kSlots, deadline, /*check=*/false);
  ++step_;
  call_of(rank_, step_) = call_;  // published with the step
  header(rank_, step_).arena_offset = offset_;
  return slot(rank_, step_);
}

void Collectives::publish() {
  header(rank_, step_).step.store(step_, std::memory_order_release);
  Line& mine = line(rank_);
  // seq_cst on both sides (here and in wait_long): a sleeper counts itself before re-reading
  // `published`, so either it sees the new step or we see it and wake it.
  mine.published.store(step_, std::memory_order_seq_cst);
  if (mine.waiters.load(std::memory_order_seq_cst) > 0) {
    futex_wake_all(mine.published, FutexScope::kShared);
  }
}

// A rank's slot for step t holds t once it is published there (or a later step that reuses
// the slot, which also means t was published), so polling that slot's header answers the
// question, and for a small message brings the data along. known_ remembers what was seen:
// the reuse wait of begin_step is then mostly answered without reading anything.
void Collectives::wait_for(int rank, std::uint32_t step, const Deadline& deadline) {
  std::uint32_t& known = known_[static_cast<std::size_t>(rank)];
  if (reached(known, step)) return;
  const std::atomic<std::uint32_t>& at = header(rank, step).step;
  for (int i = 0;; ++i) {
    if (reached(at.load(std::memory_order_acquire), step)) break;
    if (oversubscribed_ || i >= kSpinChecks) {
      wait_long(rank, step, deadline);
      break;
    }
    cpu_relax();
  }
  known = step;
}

void Collectives::wait_long(int rank, std::uint32_t step, const Deadline& deadline) {
  Line& l = line(rank);
  const std::atomic<std::uint32_t>& at = header(rank, step).step;
  const auto start = Clock::now();
  for (;;) {
    const std::uint32_t seen = l.published.load(std::memory_order_acquire);
    if (reached(seen, step) || reached(at.load(std::memory_order_acquire), step)) return;
    check_peer_(job_rank(rank));
    if (deadline.expired()) {
      throw PeerTimeout(job_rank(rank),
                        "rank " + std::to_string(job_rank(rank)) + " did not reach the collective");
    }
    if (Clock::now() - start < kYieldFor) {
      ::sched_yield();
      continue;
    }
    l.waiters.fetch_add(1, std::memory_order_seq_cst);
    if (l.published.load(std::memory_order_seq_cst) == seen) {
      const auto slice = std::min<Clock::duration>(deadline.remaining(), kSleepSlice);
      futex_wait(l.published, seen, Deadline::after(slice), FutexScope::kShared);
    }
    l.waiters.fetch_sub(1, std::memory_order_seq_cst);
  }
}

void Collectives::wait_all(std::uint32_t step, const Deadline& deadline, bool check) {
  for (int r = 0; r < size(); ++r) {
    if (r == rank_) continue;
    wait_for(r, step, deadline);
    if (check) check_same_call(r, step);
  }
}

std::size_t Collectives::block_chunk(std::size_t element_bytes) const {
  const std::size_t per_block = kSlotBytes / static_cast<std::size_t>(size());
  const std::size_t aligned = per_block / 64 * 64;  // blocks start on cache lines
  return std::max<std::size_t>(1, aligned / element_bytes);
}

// Block by block, so that a block written to `out` is still in L1 when it is copied to
// `also_out`. `out` may be one of the sources; the first two are combined in one pass, and
// when `out` is a later source the block is reduced in an L1 buffer first. Two sources and
// no second output make one pass with nothing to keep in L1: one call then.
void Collectives::reduce_in_rank_order(std::byte* out, std::byte* also_out,
                                       FunctionRef<const std::byte*(int)> src, std::size_t count,
                                       DType dtype, ReduceOp op) const {
  if (size() == 2 && also_out == nullptr) {
    reduce_pair(out, src(0), src(1), count, dtype, op);
    return;
  }
  alignas(64) std::byte scratch[kReduceBlockBytes];
  const std::size_t esz = dtype_size(dtype);
  const std::size_t per_block = kReduceBlockBytes / esz;
  bool out_is_late_source = false;
  for (int q = 2; q < size(); ++q) out_is_late_source |= src(q) == out;
  for (std::size_t first = 0; first < count; first += per_block) {
    const std::size_t n = std::min(per_block, count - first);
    const std::size_t at = first * esz;
    std::byte* acc = out_is_late_source ? scratch : out + at;
    if (size() == 1) {
      copy_bytes(acc, src(0) + at, n * esz);
    } else {
      reduce_pair(acc, src(0) + at, src(1) + at, n, dtype, op);
    }
    for (int q = 2; q < size(); ++q) reduce_into(acc, src(q) + at, n, dtype, op);
    if (out_is_late_source) copy_bytes(out + at, acc, n * esz);
    if (also_out != nullptr) write_slot(also_out + at, acc, n * esz);
  }
}

// With a core per rank every rank waits for every other (one hop). With more ranks than
// cores, rank 0 collects the arrivals and then releases the others in a second step: a
// waiting rank then needs one rank to have run, not all, and rank 0 leaves first, so an
// operation it starts right after (a broadcast from it, say) is under way before the
// others return. Measured in docs/PERFORMANCE_LOG.md, "Barrier".
void Collectives::barrier(const OpContext& context) {
  const Deadline& deadline = context.deadline;
  start(Op::barrier, 0, DType::kUInt8, -1);
  begin_step(deadline);
  publish();
  if (!oversubscribed_ || rank_ == 0) wait_all(step_, deadline, /*check=*/true);
  if (!oversubscribed_) return;
  begin_step(deadline);
  publish();
  if (rank_ == 0) return;
  wait_for(0, step_, deadline);
  check_same_call(0, step_);
}

// The root copies chunk k into its slot while the others copy chunk k - 1 out of it, so a
// message is cut into at least kBroadcastPieces chunks (of at least kMinBroadcastChunk) for
// the two copies to overlap.
void Collectives::broadcast(Buffer buf, int root, const OpContext& context) {
  const Deadline& deadline = context.deadline;
  start(Op::broadcast, buf.count, buf.dtype, root);
  const std::size_t total = buf.size_bytes();
  offer_in_place(buf, oversubscribed_ ? std::max(tuning_.in_place_broadcast_min,
                                                 kOversubscribedInPlaceBroadcastMin)
                                      : tuning_.in_place_broadcast_min);
  if (choose(Op::broadcast, total) == Algorithm::kSingleCopy) {
    broadcast_single_copy(buf, root, deadline);
    return;
  }
  // In place, the root's first step carries no chunk, only where its buffer lies; the others
  // copy it out of the root's arena, and the root returns once they have.
  if (rank_ == root && offset_ >= 0) {
    begin_step(deadline);
    publish();
    wait_until_all_done(deadline);
    return;
  }
  const TimedStores stores(*this, Op::broadcast, total, /*writes=*/rank_ == root);
  const std::size_t piece = (total / kBroadcastPieces + 63) / 64 * 64;
  const std::size_t chunk = std::clamp(piece, kMinBroadcastChunk, kSlotBytes);
  for (std::size_t off = 0; off < total; off += chunk) {
    const std::size_t len = std::min(chunk, total - off);
    begin_step(deadline);
    if (rank_ == root) write_slot(payload(rank_, step_, len), buf.bytes() + off, len);
    publish();
    if (rank_ == root) continue;
    wait_for(root, step_, deadline);
    check_same_call(root, step_);
    if (const std::byte* from = off == 0 ? mapped_buffer(root, step_, total) : nullptr) {
      copy_from_root(buf, from);
      wait_until_all_done(deadline);
      return;
    }
    copy_chunk(buf.bytes() + off, payload(root, step_, len), len);
  }
}

void Collectives::reduce(Buffer buf, int root, ReduceOp op, const OpContext& context) {
  const Deadline& deadline = context.deadline;
  start(Op::reduce, buf.count, buf.dtype, root);
  const std::size_t esz = dtype_size(buf.dtype);
  const std::size_t chunk = kSlotBytes / esz;
  const TimedStores stores(*this, Op::reduce, buf.size_bytes());
  for (std::size_t first = 0; first < buf.count; first += chunk) {
    const std::size_t count = std::min(chunk, buf.count - first);
    const std::size_t bytes = count * esz;
    begin_step(deadline);
    write_slot(payload(rank_, step_, bytes), buf.bytes() + first * esz, bytes);
    publish();
    if (rank_ != root) continue;
    wait_all(step_, deadline, /*check=*/true);
    const std::uint32_t s = step_;
    reduce_in_rank_order(
        buf.bytes() + first * esz, nullptr, [&](int q) { return payload(q, s, bytes); }, count,
        buf.dtype, op);
  }
}

void Collectives::all_reduce(Buffer buf, ReduceOp op, const OpContext& context) {
  const Deadline& deadline = context.deadline;
  start(Op::all_reduce, buf.count, buf.dtype, -1);
  if (size() == 1 || buf.count == 0) return;
  offer_in_place(buf, tuning_.in_place_all_reduce_min);
  switch (choose(Op::all_reduce, buf.size_bytes())) {
    case Algorithm::kOneStep:
      return all_reduce_one_step(buf, op, deadline);
    case Algorithm::kSingleCopy:
      return all_reduce_single_copy(buf, op, deadline);
    default:
      return all_reduce_sliced(buf, op, deadline);
  }
}

// The table. Every rank picks the same entry: the inputs are the call's and the facts the
// ranks agreed on at start-up. All-reduces, broadcasts and all-gathers copy straight between
// buffers in the table's ranges where single_copy_possible(); all-reduces small enough to fit
// one slot run in one step; everything else goes through the slots in chunks.
Collectives::Algorithm Collectives::choose(Op op, std::size_t bytes) const {
  const auto single_copy = [&](std::size_t lo, std::size_t hi) {
    return single_copy_possible(op) && bytes >= lo && bytes <= hi;
  };
  switch (op) {
    case Op::broadcast:
      return single_copy(tuning_.single_copy_broadcast_min, tuning_.single_copy_broadcast_max)
                 ? Algorithm::kSingleCopy
                 : Algorithm::kSlots;
    case Op::all_gather:
      return single_copy(tuning_.single_copy_all_gather_min, tuning_.single_copy_all_gather_max)
                 ? Algorithm::kSingleCopy
                 : Algorithm::kSlots;
    case Op::all_reduce:
      if (bytes <= std::min(tuning_.one_step_all_reduce_max, kSlotBytes))
        return Algorithm::kOneStep;
      return single_copy(tuning_.single_copy_all_reduce_min, tuning_.single_copy_all_reduce_max)
                 ? Algorithm::kSingleCopy
                 : Algorithm::kSliced;
    default:
      return Algorithm::kSlots;
  }
}

// With more ranks than cores a broadcast's reader waits for the root to be scheduled and the
// root for every reader, and an all-gather's reads wait for every other rank: the slots'
// pipelining measured faster. An all-reduce may take single copy there too (where a table
// says so): each of the slots' steps (one per 64 KiB chunk) then costs a round of the
// scheduler, single copy's three in all do not (docs/PERFORMANCE_LOG.md, "Single copy").
bool Collectives::single_copy_possible(Op op) const {
  return can_read_peers_ && (op == Op::all_reduce || !oversubscribed_);
}

bool Collectives::reads(std::size_t CollectiveTuning::*member) const {
  using T = CollectiveTuning;
  const auto any_of = [member](auto... members) { return ((member == members) || ...); };
  if (member == &T::one_step_all_reduce_max) return true;
  if (member == &T::in_place_all_reduce_min || member == &T::in_place_broadcast_min) {
    return !arenas_.empty();
  }
  if (any_of(&T::single_copy_all_reduce_min, &T::single_copy_all_reduce_max))
    return single_copy_possible(Op::all_reduce);
  if (any_of(&T::single_copy_broadcast_min, &T::single_copy_broadcast_max))
    return single_copy_possible(Op::broadcast);
  if (any_of(&T::single_copy_all_gather_min, &T::single_copy_all_gather_max))
    return single_copy_possible(Op::all_gather);
  return ForwardingEngine::reads(member);
}

// Every rank publishes its whole buffer and reduces all of them: one step, n reads each.
void Collectives::all_reduce_one_step(Buffer buf, ReduceOp op, const Deadline& deadline) {
  const std::size_t bytes = buf.size_bytes();
  begin_step(deadline);
  copy_chunk(payload(rank_, step_, bytes), buf.bytes(), bytes);
  publish();
  wait_all(step_, deadline, /*check=*/true);
  const std::uint32_t s = step_;
  reduce_in_rank_order(
      buf.bytes(), nullptr, [&](int q) { return payload(q, s, bytes); }, buf.count, buf.dtype, op);
}

// Reduce-scatter then all-gather, chunk by chunk, one step per chunk: rank r owns slice r.
// In step k every rank stages its part of every other slice (chunk k) in its slot and
// publishes; then it copies the others' reduced chunk k - 1 out of their slots, and reduces
// its own chunk k (its data plus the others' staged parts, in rank order) into its buffer
// and into the rest of its slot, where the others find it in step k + 1. Each element is
// read from memory once and written once per rank; the slots stay in cache.
void Collectives::all_reduce_sliced(Buffer buf, ReduceOp op, const Deadline& deadline) {
  const std::size_t esz = dtype_size(buf.dtype);
  const auto n = static_cast<std::size_t>(size());
  const std::size_t slice = (buf.count + n - 1) / n;
  // A slot holds n staged chunks (this rank's own stays unused) and one reduced chunk.
  const std::size_t chunk = std::max<std::size_t>(1, kSlotBytes / (n + 1) / 64 * 64 / esz);
  const std::size_t reduced_at = n * chunk * esz;
  auto range = [&](int q, std::size_t at) {
    const std::size_t end = std::min(buf.count, (static_cast<std::size_t>(q) + 1) * slice);
    const std::size_t first = std::min(end, static_cast<std::size_t>(q) * slice + at);
    return std::pair{first, std::min(chunk, end - first)};
  };
  TimedStores stores(*this, Op::all_reduce, buf.size_bytes());
  std::optional<std::size_t> waiting;  // the chunk whose reductions wait in the slots
  // The first step also says where each rank's buffer lies, and a rank whose buffer is shared
  // stages nothing in it: if all are shared, the all-reduce goes on in place; if only some are,
  // the first step is taken again with every rank staging (a step lost, in that mix only).
  bool first_step = true;
  for (std::size_t at = 0;;) {
    const bool more = at < slice;
    const bool stage = more && !(first_step && offset_ >= 0);
    std::byte* mine = begin_step(deadline);
    for (int q = 0; stage && q < size(); ++q) {
      const auto [first, count] = range(q, at);
      if (q != rank_) {
        write_slot(mine + static_cast<std::size_t>(q) * chunk * esz, buf.bytes() + first * esz,
                   count * esz);
      }
    }
    publish();
    wait_all(step_, deadline, /*check=*/true);
    const std::uint32_t s = step_;
    if (std::exchange(first_step, false) && any_buffer_shared(s)) {
      if (const std::vector<std::byte*> bufs = mapped_buffers(s, buf.size_bytes()); !bufs.empty()) {
        stores.forget();
        return all_reduce_mapped(buf, op, bufs, deadline);
      }
      offset_ = -1;
      continue;
    }
    for (int q = 0; waiting && q < size(); ++q) {
      const auto [first, count] = range(q, *waiting);
      if (q != rank_)
        copy_chunk(buf.bytes() + first * esz, slot(q, s - 1) + reduced_at, count * esz);
    }
    if (!more) return;
    const auto [own, own_count] = range(rank_, at);
    std::byte* const own_data = buf.bytes() + own * esz;  // lambdas capture no bindings (clang)
    reduce_in_rank_order(
        own_data, mine + reduced_at,
        [&](int q) {
          return q == rank_ ? own_data : slot(q, s) + static_cast<std::size_t>(rank_) * chunk * esz;
        },
        own_count, buf.dtype, op);
    waiting = at;
    at += chunk;
  }
}

void Collectives::publish_address(const Buffer& buf, const Deadline& deadline) {
  const std::uint64_t address = reinterpret_cast<std::uintptr_t>(buf.data);
  std::memcpy(begin_step(deadline), &address, sizeof address);
  publish();
}

std::uint64_t Collectives::address_of(int rank) const {
  std::uint64_t address = 0;
  std::memcpy(&address, slot(rank, step_), sizeof address);
  return address;
}

std::vector<std::uint64_t> Collectives::exchange_addresses(const Buffer& buf,
                                                           const Deadline& deadline) {
  publish_address(buf, deadline);
  wait_all(step_, deadline, /*check=*/true);
  std::vector<std::uint64_t> addresses(static_cast<std::size_t>(size()));
  for (int q = 0; q < size(); ++q) addresses[static_cast<std::size_t>(q)] = address_of(q);
  return addresses;
}

void Collectives::read_peer(int rank, std::uint64_t address, std::byte* into,
                            std::size_t bytes) const {
  for (std::size_t done = 0; done < bytes;) {
    iovec local{into + done, bytes - done};
    iovec remote{reinterpret_cast<void*>(address + done), bytes - done};
    const ssize_t got =
        ::process_vm_readv(pids_[static_cast<std::size_t>(rank)], &local, 1, &remote, 1, 0);
    if (got > 0) {
      done += static_cast<std::size_t>(got);
      continue;
    }
    const int error = errno;
    if (got < 0 && error == EINTR) continue;
    check_peer_(job_rank(rank));  // a peer that died says so first
    throw PeerError("dist: reading rank " + std::to_string(job_rank(rank)) +
                    "'s buffer failed (process_vm_readv: " +
                    (got == 0 ? std::string("no progress") : std::strerror(error)) +
                    "); check that rank's own error, and that no rank frees or unmaps a "
                    "buffer before its collective returns");
  }
}

void Collectives::wait_until_all_done(const Deadline& deadline) {
  begin_step(deadline);
  publish();
  wait_all(step_, deadline, /*check=*/true);
}

// Rank r owns slice r: chunk by chunk it reduces slice r of every rank's buffer, in rank order,
// into its own buffer and the next rank's (reduce_in_rank_order's second output), and copies the
// chunk, still in cache, into the other ranks'. Each rank reads and writes only its own slice of
// the buffers, so nobody writes what another still reads; the last step keeps everyone until
// nobody writes. A rank moves as many bytes as one copy of the buffer: half of what the slots
// move for private buffers.
void Collectives::all_reduce_mapped(Buffer buf, ReduceOp op, const std::vector<std::byte*>& bufs,
                                    const Deadline& deadline) {
  const std::size_t esz = dtype_size(buf.dtype);
  const auto n = static_cast<std::size_t>(size());
  const std::size_t slice = (buf.count + n - 1) / n;
  const std::size_t first = std::min(buf.count, static_cast<std::size_t>(rank_) * slice);
  const std::size_t own = std::min(buf.count, first + slice) - first;
  const std::size_t chunk = std::max<std::size_t>(1, kMappedChunkBytes / esz);
  const int next = (rank_ + 1) % size();
  const TimedStores stores(*this, Op::all_reduce, buf.size_bytes(), true, /*in_place=*/true);
  for (std::size_t done = 0; done < own; done += chunk) {
    const std::size_t count = std::min(chunk, own - done);
    const std::size_t at = (first + done) * esz;
    std::byte* const mine = bufs[static_cast<std::size_t>(rank_)] + at;
    reduce_in_rank_order(
        mine, bufs[static_cast<std::size_t>(next)] + at,
        [&](int q) { return bufs[static_cast<std::size_t>(q)] + at; }, count, buf.dtype, op);
    for (int q = 0; q < size(); ++q) {
      if (q != rank_ && q != next)
        write_slot(bufs[static_cast<std::size_t>(q)] + at, mine, count * esz);
    }
  }
  wait_until_all_done(deadline);
}

void Collectives::copy_from_root(Buffer buf, const std::byte* from) {
  const TimedStores stores(*this, Op::broadcast, buf.size_bytes(), true, /*in_place=*/true);
  write_slot(buf.bytes(), from, buf.size_bytes());
}

// The root publishes its buffer's address; every other rank copies the whole buffer out of
// the root's memory in one process_vm_readv (the kernel copies page by page: one pass, no
// staging), then says so; the root returns once every rank has.
void Collectives::broadcast_single_copy(Buffer buf, int root, const Deadline& deadline) {
  publish_address(buf, deadline);
  if (rank_ != root) {
    wait_for(root, step_, deadline);
    check_same_call(root, step_);
    if (const std::byte* from = mapped_buffer(root, step_, buf.size_bytes())) {
      copy_from_root(buf, from);
    } else {
      read_peer(root, address_of(root), buf.bytes(), buf.size_bytes());
    }
  }
  begin_step(deadline);
  publish();
  if (rank_ == root) wait_all(step_, deadline, /*check=*/true);
}

// Rank r owns slice r. Step 1 exchanges the buffers' addresses; then each rank copies the
// others' parts of its slice into a scratch, 1 MiB at a time, and reduces them with
// its own in rank order into its buffer. Step 2 says the slices are reduced; each rank copies
// the others' reduced slices into its buffer. Step 3 keeps everyone until nobody reads.
// No rank writes a part of its buffer that another reads in the same phase.
void Collectives::all_reduce_single_copy(Buffer buf, ReduceOp op, const Deadline& deadline) {
  const std::size_t esz = dtype_size(buf.dtype);
  const auto n = static_cast<std::size_t>(size());
  const std::size_t slice = (buf.count + n - 1) / n;
  auto slice_of = [&](int q) {
    const std::size_t first = std::min(buf.count, static_cast<std::size_t>(q) * slice);
    return std::pair{first, std::min(buf.count, first + slice) - first};
  };
  const std::vector<std::uint64_t> at = exchange_addresses(buf, deadline);
  if (const std::vector<std::byte*> bufs = mapped_buffers(step_, buf.size_bytes()); !bufs.empty()) {
    return all_reduce_mapped(buf, op, bufs, deadline);
  }
  // A part per rank (this rank's stays unused), no larger than a slice: n parts of a 1 MiB
  // chunk would be n MiB per rank for a 4 MiB message.
  const std::size_t part_bytes = std::min(kSingleCopyChunkBytes, (slice * esz + 63) / 64 * 64);
  const std::size_t chunk = part_bytes / esz;
  scratch_.resize(n * part_bytes);
  const auto [own, own_count] = slice_of(rank_);
  for (std::size_t done = 0; done < own_count; done += chunk) {
    const std::size_t count = std::min(chunk, own_count - done);
    const std::size_t offset = (own + done) * esz;
    auto part = [&](int q) { return scratch_.data() + static_cast<std::size_t>(q) * part_bytes; };
    for (int q = 0; q < size(); ++q) {
      if (q != rank_) read_peer(q, at[static_cast<std::size_t>(q)] + offset, part(q), count * esz);
    }
    reduce_in_rank_order(
        buf.bytes() + offset, nullptr,
        [&](int q) { return q == rank_ ? buf.bytes() + offset : part(q); }, count, buf.dtype, op);
  }
  wait_until_all_done(deadline);
  for (int q = 0; q < size(); ++q) {
    if (q == rank_) continue;
    const auto [first, count] = slice_of(q);
    read_peer(q, at[static_cast<std::size_t>(q)] + first * esz, buf.bytes() + first * esz,
              count * esz);
  }
  wait_until_all_done(deadline);
}

void Collectives::reduce_scatter(Buffer out, Buffer in, ReduceOp op, const OpContext& context) {
  const Deadline& deadline = context.deadline;
  start(Op::reduce_scatter, out.count, out.dtype, -1);
  const std::size_t esz = dtype_size(out.dtype);
  const std::size_t chunk = block_chunk(esz);
  const std::size_t block = out.count;
  const TimedStores stores(*this, Op::reduce_scatter, in.size_bytes());
  for (std::size_t at = 0; at < block; at += chunk) {
    const std::size_t count = std::min(chunk, block - at);
    auto input = [&](int q) {
      return in.bytes() + (static_cast<std::size_t>(q) * block + at) * esz;
    };
    std::byte* mine = begin_step(deadline);
    for (int q = 0; q < size(); ++q) {
      if (q != rank_)
        write_slot(mine + static_cast<std::size_t>(q) * chunk * esz, input(q), count * esz);
    }
    publish();
    wait_all(step_, deadline, /*check=*/true);
    const std::uint32_t s = step_;
    // `out` may be this rank's block of `in`: reduce_in_rank_order lets `out` be a source.
    reduce_in_rank_order(
        out.bytes() + at * esz, nullptr,
        [&](int q) {
          return q == rank_ ? input(q) : slot(q, s) + static_cast<std::size_t>(rank_) * chunk * esz;
        },
        count, out.dtype, op);
  }
}

void Collectives::all_gather(Buffer out, Buffer in, const OpContext& context) {
  const std::size_t block = in.size_bytes();
  gather_blocks(
      in, [&](int q) { return out.bytes() + static_cast<std::size_t>(q) * block; }, context);
}

void Collectives::all_gather_list(const std::vector<Buffer>& outs, Buffer in,
                                  const OpContext& context) {
  gather_blocks(
      in, [&](int q) { return outs[static_cast<std::size_t>(q)].bytes(); }, context);
}

// Each rank's block through its slot, chunk by chunk. In step k a rank writes chunk k into its
// slot, copies its own chunk k into place, and then copies the others' chunk k - 1 out of
// their slots (step t reads slot t - 1, as the sliced all-reduce does): it waits for peers one
// step behind it instead of moving in lockstep with them.
void Collectives::gather_blocks(Buffer in, FunctionRef<std::byte*(int)> block_of,
                                const OpContext& context) {
  const Deadline& deadline = context.deadline;
  start(Op::all_gather, in.count, in.dtype, -1);
  const std::size_t block = in.size_bytes();
  if (choose(Op::all_gather, block * static_cast<std::size_t>(size())) == Algorithm::kSingleCopy) {
    return gather_single_copy(in, block_of, deadline);
  }
  const TimedStores stores(*this, Op::all_gather, block * static_cast<std::size_t>(size()));
  const auto copy_out = [&](std::size_t off, std::uint32_t step) {
    const std::size_t len = std::min(kSlotBytes, block - off);
    wait_all(step, deadline, /*check=*/true);
    for (int q = 0; q < size(); ++q) {
      if (q != rank_) copy_bytes(block_of(q) + off, payload(q, step, len), len);
    }
  };
  for (std::size_t off = 0; off < block; off += kSlotBytes) {
    const std::size_t len = std::min(kSlotBytes, block - off);
    begin_step(deadline);
    write_slot(payload(rank_, step_, len), in.bytes() + off, len);
    publish();
    copy_bytes(block_of(rank_) + off, in.bytes() + off, len);
    if (off > 0) copy_out(off - kSlotBytes, step_ - 1);
  }
  if (block > 0) copy_out((block - 1) / kSlotBytes * kSlotBytes, step_);
}

// Every rank publishes where its block lives, reads each other's straight into place (one
// process_vm_readv each) and copies its own; the last step keeps everyone until nobody reads.
// The slots copy each block twice (into its owner's slot, out of it), the reader taking every
// line from the writer's cache; this copies it once, from the owner's buffer. Faster from 64 to
// 256 KiB on the machines measured (docs/COLLECTIVES.md, "Single copy").
void Collectives::gather_single_copy(Buffer in, FunctionRef<std::byte*(int)> block_of,
                                     const Deadline& deadline) {
  const std::vector<std::uint64_t> at = exchange_addresses(in, deadline);
  copy_bytes(block_of(rank_), in.bytes(), in.size_bytes());
  for (int q = 0; q < size(); ++q) {
    if (q != rank_) read_peer(q, at[static_cast<std::size_t>(q)], block_of(q), in.size_bytes());
  }
  wait_until_all_done(deadline);
}

void Collectives::all_to_all(Buffer out, Buffer in, const OpContext& context) {
  const Deadline& deadline = context.deadline;
  start(Op::all_to_all, in.count, in.dtype, -1);
  const auto n = static_cast<std::size_t>(size());
  const std::size_t esz = dtype_size(in.dtype);
  const std::size_t block = in.count / n;
  const std::size_t chunk = block_chunk(esz);
  const TimedStores stores(*this, Op::all_to_all, in.size_bytes());
  for (std::size_t at = 0; at < block; at += chunk) {
    const std::size_t count = std::min(chunk, block - at);
    auto offset = [&](int q) { return (static_cast<std::size_t>(q) * block + at) * esz; };
    std::byte* mine = begin_step(deadline);
    for (int q = 0; q < size(); ++q) {
      if (q != rank_) {
        write_slot(mine + static_cast<std::size_t>(q) * chunk * esz, in.bytes() + offset(q),
                   count * esz);
      }
    }
    publish();
    wait_all(step_, deadline, /*check=*/true);
    for (int q = 0; q < size(); ++q) {
      const std::byte* src = q == rank_
                                 ? in.bytes() + offset(q)
                                 : slot(q, step_) + static_cast<std::size_t>(rank_) * chunk * esz;
      copy_bytes(out.bytes() + offset(q), src, count * esz);
    }
  }
}

}  // namespace weft::dist::shm
