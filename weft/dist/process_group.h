// dist::ProcessGroup: ranks that cooperate through collectives, with torch.distributed's
// names and meaning.
//
//   weft::dist::run_threads(4, [](weft::dist::ProcessGroup& pg) {
//     std::vector<float> v{float(pg.rank())};
//     pg.all_reduce(v, weft::dist::ReduceOp::kSum);   // v[0] == 0 + 1 + 2 + 3 on every rank
//   });
//
// Contract, for every operation:
//   - It is collective over the group (except send/recv): every rank calls the same
//     operations in the same order, with matching sizes, dtypes and roots.
//   - Arguments are checked on the calling rank before anything is sent: a wrong root, a
//     size mismatch or a bitwise op on floats throws dist::InvalidArgument naming the
//     expected and actual values, and leaves the group usable.
//   - The _async form queues the operation and returns a Work; operations of one group run
//     one at a time in issue order. The blocking form is the async one plus Work::wait().
//     Buffers must stay valid and untouched until the Work completes.
//   - Each operation has a deadline: the group's timeout (300 s unless set) or OpOptions's,
//     counted from the operation's first wait for a peer (work it does before that, such
//     as copies, is not counted; an operation that never waits never reads the clock).
//     Past it, dist::TimeoutError names the operation, its sequence number, the group and
//     the rank that had not arrived. After any failure the group (and its transport) is
//     broken: the other ranks are told at once (PeerError), and every later call throws
//     dist::GroupBroken instead of hanging.
//   - Zero-element buffers are legal. float16/bfloat16 reductions accumulate in float32.
//
// Thread-safety: a group may be used from several threads; operations are issued in the
// order the calls enter the group.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "weft/base/deadline.h"
#include "weft/base/function_ref.h"
#include "weft/dist/backend.h"
#include "weft/dist/buffer.h"
#include "weft/dist/errors.h"
#include "weft/dist/internal/call_check.h"
#include "weft/dist/op.h"
#include "weft/dist/reduce_op.h"
#include "weft/dist/work.h"
#include "weft/exec/promise.h"
#include "weft/recorder/flight_recorder.h"

namespace weft::dist {

namespace internal {
class OpQueue;
}

inline constexpr Seconds kDefaultTimeout{300};

struct GroupOptions {
  Seconds timeout = kDefaultTimeout;  // per operation
  std::string name = "world";
};

struct OpOptions {
  std::optional<Seconds> timeout;  // overrides the group's timeout for this operation
};

class ProcessGroup {
 public:
  // Made by backends (run_threads, init_process_group): a group of `members` (global ranks of
  // the backend's transport, in group-rank order), which must include this process's rank.
  // Collective over the members: the backend builds the group's engine.
  ProcessGroup(std::shared_ptr<Backend> backend, std::vector<int> members,
               GroupOptions options = {});
  // Waits for queued operations to finish (each is bounded by its deadline).
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return static_cast<int>(members_.size()); }
  std::string_view backend_name() const { return backend_->name(); }
  // The engine this group's collectives run on: "generic" (weft/dist/algorithms over the
  // transport), "shm" (the shared-memory step engine: the world group, and the first few
  // subgroups each rank joins; see docs/COLLECTIVES.md), ... Results are the same on each.
  std::string_view engine_name() const { return engine_->name(); }
  // The thresholds at which the engine changes algorithm: the collective table the world
  // group's ranks agreed on when it was made, or the defaults (weft/dist/engine/tuning.h).
  // tune() sets them for this group (weft-bench --tune times each algorithm so): call it on
  // every rank alike, with no operation in flight.
  const CollectiveTuning& tuning() const { return tuning_; }
  void tune(const CollectiveTuning& tuning);
  const std::string& name() const { return options_.name; }
  Seconds timeout() const;
  void set_timeout(Seconds timeout);

