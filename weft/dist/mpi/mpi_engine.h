// The mpi backend's collective engine: each collective is the matching blocking MPI call on
// the group's own communicator (MPI_Bcast, MPI_Allreduce, ...), run on the caller's thread or,
// for the _async forms, on the group's queue thread, where MPI progresses it inside the call.
// The blocking calls are Open MPI's tuned ones: its non-blocking MPI_I* collectives (libnbc)
// measured 2-4x slower here (docs/PERFORMANCE_LOG.md, "The mpi backend's cost"). MPI cannot
// time out a collective, so an MpiWatchdog ends the job when one outlives its operation's
// deadline. float16 and bfloat16 travel as 2-byte MPI types and are reduced by user-defined MPI
// ops (in float32, rounded at each step of MPI's algorithm). MPI's counts are ints: a buffer
// of more than 2^31 - 1 elements is rejected with InvalidArgument.
#pragma once

#include <mpi.h>

#include <memory>

#include "weft/dist/engine/collective_engine.h"
#include "weft/dist/mpi/mpi_watchdog.h"

namespace weft::dist {

class MpiEngine final : public CollectiveEngine {
 public:
  // Takes ownership of `comm` (the group's communicator, ranks in group order).
  MpiEngine(MPI_Comm comm, std::shared_ptr<MpiWatchdog> watchdog);
  ~MpiEngine() override;
  MpiEngine(const MpiEngine&) = delete;
  MpiEngine& operator=(const MpiEngine&) = delete;

  // The 2-byte types and reduce ops for float16 and bfloat16; once per process, after
  // MPI_Init.
  static void create_16bit_types();

  std::string_view name() const override { return "mpi"; }
  bool reduces_16bit_floats() const override { return true; }
  void broadcast(Buffer buf, int root, const OpContext& op) override;
  void all_reduce(Buffer buf, ReduceOp reduce, const OpContext& op) override;
  void reduce(Buffer buf, int root, ReduceOp reduce, const OpContext& op) override;
  void all_gather(Buffer out, Buffer in, const OpContext& op) override;
  void all_gather_v(Buffer out, Buffer in, const std::vector<std::size_t>& counts,
                    const OpContext& op) override;
  void gather(Buffer out, Buffer in, int root, const OpContext& op) override;
  void scatter(Buffer out, Buffer in, int root, const OpContext& op) override;
  void reduce_scatter(Buffer out, Buffer in, ReduceOp reduce, const OpContext& op) override;
  void all_to_all(Buffer out, Buffer in, const OpContext& op) override;
  void all_to_all_v(Buffer out, const std::vector<std::size_t>& out_counts, Buffer in,
                    const std::vector<std::size_t>& in_counts, const OpContext& op) override;
  void barrier(const OpContext& op) override;

 private:
  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 1;
  std::shared_ptr<MpiWatchdog> watchdog_;
};

}  // namespace weft::dist
