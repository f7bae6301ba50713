// The hierarchical engine: collectives in two levels for a job of several hosts with the
// same number of ranks each, numbered host by host (rank = host * per_host + local), as
// weftrun and the cluster launchers number them. Within a host it runs the host's own
// engine (shared memory); across hosts, the engine of the ranks with this rank's local
// index, one per host (tcp or mpi); so each byte crosses the network once, and the hosts'
// links carry per_host streams at a time.
//
//   all_reduce  reduce-scatter within the host, all-reduce of this rank's shard across
//               hosts, all-gather within the host (small or indivisible buffers: reduce to
//               local rank 0, all-reduce across the hosts' rank 0s, broadcast within); from
//               4 MiB chunk by chunk, the cross-host all-reduces on a thread of the engine's
//               own, overlapping the in-host phases of the other chunks
//   broadcast   across hosts among the ranks with the root's local index, then within each
//   all_gather  this rank's block across hosts, then the hosts' blocks within the host
//
// Every other collective runs on the flat engine over all ranks. Costs: docs/COLLECTIVES.md.
#pragma once

#include <cstddef>
#include <future>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "weft/base/function_ref.h"
#include "weft/dist/engine/forwarding_engine.h"
#include "weft/dist/internal/op_queue.h"

namespace weft::dist {

struct HostLayout {
  int hosts = 1;     // how many
  int per_host = 1;  // ranks on each
  int host = 0;      // this rank's
  int local = 0;     // this rank's index on its host
};

class HierarchicalEngine final : public ForwardingEngine {
 public:
  // local: the ranks of this host (group ranks = local indices); cross: the ranks with this
  // rank's local index, one per host (group ranks = host indices); flat: every rank.
  HierarchicalEngine(HostLayout layout, std::unique_ptr<CollectiveEngine> local,
                     std::unique_ptr<CollectiveEngine> cross,
                     std::unique_ptr<CollectiveEngine> flat);

  // "hierarchical(<local engine>, <cross engine>)": "hierarchical(shm, mpi)", say.
  std::string_view name() const override { return name_; }
  void broadcast(Buffer buf, int root, const OpContext& op) override;
  void all_reduce(Buffer buf, ReduceOp reduce, const OpContext& op) override;
  void all_gather(Buffer out, Buffer in, const OpContext& op) override;
  void all_gather_list(const std::vector<Buffer>& outs, Buffer in, const OpContext& op) override;

  // Every other operation runs flat, on every rank at once (the forwarding base).
  void tune(const CollectiveTuning& tuning) override {
    local_->tune(tuning);
    cross_->tune(tuning);
    ForwardingEngine::tune(tuning);
  }

 private:
  void all_reduce_overlapped(Buffer buf, ReduceOp reduce, const OpContext& op);
  // all_gather with rank q's block going to block_of(q).
  void gather_blocks(Buffer in, FunctionRef<std::byte*(std::size_t)> block_of, const OpContext& op);

  HostLayout layout_;
  std::string name_;
  std::unique_ptr<CollectiveEngine> local_;
  std::unique_ptr<CollectiveEngine> cross_;
  // An overlapped all-reduce's shards, and its chunks' cross-host all-reduces (done, or
  // failed, when the call returns; a failed call's may still be running).
  std::vector<std::byte> shards_;
  std::vector<std::future<void>> crossing_;
  // Runs them; started by the first. Declared last, so it is joined before what they use goes.
  std::unique_ptr<internal::OpQueue> cross_thread_;
};

}  // namespace weft::dist