  void broadcast(Buffer buf, int src, OpOptions o = {}) {
    CallerWaits here(this);
    wait_blocking(broadcast_async(buf, src, o));
  }
  void all_reduce(Buffer buf, ReduceOp op = ReduceOp::kSum, OpOptions o = {}) {
    CallerWaits here(this);
    wait_blocking(all_reduce_async(buf, op, o));
  }
  // Only `dst` receives the result in `buf`; other ranks' buffers are left as they were.
  void reduce(Buffer buf, int dst, ReduceOp op = ReduceOp::kSum, OpOptions o = {}) {
    CallerWaits here(this);
    wait_blocking(reduce_async(buf, dst, op, o));
  }
  // out.count == size() * in.count; rank r's `in` lands at out[r * in.count]. `in` may be
  // that very slice of `out` (in place).
  void all_gather(Buffer out, Buffer in, OpOptions o = {}) {
    CallerWaits here(this);
    wait_blocking(all_gather_async(out, in, o));
  }
  // outs.size() == size(), each of in.count elements; rank r's `in` lands in outs[r]: an
  // all-gather into separate buffers (torch's list form) without a staging copy where the
  // engine can write to them directly (shm's). `in` may be outs[rank()]; no other two of them
  // may overlap.
  void all_gather(const std::vector<Buffer>& outs, Buffer in, OpOptions o = {}) {
    CallerWaits here(this);
    wait_blocking(all_gather_async(outs, in, o));
  }
  // counts[r] elements from rank r, packed in rank order: counts[rank()] == in.count and
  // out.count == sum(counts).
  void all_gather_v(Buffer out, Buffer in, const std::vector<std::size_t>& counts,
                    OpOptions o = {}) {
    CallerWaits here(this);
    wait_blocking(all_gather_v_async(out, in, counts, o));
  }
  // On `dst`, out.count == size() * in.count; elsewhere `out` is ignored (may be empty).
  void gather(Buffer out, Buffer in, int dst, OpOptions o = {}) {
    CallerWaits here(this);
    wait_blocking(gather_async(out, in, dst, o));
  }
  // On `src`, in.count == size() * out.count; elsewhere `in` is ignored (may be empty).
  void scatter(Buffer out, Buffer in, int src, OpOptions o = {}) {
    CallerWaits here(this);
    wait_blocking(scatter_async(out, in, src, o));
  }
  // in.count == size() * out.count; rank r receives the reduction of every rank's block r.
  void reduce_scatter(Buffer out, Buffer in, ReduceOp op = ReduceOp::kSum, OpOptions o = {}) {
    CallerWaits here(this);
    wait_blocking(reduce_scatter_async(out, in, op, o));
  }
  // in and out hold size() equal blocks; block j of `in` goes to rank j, and block i of
  // `out` comes from rank i. out may equal in.
  void all_to_all(Buffer out, Buffer in, OpOptions o = {}) {
    CallerWaits here(this);
    wait_blocking(all_to_all_async(out, in, o));
  }
  // As all_to_all with in_counts[j] elements for rank j and out_counts[i] from rank i.
  void all_to_all_v(Buffer out, const std::vector<std::size_t>& out_counts, Buffer in,
                    const std::vector<std::size_t>& in_counts, OpOptions o = {}) {
    CallerWaits here(this);
    wait_blocking(all_to_all_v_async(out, out_counts, in, in_counts, o));
  }
  void barrier(OpOptions o = {}) {
    CallerWaits here(this);
    wait_blocking(barrier_async(o));
  }
  // Point to point, matched by (source, tag) in order; 0 <= tag < 2^31. A send does not wait
  // for the matching recv. Sends to one peer run in issue order, as do receives from one
  // peer, each on a thread of their own: a posted receive holds up neither collectives nor
  // other peers' traffic. Its timeout counts from when it starts, right after it is posted
  // (a receive posted long before its message arrives times out, and breaks the group).
  // recv_any runs beside the receives from given peers: a recv_any and a recv(src) both
  // pending under one tag may take each other's message, so use distinct tags.
  void send(Buffer buf, int dst, int tag = 0, OpOptions o = {}) {
    CallerWaits here(this);
    wait_blocking(send_async(buf, dst, tag, o));
  }
  void recv(Buffer buf, int src, int tag = 0, OpOptions o = {}) {
    CallerWaits here(this);
    wait_blocking(recv_async(buf, src, tag, o));
  }
  // Receives from whichever rank sends first with `tag`; returns its rank.
  int recv_any(Buffer buf, int tag = 0, OpOptions o = {});

