#include "weft/estimate/plan.h"

#include <algorithm>

#include "weft/base/error.h"

namespace weft::estimate {
namespace {

std::vector<int> divisors(int n) {
  std::vector<int> out;
  for (int d = 1; d <= n; ++d)
    if (n % d == 0) out.push_back(d);
  return out;
}

// (dp_replicate, dp_shard) pairs: DDP, FSDP, and HSDP with each shard degree in between.
std::vector<std::pair<int, int>> data_parallel_splits(int dp) {
  std::vector<std::pair<int, int>> out;
  for (const int shard : divisors(dp)) out.emplace_back(dp / shard, shard);
  return out;
}

struct PipelineChoice {
  std::string schedule;
  int microbatches = 1;
};

// Each schedule with pp, 2 pp, 4 pp and 8 pp micro-batches where the batch splits so: fewer
// than pp leaves ranks idle by design, and past 8 pp the bubble has little left to give while
// the products shrink.
std::vector<PipelineChoice> pipeline_choices(int pp, std::int64_t batch) {
  if (pp == 1) return {{"1F1B", 1}};
  std::vector<PipelineChoice> out;
  for (const char* schedule :
       {"GPipe", "1F1B", "Interleaved1F1B", "InterleavedZeroBubble", "ZBVZeroBubble"}) {
    for (std::int64_t count = pp; count <= 8 * pp && count <= batch; count *= 2) {
      if (batch % count == 0) out.push_back({schedule, static_cast<int>(count)});
    }
  }
  return out;
}

bool runs_tensor_parallel(const nn::LlamaConfig& model, int tp) {
  try {
    model.validate_tensor_parallel(tp);
    return true;
  } catch (const InvalidArgument&) {
    return false;
  }
}

// Layout-invariant training cuts tensor parallelism's products into feature_blocks and each
// sequence into sequence_blocks (ParallelOptions): the degrees must divide them.
bool runs_layout_invariant(const parallel::ParallelOptions& o, int tp, int cp) {
  if (!o.layout_invariant) return true;
  return (tp == 1 || o.feature_blocks % tp == 0) && (cp == 1 || o.sequence_blocks % (2 * cp) == 0);
}

// Estimates `job` into `out` unless it cannot run (false then); its step time only when its
// memory fits `budget` (0: any).
bool weigh(const Job& job, const Machine& machine, const Placement& placement, std::int64_t budget,
           Candidate& out) {
  try {
    out.peak = 0;
    for (const RankMemory& m : estimate_memory(job)) out.peak = std::max(out.peak, m.total());
    if (budget == 0 || out.peak <= budget) out.time = estimate_step_time(job, machine, placement);
    out.job = job;
    return true;
  } catch (const InvalidArgument&) {
    return false;
  }
}

}  // namespace

Plan plan(const PlanRequest& request, const Machine& machine, const Placement& placement) {
  const Job& base = request.base;
  base.model.validate();
  if (request.world < 1 || request.global_batch < 1)
    throw InvalidArgument("a plan needs one rank or more and a batch of one sequence or more");
  // The machine's errors are the caller's, not a layout's that cannot run.
  if (request.world > 1) (void)machine.backend(placement.backend);
  Plan out;
  std::vector<Candidate> fitting;
  for (const int tp : divisors(request.world)) {
    if (!runs_tensor_parallel(base.model, tp)) continue;
    for (const int cp : divisors(request.world / tp)) {
      // A rank's chunks of fewer than 64 positions each leave attention little to do.
      if (cp > 1 && (base.seq % (2 * cp) != 0 || base.seq / (2 * cp) < 64)) continue;
      if (!runs_layout_invariant(base.options, tp, cp)) continue;
      for (const int pp : divisors(request.world / (tp * cp))) {
        if (pp > base.model.n_layers) continue;
        const int dp = request.world / (tp * cp * pp);
        if (request.global_batch % dp != 0) continue;
        const std::int64_t batch = request.global_batch / dp;
        for (const auto& [replicate, shard] : data_parallel_splits(dp)) {
          std::vector<parallel::ShardingMode> modes{parallel::ShardingMode::kFullShard};
          if (shard > 1)
            modes = {parallel::ShardingMode::kFullShard, parallel::ShardingMode::kZero2,
                     parallel::ShardingMode::kZero1};
          for (const parallel::ShardingMode mode : modes) {
            for (const PipelineChoice& pipe : pipeline_choices(pp, batch)) {
              for (const bool checkpointing : {false, true}) {
                Job job = base;
                job.options.dims = {pp, replicate, shard, cp, tp};
                job.options.fsdp_mode = mode;
                job.options.pipeline.schedule = pipe.schedule;
                job.options.pipeline.schedule_csv.clear();
                job.options.pipeline.microbatches = pipe.microbatches;
                job.options.pipeline.layers_per_stage = 0;
                job.batch = batch;
                job.activation_checkpointing = checkpointing;
                Candidate c;
                if (!weigh(job, machine, placement, request.memory_per_rank, c)) continue;
                ++out.weighed;
                if (request.memory_per_rank > 0 && c.peak > request.memory_per_rank) continue;
                fitting.push_back(std::move(c));
              }
            }
          }
        }
      }
    }
  }
  out.fitting = fitting.size();
  std::sort(fitting.begin(), fitting.end(), [](const Candidate& a, const Candidate& b) {
    if (a.time.seconds != b.time.seconds) return a.time.seconds < b.time.seconds;
    return a.peak < b.peak;
  });
  if (fitting.size() > request.keep) fitting.resize(request.keep);
  out.best = std::move(fitting);
  return out;
}

}  // namespace weft::estimate
