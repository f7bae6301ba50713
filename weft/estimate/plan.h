// The layout to train a model with: every way of cutting `world` ranks into data (replicated,
// sharded, both), context, tensor and pipeline parallelism, with each pipeline schedule and
// micro-batch size, each FSDP mode and with or without activation checkpointing, estimated
// (memory_estimate.h, step_time.h) and ranked by throughput among those whose every rank
// fits a memory budget.
//
//   estimate::PlanRequest request{.base = job, .world = 8, .memory_per_rank = 16ll << 30};
//   for (const estimate::Candidate& c : estimate::plan(request, machine, placement).best) ...
//
// The global batch (PlanRequest::global_batch) stays fixed: a layout with data-parallel
// degree d trains global_batch / d sequences a rank, so layouts compare at the same
// optimisation step.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "weft/estimate/memory_estimate.h"
#include "weft/estimate/step_time.h"

namespace weft::estimate {

struct PlanRequest {
  // The model, sequence length, precision and optimizer; its layout, batch and checkpointing
  // are what the plan chooses (base.batch is not read).
  Job base;
  int world = 1;
  std::int64_t global_batch = 8;     // sequences a step, over all data-parallel ranks
  std::int64_t memory_per_rank = 0;  // bytes; 0: no limit
  std::size_t keep = 5;              // the best this many
};

struct Candidate {
  Job job;                // the layout (job.batch: sequences a data-parallel rank)
  std::int64_t peak = 0;  // the largest rank's estimated memory
  StepEstimate time;
};

struct Plan {
  std::vector<Candidate> best;  // the `keep` fastest that fit, fastest first
  std::size_t weighed = 0;      // layouts estimated
  std::size_t fitting = 0;      // of them, within the budget
};

// Layouts that cannot run the model (a tensor-parallel degree that does not divide its heads,
// a pipeline with more stages than layers or a batch its micro-batches do not split, a
// sequence context parallelism cannot cut) are skipped; ties go to less memory. `best` is
// empty when none fits.
Plan plan(const PlanRequest& request, const Machine& machine, const Placement& placement);

}  // namespace weft::estimate