  std::shared_ptr<Work> broadcast_async(Buffer buf, int src, OpOptions o = {});
  std::shared_ptr<Work> all_reduce_async(Buffer buf, ReduceOp op = ReduceOp::kSum,
                                         OpOptions o = {});
  std::shared_ptr<Work> reduce_async(Buffer buf, int dst, ReduceOp op = ReduceOp::kSum,
                                     OpOptions o = {});
  std::shared_ptr<Work> all_gather_async(Buffer out, Buffer in, OpOptions o = {});
  std::shared_ptr<Work> all_gather_async(std::vector<Buffer> outs, Buffer in, OpOptions o = {});
  std::shared_ptr<Work> all_gather_v_async(Buffer out, Buffer in,
                                           const std::vector<std::size_t>& counts,
                                           OpOptions o = {});
  std::shared_ptr<Work> gather_async(Buffer out, Buffer in, int dst, OpOptions o = {});
  std::shared_ptr<Work> scatter_async(Buffer out, Buffer in, int src, OpOptions o = {});
  std::shared_ptr<Work> reduce_scatter_async(Buffer out, Buffer in, ReduceOp op = ReduceOp::kSum,
                                             OpOptions o = {});
  std::shared_ptr<Work> all_to_all_async(Buffer out, Buffer in, OpOptions o = {});
  std::shared_ptr<Work> all_to_all_v_async(Buffer out, const std::vector<std::size_t>& out_counts,
                                           Buffer in, const std::vector<std::size_t>& in_counts,
                                           OpOptions o = {});
  std::shared_ptr<Work> barrier_async(OpOptions o = {});
  std::shared_ptr<Work> send_async(Buffer buf, int dst, int tag = 0, OpOptions o = {});
  std::shared_ptr<Work> recv_async(Buffer buf, int src, int tag = 0, OpOptions o = {});
  // The sender is Work::source_rank() once the Work completes.
  std::shared_ptr<Work> recv_any_async(Buffer buf, int tag = 0, OpOptions o = {});

  // While one lives on a thread, an _async operation that thread issues on `group` runs on
  // the thread itself, before the call returns a completed Work, if nothing issued earlier on
  // its lane is unfinished (else it is queued as usual, and runs after those). For callers that
  // wait for the Work at once, as the blocking calls do (and bindings whose blocking calls go
  // through the _async forms): it saves the hand-off to the lane's thread and back, two
  // wake-ups. Operations other threads issue meanwhile queue behind it. Everything the thread
  // issues on `group` meanwhile may run synchronously, so it must wait for nothing issued
  // later: a receive issued before the send it waits for deadlocks (until the timeout). Nests;
  // the innermost group counts.
  class CallerWaits {
   public:
    explicit CallerWaits(const ProcessGroup* group);
    ~CallerWaits();
    CallerWaits(const CallerWaits&) = delete;
    CallerWaits& operator=(const CallerWaits&) = delete;

   private:
    const ProcessGroup* previous_;
  };

  // Makes the group unusable, from any thread: the operation in progress fails at once (on
  // the mpi backend, once its MPI call returns), later calls throw GroupBroken, and the other
  // ranks fail with PeerError(reason) naming this rank. For interrupting a blocked call
  // (Ctrl-C in the Python bindings).
  void abort(const std::string& reason) { fail(reason); }

