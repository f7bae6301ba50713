// How long one training step takes on each rank, from the configuration and the machine's
// measured costs (machine.h) alone: nothing is allocated or run.
//
//   const estimate::StepEstimate t = estimate::estimate_step_time(job, machine, {});
//   ... t.seconds, t.tokens_per_second, t.ranks[stage].forward ...
//
// The model (docs/ESTIMATE.md): each matrix product costs the most of its FLOPs at the rate
// measured for its kind and shape and its bytes at the measured bandwidth (a roofline); weft's
// other kernels their measured nanoseconds per element; each collective its alpha-beta fit on the
// backend; a pipeline its schedule simulated (parallel::simulate) with those costs per action. A
// collective that runs in the background (DDP's buckets, FSDP's gathers and reductions) hides
// behind compute only where the host has a core to spare for it; the blocking ones (tensor
// and context parallelism's, a pipeline's transfers) never do.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "weft/estimate/machine.h"
#include "weft/estimate/memory_estimate.h"
#include "weft/parallel/pipeline_schedule.h"

namespace weft::estimate {

// Where the job runs. The collectives cost what `backend` costs in the machine's fits; a group
// whose ranks span hosts (ranks numbered host by host, ranks_per_host each, the mesh's
// innermost dimension fastest) costs, when `between_hosts` is given, the slower of the two
// links in each of alpha and beta: a ring runs at its slowest hop.
struct Placement {
  std::string backend = "shm";
  int threads = 1;                         // weft's threads a rank ([training] threads)
  int ranks_per_host = 0;                  // 0: every rank on one host (the machine's)
  std::optional<AlphaBeta> between_hosts;  // the network: latency a step, seconds a byte
};

// One pipeline rank's step (every rank alike without pipeline parallelism), in seconds.
struct RankTime {
  int stage = 0;
  double forward = 0;        // compute, every micro-batch
  double backward = 0;       // compute, recomputation under checkpointing included
  double optimizer = 0;      // the gradients' norm and clipping, AdamW, DDP's bucket copies
  double blocking = 0;       // tensor and context parallelism's collectives, which compute waits on
  double background = 0;     // data parallelism's collectives, all of them
  double exposed = 0;        // of `background`, what compute does not hide
  double pipeline_idle = 0;  // waiting for other stages (the schedule's bubble)
  double step() const {
    return forward + backward + optimizer + blocking + exposed + pipeline_idle;
  }
};

struct StepEstimate {
  std::vector<RankTime> ranks;   // one per pipeline rank
  double seconds = 0;            // the slowest rank's step
  double tokens_per_second = 0;  // the whole job's
  // The pipeline's schedule (without pipeline parallelism: one rank's forward and backward)
  // and its simulation with the estimated costs, in seconds (for parallel::timeline_svg).
  parallel::Schedule schedule;
  parallel::Simulation simulation;
};

// InvalidArgument as estimate_memory(), or when the machine lacks the backend's fits.
StepEstimate estimate_step_time(const Job& job, const Machine& machine, const Placement& placement);

}  // namespace weft::estimate
