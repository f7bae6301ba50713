// CollectiveEngine: how one process group runs its collectives. Every group holds exactly one,
// made by its backend (weft/dist/backend.h) when the group is created: the generic engine
// (the algorithms of weft/dist/algorithms over the backend's Transport), shm's step engine
// over shared memory, or another backend's own. ProcessGroup validates arguments, queues
// operations, handles timeouts and failures, and hands each collective to its engine; it
// never asks which kind of engine it has.
//
// The contract is ProcessGroup's, after its validation: every rank of the group calls the
// same operations in the same order with matching counts, dtypes and roots; float16 and
// bfloat16 arrive widened to float32 for the reducing operations (unless the engine reduces
// them itself: reduces_16bit_floats), and kAvg arrives as kSum (ProcessGroup divides).
// Results of reductions are identical on every rank. Each call blocks until
// `op.deadline` at most: PeerTimeout names the rank waited for, PeerError says a peer died
// or the job aborted. Ranks here are group ranks.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>
#include <vector>

#include "weft/base/deadline.h"
#include "weft/dist/buffer.h"
#include "weft/dist/engine/tuning.h"
#include "weft/dist/reduce_op.h"
#include "weft/dist/transport/transport.h"

namespace weft::dist {

// One operation as an engine sees it: the tag that tells its messages from every other
// operation's (engines that send messages add step numbers below 2^11 to it) and its
// deadline, which starts at the operation's first wait (pass it on by reference).
struct OpContext {
  Tag tag;
  Deadline deadline;
};

class CollectiveEngine {
 public:
  virtual ~CollectiveEngine() = default;

  // "generic", "shm", ...: for logs, tests and benchmarks.
  virtual std::string_view name() const = 0;
  // True when the engine reduces float16/bfloat16 buffers itself (accumulating in float32);
  // false lets ProcessGroup widen them to float32 around the call.
  virtual bool reduces_16bit_floats() const { return false; }

  virtual void broadcast(Buffer buf, int root, const OpContext& op) = 0;
  virtual void all_reduce(Buffer buf, ReduceOp reduce, const OpContext& op) = 0;
  // Only the root's `buf` receives the result; other ranks' are left as they were.
  virtual void reduce(Buffer buf, int root, ReduceOp reduce, const OpContext& op) = 0;
  // out holds size() blocks of in.count; `in` may alias this rank's block of `out`.
  virtual void all_gather(Buffer out, Buffer in, const OpContext& op) = 0;
  // outs[r] (in.count elements each) receives rank r's `in`: an all-gather into buffers that
  // are not one block of memory (torch's list form). `in` may be outs[rank]. By default, into
  // one scratch buffer and copied out; engines that can copy straight into them override it.
  virtual void all_gather_list(const std::vector<Buffer>& outs, Buffer in, const OpContext& op);
  // counts[r] elements from rank r, packed in rank order in `out`.
  virtual void all_gather_v(Buffer out, Buffer in, const std::vector<std::size_t>& counts,
                            const OpContext& op) = 0;
  // On the root, out holds size() blocks of in.count; elsewhere `out` is unused.
  virtual void gather(Buffer out, Buffer in, int root, const OpContext& op) = 0;
  // On the root, in holds size() blocks of out.count; elsewhere `in` is unused.
  virtual void scatter(Buffer out, Buffer in, int root, const OpContext& op) = 0;
  // in holds size() blocks of out.count; this rank gets the reduction of its block.
  virtual void reduce_scatter(Buffer out, Buffer in, ReduceOp reduce, const OpContext& op) = 0;
  // in and out hold size() equal blocks; block j of `in` goes to rank j. out may equal in.
  virtual void all_to_all(Buffer out, Buffer in, const OpContext& op) = 0;
  // in_counts[j] elements go to rank j, out_counts[i] come from rank i. out may equal in.
  virtual void all_to_all_v(Buffer out, const std::vector<std::size_t>& out_counts, Buffer in,
                            const std::vector<std::size_t>& in_counts, const OpContext& op) = 0;
  virtual void barrier(const OpContext& op) = 0;

  // For timeout messages: this rank noting that it entered the collective tagged `tag`, and,
  // after a timeout, the group ranks that have not. Engines that cannot tell return
  // std::nullopt; the message then names the rank this one was waiting for.
  virtual void note_arrival(Tag /*tag*/) {}
  // The thresholds at which this engine changes algorithm; the same on every rank of the
  // group, with no operation in flight. Engines without a choice ignore it.
  virtual void tune(const CollectiveTuning& /*tuning*/) {}
  // Whether the threshold `member` can change what this engine does on this group: one that
  // never takes an algorithm here ignores its thresholds (weft-bench --tune measures only
  // the others).
  virtual bool reads(std::size_t CollectiveTuning::* /*member*/) const { return false; }
  virtual std::optional<std::vector<int>> not_arrived(Tag /*tag*/) { return std::nullopt; }
};

}  // namespace weft::dist