  // A subgroup of this group's `ranks` (in this group's numbering, in the order given).
  // Collective over this group: every rank calls it, in the same order as other group
  // creations; returns nullptr on ranks not in `ranks`. Subgroups run their operations
  // concurrently with this group's.
  std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks);
  // Splits this group by `color` (ranks with equal colors form one group, ordered by `key`,
  // then by rank). Collective over this group. A negative color joins no group (nullptr).
  std::shared_ptr<ProcessGroup> split(int color, int key = 0);

 private:
  // Waits for a blocking call's Work; the shared completed one needs no wait.
  void wait_blocking(const std::shared_ptr<Work>& work) const {
    if (work != completed_) work->wait();
  }

  struct OpCall;
  // A queue of operations that complete in issue order, and the bookkeeping that lets a
  // blocking call on an idle lane run on its caller's thread. Fields guarded by mu_.
  struct Lane {
    int outstanding = 0;          // operations issued and not yet completed
    bool inline_running = false;  // an operation runs on its caller's thread
    std::condition_variable inline_done;
    std::unique_ptr<internal::OpQueue> queue;  // made with the lane (process_group.cc)
  };
  // The lane of sends to (or receives from) group rank `peer`; -1: recv_any's. The caller
  // holds mu_. A lane (and its thread) lives as long as the group.
  Lane& p2p_lane(int peer, bool send);
  // world: made by the public constructor (the job's world group); else a subgroup.
  ProcessGroup(std::shared_ptr<Backend> backend, std::vector<int> members, GroupOptions options,
               std::uint32_t id, bool world);
  std::vector<std::int64_t> agree(std::int64_t mine);
  std::vector<std::int64_t> agree(std::int64_t mine, std::uint64_t seq);
  // The world group's ranks read their collective tables and keep one only if all read the same.
  void agree_on_tuning();
  Transport& transport() const { return *backend_->transport(); }

  struct OpRun {
    Op op;
    std::uint64_t seq;
    Seconds timeout;
    std::optional<internal::CallSignature> signature;  // set for collectives
    std::uint64_t record;                              // the flight recorder's id for it
  };
  std::uint64_t record_issue(Op op, std::uint64_t seq,
                             const std::optional<internal::CallSignature>& signature, int peer);
  std::exception_ptr run_op(const OpRun& run, FunctionRef<void(const OpCall&)> body, bool queued);
  void complete(Promise<void>& state, std::exception_ptr error);
  void finish_inline(Lane& lane);
  // Queues `body` (a copyable callable taking const OpCall&), or runs it right here for a
  // blocking call on an idle group; collectives carry the signature debug mode compares
  // across ranks. Defined in process_group.cc, where every operation calls it.
  static constexpr int kNoPeer = -2;  // issue()'s p2p_peer for a collective
  template <class Body>
  std::shared_ptr<Work> issue(Op op, OpOptions options,
                              std::optional<internal::CallSignature> signature, Body body,
                              int p2p_peer = kNoPeer, bool p2p_send = false);
  void check_root(Op op, int root) const;
  void check_reduce(Op op, const Buffer& buf, ReduceOp op_kind) const;
  void check_same_dtype(Op op, const Buffer& a, const Buffer& b) const;
  void check_tag(Op op, int tag) const;
  void check_fits(Op op, std::initializer_list<Buffer> buffers) const;
  // Marks the group broken and aborts the transport, so that peers fail at once too.
  void fail(const std::string& reason);
  std::shared_ptr<ProcessGroup> make_subgroup(const std::vector<int>& group_ranks, std::string name,
                                              std::uint32_t index);
  std::string describe() const;
  std::string group_rank_of(int global) const;  // rank_name of the member `global`
  std::string rank_name(int group_rank) const;
  std::string waited_for(int global_peer) const;
  std::string missing_ranks(Tag op_tag, int global_peer) const;

  std::shared_ptr<Backend> backend_;
  std::vector<int> members_;
  int rank_;
  GroupOptions options_;

  std::uint32_t id_;                    // distinguishes this group's messages from other groups'
  recorder::FlightRecorder& recorder_;  // this process's (weft/recorder/flight_recorder.h)
  std::uint32_t recorder_group_;        // the group's index in its table

  mutable std::mutex mu_;        // guards the fields below, and makes issue order queue order
  std::uint64_t next_seq_ = 0;   // collective sequence number
  std::uint32_t subgroups_ = 0;  // group creations so far
  std::string broken_;           // why the group is unusable; empty while it is fine
  Lane collectives_;             // every collective, in issue order
  // Point-to-point operations, one lane per peer and direction (and one for recv_any), made
  // when first used: a receive waiting for its message holds up neither the collectives nor
  // the other peers' traffic, so a ring that posts every irecv before its isend runs.
  std::map<int, std::unique_ptr<Lane>> p2p_lanes_;
  // What a blocking collective that succeeded on its caller's thread returns: completed,
  // never written to, so one serves every such call (no allocation per operation).
  std::shared_ptr<Work> completed_;
  // Runs every collective of this group; made by the backend.
  std::unique_ptr<CollectiveEngine> engine_;
  CollectiveTuning tuning_;
};

}  // namespace weft::dist
