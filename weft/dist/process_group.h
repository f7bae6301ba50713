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

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "weft/base/deadline.h"
#include "weft/dist/backend.h"
#include "weft/dist/buffer.h"
#include "weft/dist/errors.h"
#include "weft/dist/op.h"
#include "weft/dist/reduce_op.h"
#include "weft/dist/work.h"

namespace weft::dist {

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
  // Operations queued and not started complete with GroupBroken without running; the running
  // ones are waited for (each bounded by its deadline).
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const;
  int size() const;
  std::string_view backend_name() const;
  // The engine this group's collectives run on: "generic" (weft/dist/algorithms over the
  // transport), "shm" (the shared-memory step engine: the world group, and the first few
  // subgroups each rank joins; see docs/COLLECTIVES.md), ... Results are the same on each.
  std::string_view engine_name() const;
  // The thresholds at which the engine changes algorithm: the collective table the world
  // group's ranks agreed on when it was made, or the defaults (weft/dist/engine/tuning.h).
  // tune() sets them for this group (weft-bench --tune times each algorithm so): call it on
  // every rank alike, with no operation in flight.
  const CollectiveTuning& tuning() const;
  void tune(const CollectiveTuning& tuning);
  // Whether the threshold `member` can change what this group's engine does: not where it
  // never takes the algorithm (single copy on ranks that share CPUs, say).
  bool reads_tuning(std::size_t CollectiveTuning::*member) const;
  const std::string& name() const;
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
  void abort(const std::string& reason);

  // A subgroup of this group's `ranks` (in this group's numbering, in the order given).
  // Collective over this group: every rank calls it, in the same order as other group
  // creations; returns nullptr on ranks not in `ranks`. Subgroups run their operations
  // concurrently with this group's.
  std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks);
  // Splits this group by `color` (ranks with equal colors form one group, ordered by `key`,
  // then by rank). Collective over this group. A negative color joins no group (nullptr).
  std::shared_ptr<ProcessGroup> split(int color, int key = 0);

 private:
  // The group's state and the machinery that queues and runs its operations
  // (weft/dist/internal/process_group_impl.h).
  struct Impl;
  // A subgroup (Impl::make_subgroup); world: the job's world group.
  ProcessGroup(std::shared_ptr<Backend> backend, std::vector<int> members, GroupOptions options,
               std::uint32_t id, bool world);
  // Waits for a blocking call's Work (the shared completed one needs no wait).
  void wait_blocking(const std::shared_ptr<Work>& work) const;

  std::unique_ptr<Impl> impl_;
};

}  // namespace weft::dist
