// The shm backend's collective engine: every rank owns a region of
// its shared-memory segment holding one step line and kSlots slots. A collective
// is a sequence of steps; in step s each rank
//   1. waits until every rank has published step s - kSlots + 2 (a step reads the slots of
//      itself and of the step before, and a rank publishes t + 1 only after finishing its
//      reads of step t: so nobody still reads slot s % kSlots),
//   2. writes what the others need into its slot s % kSlots and publishes s (in the slot's
//      header, and in its line for sleepers),
//   3. waits for the ranks it reads from to publish s, and reads their slots directly.
// Small messages are one step (one cache-line transfer per peer, no system call); large ones
// are chunked through the slots so that chunks stay in cache while they cross between cores;
// mid-sized all-reduces, broadcasts and all-gathers copy once, straight between the ranks' buffers,
// where the processes may read each other's memory. Reductions run in rank order (identical results
// everywhere). Waiting spins, then yields, then sleeps on a futex (docs/COLLECTIVES.md has the
// layout and the algorithm table; docs/PERFORMANCE_LOG.md, "Collective algorithm choices", the
// measurements behind the constants). Gather, scatter and the _v forms run on the generic engine
// over the transport's rings.
#pragma once

#include <sched.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "weft/base/function_ref.h"
#include "weft/dist/engine/forwarding_engine.h"
#include "weft/dist/op.h"
#include "weft/dist/shm/slot_stores.h"

namespace weft::dist::shm {

class Collectives final : public ForwardingEngine {
 public:
  static constexpr std::size_t kSlots = 8;
  static constexpr std::size_t kSlotBytes = (std::size_t{512} << 10) / kSlots;
  // Bytes of shared memory one rank's region takes (64-byte aligned).
  static std::size_t region_bytes();
  // Wakes every sleeper on any of `regions` (each rank's), so that they re-check their peers:
  // used when the job aborts.
  static void wake_all(const std::vector<std::byte*>& regions);

  // What every rank of the job agreed on at start-up (through the store), so that all ranks
  // pick the same algorithms: an operation's number of steps depends on these.
  struct JobFacts {
    int size = 1;                 // ranks in the job
    bool oversubscribed = false;  // the ranks' allowed CPUs together are fewer than the ranks
    bool single_copy = false;     // every rank can read every other's memory (process_vm_readv)
    bool peer_arenas = false;     // every rank maps every other's shared arena (arena.h)
  };

  // A group of the job's ranks: `regions[r]` is group rank r's region, mapped here and
  // zero-filled at creation, `job_ranks[r]` its rank in the job (errors name job ranks) and
  // `pids[r]` its process. `check_peer(job_rank)` throws PeerError if the job aborted or that
  // rank died. The engine of the whole job starts rank r on the (r mod CPUs)-th allowed CPU
  // (unbound afterwards). With more ranks than cores, waits do not spin and barriers are
  // released by rank 0. Where every rank can read every other's memory, all-reduces of 1-4 MiB
  // and (with a core per rank) mid-sized broadcasts and all-gathers copy straight between the
  // ranks' buffers (one copy instead of two through the slots). `rings`: the same group's generic
  // engine, for the operations not done here. `arenas[r]`: group rank r's shared arena as
  // mapped here (empty unless every rank maps every other's): all-reduces and broadcasts of
  // buffers in them run in place (docs/COLLECTIVES.md, "Shared buffers").
  Collectives(std::vector<std::byte*> regions, int rank, std::vector<int> job_ranks, JobFacts job,
              std::function<void(int)> check_peer, std::vector<int> pids,
              std::vector<std::span<std::byte>> arenas, std::unique_ptr<CollectiveEngine> rings);

  std::string_view name() const override { return "shm"; }
  void all_reduce(Buffer buf, ReduceOp op, const OpContext& context) override;
  void broadcast(Buffer buf, int root, const OpContext& context) override;
  void reduce(Buffer buf, int root, ReduceOp op, const OpContext& context) override;
  void all_gather(Buffer out, Buffer in, const OpContext& context) override;
  void all_gather_list(const std::vector<Buffer>& outs, Buffer in,
                       const OpContext& context) override;
  void reduce_scatter(Buffer out, Buffer in, ReduceOp op, const OpContext& context) override;
  void all_to_all(Buffer out, Buffer in, const OpContext& context) override;
  void barrier(const OpContext& context) override;
  // The table's thresholds (docs/COLLECTIVES.md; the one-step all-reduce at most a slot), and
  // the generic engine's for what runs on it.
  void tune(const CollectiveTuning& tuning) override {
    tuning_ = tuning;
    ForwardingEngine::tune(tuning);
  }
  bool reads(std::size_t CollectiveTuning::*member) const override;
  // What a step belongs to, in each slot's header (the cache line that also holds the step
  // number and a small message, so checking it costs no extra transfer): readers compare the
  // peer's with their own, so ranks making different calls fail at once instead of reading
  // each other's data as their own (or drifting apart in their step counts).
  struct Call {
    std::uint64_t count = 0;
    std::int32_t root = -1;
    std::uint8_t op = 0, dtype = 0;
    bool operator==(const Call&) const = default;
  };

