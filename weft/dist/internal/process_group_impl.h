// ProcessGroup::Impl: a process group's state and the machinery behind its public calls:
// the lanes operations queue on (one for collectives, one per peer and direction for
// point-to-point), running a blocking call on its caller's thread, deadlines, the flight
// recorder's records, failure and breaking the group, subgroups. Only process_group.cc and
// process_group_impl.cc include it.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "weft/base/function_ref.h"
#include "weft/dist/internal/call_check.h"
#include "weft/dist/process_group.h"
#include "weft/exec/promise.h"
#include "weft/recorder/flight_recorder.h"

namespace weft::dist {

namespace internal {
class OpQueue;
}  // namespace internal

struct ProcessGroup::Impl {
  // world: the job's world group (made by the public constructor); else a subgroup.
  Impl(ProcessGroup& owner, std::shared_ptr<Backend> backend, std::vector<int> members,
       GroupOptions options, std::uint32_t id, bool world);
  // Marks the group broken (operations queued and not started complete with GroupBroken
  // without running), waits for the running ones (each bounded by its deadline), and aborts
  // the transport if any were unfinished, so that peers do not wait for them.
  ~Impl();

  int size() const { return static_cast<int>(members_.size()); }
  void tune(const CollectiveTuning& tuning);
  Seconds timeout() const;
  void set_timeout(Seconds timeout);

  // The public operations' bodies (process_group.h states their contracts).
  std::shared_ptr<Work> broadcast_async(Buffer buf, int src, OpOptions o);
  std::shared_ptr<Work> all_reduce_async(Buffer buf, ReduceOp op, OpOptions o);
  std::shared_ptr<Work> reduce_async(Buffer buf, int dst, ReduceOp op, OpOptions o);
  std::shared_ptr<Work> all_gather_async(Buffer out, Buffer in, OpOptions o);
  std::shared_ptr<Work> all_gather_async(std::vector<Buffer> outs, Buffer in, OpOptions o);
  std::shared_ptr<Work> all_gather_v_async(Buffer out, Buffer in,
                                           const std::vector<std::size_t>& counts, OpOptions o);
  std::shared_ptr<Work> gather_async(Buffer out, Buffer in, int dst, OpOptions o);
  std::shared_ptr<Work> scatter_async(Buffer out, Buffer in, int src, OpOptions o);
  std::shared_ptr<Work> reduce_scatter_async(Buffer out, Buffer in, ReduceOp op, OpOptions o);
  std::shared_ptr<Work> all_to_all_async(Buffer out, Buffer in, OpOptions o);
  std::shared_ptr<Work> all_to_all_v_async(Buffer out, const std::vector<std::size_t>& out_counts,
                                           Buffer in, const std::vector<std::size_t>& in_counts,
                                           OpOptions o);
  std::shared_ptr<Work> barrier_async(OpOptions o);
  std::shared_ptr<Work> send_async(Buffer buf, int dst, int tag, OpOptions o);
  std::shared_ptr<Work> recv_async(Buffer buf, int src, int tag, OpOptions o);
  std::shared_ptr<Work> recv_any_async(Buffer buf, int tag, OpOptions o);
  std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks);
  std::shared_ptr<ProcessGroup> split(int color, int key);

  // Marks the group broken and aborts the transport, so that peers fail at once too.
  void fail(const std::string& reason);

  struct OpCall;
  // A queue of operations that complete in issue order, and the bookkeeping that lets a
  // blocking call on an idle lane run on its caller's thread. Fields guarded by mu_.
  struct Lane {
    int outstanding = 0;          // operations issued and not yet completed
    bool inline_running = false;  // an operation runs on its caller's thread
    int inline_waiters = 0;       // queued operations waiting for it (on inline_done)
    std::condition_variable inline_done;
    std::unique_ptr<internal::OpQueue> queue;  // made with the lane (process_group_impl.cc)
  };
  // The lane of sends to (or receives from) group rank `peer`; -1: recv_any's. The caller
  // holds mu_. A lane (and its thread) lives as long as the group.
  Lane& p2p_lane(int peer, bool send);
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
                             const std::optional<internal::CallSignature>& signature, int peer,
                             bool starts_now);
  std::exception_ptr run_op(const OpRun& run, FunctionRef<void(const OpCall&)> body, bool queued);
  void complete(Promise<void>& state, std::exception_ptr error);
  void finish_inline(Lane& lane);
  // Queues `body` (a copyable callable taking const OpCall&), or runs it right here on an
  // idle lane for a blocking call or one that completes at once (`at_once`: an eager send the
  // transport has room for); collectives carry the signature debug mode compares across
  // ranks. Defined in process_group_impl.cc, where every operation calls it.
  static constexpr int kNoPeer = -2;  // issue()'s p2p_peer for a collective
  template <class Body>
  std::shared_ptr<Work> issue(Op op, OpOptions options,
                              std::optional<internal::CallSignature> signature, Body body,
                              int p2p_peer = kNoPeer, bool p2p_send = false, bool at_once = false);
  void check_root(Op op, int root) const;
  void check_reduce(Op op, const Buffer& buf, ReduceOp op_kind) const;
  void check_same_dtype(Op op, const Buffer& a, const Buffer& b) const;
  void check_tag(Op op, int tag) const;
  void check_fits(Op op, std::initializer_list<Buffer> buffers) const;
  std::shared_ptr<ProcessGroup> make_subgroup(const std::vector<int>& group_ranks, std::string name,
                                              std::uint32_t index);
  std::string describe() const;
  std::string group_rank_of(int global) const;  // rank_name of the member `global`
  std::string rank_name(int group_rank) const;
  std::string waited_for(int global_peer) const;
  std::string missing_ranks(Tag op_tag, int global_peer) const;

  ProcessGroup& owner_;  // the group this is the state of
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
  // What an operation that succeeded on its caller's thread returns (all but recv_any, whose
  // Work is given its source): completed, never written to, so one serves every such call (no
  // allocation per operation).
  std::shared_ptr<Work> completed_;
  // Runs every collective of this group; made by the backend.
  std::unique_ptr<CollectiveEngine> engine_;
  CollectiveTuning tuning_;
};

}  // namespace weft::dist