 private:
  struct Line;
  struct SlotHeader;
  // The algorithm table's entries (choose(), in shm_collectives.cc).
  enum class Algorithm { kOneStep, kSliced, kSlots, kSingleCopy };
  Algorithm choose(Op op, std::size_t bytes) const;
  // Whether single copy can run `op` on this job at all (then the table's range decides).
  bool single_copy_possible(Op op) const;
  void start(Op op, std::uint64_t count, DType dtype, int root);  // at the top of each op
  void start_on_own_cpu(const cpu_set_t& allowed);
  SlotHeader& header(int rank, std::uint32_t step) const;
  Call& call_of(int rank, std::uint32_t step) const;
  // InvalidArgument naming both calls unless `rank`'s step `step` belongs to the same call.
  void check_same_call(int rank, std::uint32_t step) const;
  int size() const { return static_cast<int>(regions_.size()); }
  int job_rank(int rank) const { return job_ranks_[static_cast<std::size_t>(rank)]; }
  Line& line(int rank) const;
  std::byte* slot_start(int rank, std::uint32_t step) const;
  // Where a step's data starts: cache-line aligned, for bulk copies.
  std::byte* slot(int rank, std::uint32_t step) const;
  // Where a step's payload of `bytes` starts: on the header's cache line when it is small (one
  // transfer brings the step and the data), else slot().
  std::byte* payload(int rank, std::uint32_t step, std::size_t bytes) const;
  // Starts the next step: waits for the reuse condition and returns this rank's slot.
  std::byte* begin_step(const Deadline& deadline);
  void publish();
  // Until `rank` (every other rank) has published `step`.
  void wait_for(int rank, std::uint32_t step, const Deadline& deadline);
  // wait_for's slow path: yields, then sleeps on `rank`'s line.
  void wait_long(int rank, std::uint32_t step, const Deadline& deadline);
  // check: compare each rank's call for that step with ours (not for the reuse wait).
  void wait_all(std::uint32_t step, const Deadline& deadline, bool check);
  // The per-block chunk (in elements) when a slot holds one per rank.
  std::size_t block_chunk(std::size_t element_bytes) const;
  // out = src(0) op src(1) op ... op src(n - 1) over `count` elements, also into `also_out`
  // unless it is null. `out` may alias a source element for element.
  void reduce_in_rank_order(std::byte* out, std::byte* also_out,
                            FunctionRef<const std::byte*(int)> src, std::size_t count, DType dtype,
                            ReduceOp op) const;
  // all_gather with rank q's block going to block_of(q).
  void gather_blocks(Buffer in, FunctionRef<std::byte*(int)> block_of, const OpContext& context);
  void gather_single_copy(Buffer in, FunctionRef<std::byte*(int)> block_of,
                          const Deadline& deadline);
  void all_reduce_one_step(Buffer buf, ReduceOp op, const Deadline& deadline);
  void all_reduce_sliced(Buffer buf, ReduceOp op, const Deadline& deadline);
  void all_reduce_single_copy(Buffer buf, ReduceOp op, const Deadline& deadline);
  void broadcast_single_copy(Buffer buf, int root, const Deadline& deadline);
  // In place. Where `buf` lies in this rank's arena (and is at least `from` bytes), the running
  // operation's steps say so in their headers (offset_), and after its first step every rank
  // knows whose buffers are shared: the operation goes on in place where they are (all of them
  // for an all-reduce, the root's for a broadcast), with no step added where they are not.
  void offer_in_place(const Buffer& buf, std::size_t from);
  // `rank`'s buffer of `bytes` as mapped here, from its header of `step`; null if not shared.
  // PeerError if the header places it outside that rank's arena.
  std::byte* mapped_buffer(int rank, std::uint32_t step, std::size_t bytes) const;
  // Every rank's, or empty unless all are shared.
  std::vector<std::byte*> mapped_buffers(std::uint32_t step, std::size_t bytes) const;
  bool any_buffer_shared(std::uint32_t step) const;  // in some rank's header of `step`
  // A broadcast's copy out of the root's buffer, with the stores measured quicker.
  void copy_from_root(Buffer buf, const std::byte* from);
  // Rank r reduces slice r of every rank's buffer (`bufs`, as mapped here) and writes the result
  // into each: one pass, no slots.
  void all_reduce_mapped(Buffer buf, ReduceOp op, const std::vector<std::byte*>& bufs,
                         const Deadline& deadline);
  // A step publishing where this rank's `buf` lives (single copy); address_of reads a rank's
  // from the current step, exchange_addresses waits for and returns every rank's.
  void publish_address(const Buffer& buf, const Deadline& deadline);
  std::uint64_t address_of(int rank) const;
  std::vector<std::uint64_t> exchange_addresses(const Buffer& buf, const Deadline& deadline);
  // Copies `bytes` from `address` in `rank`'s process into `into` (process_vm_readv).
  void read_peer(int rank, std::uint64_t address, std::byte* into, std::size_t bytes) const;
  // An empty step every rank waits for: nobody returns while a peer may still read its buffer.
  void wait_until_all_done(const Deadline& deadline);
  // Copies into this rank's slot with the stores chosen for the running operation.
  void write_slot(std::byte* dst, const std::byte* src, std::size_t bytes) const;
  // Chooses the running operation's slot stores and, if slot_stores_ times it, reports its
  // time when it returns (not when it throws).
  class TimedStores;

  std::vector<std::byte*> regions_;
  int rank_;
  std::vector<int> job_ranks_;
  std::function<void(int)> check_peer_;
  bool oversubscribed_;               // the job has more ranks than cores: no spinning, fewer steps
  std::uint32_t step_ = 0;            // the current step; every rank counts the same steps
  std::vector<std::uint32_t> known_;  // per rank, a step it is known to have published
  CollectiveTuning tuning_;
  bool can_read_peers_;    // every rank can read every other's memory (single copy)
  std::vector<int> pids_;  // by group rank
  std::vector<std::span<std::byte>> arenas_;  // by group rank: its arena as mapped here, or none
  std::int64_t offset_ = -1;        // the running operation's buffer in this rank's arena, or -1
  std::vector<std::byte> scratch_;  // peers' parts of a chunk, for single-copy reduction
  Call call_;                       // the operation running now
  SlotStores slot_stores_;
  bool stream_ = false;  // the running operation writes its slots with streaming stores
};

}  // namespace weft::dist::shm
