#include "weft/train/auto_layout.h"

#include <cstdio>

#include "weft/base/system.h"
#include "weft/train/trainer.h"

namespace weft::train {

estimate::PlanRequest plan_request(const Config& config, int world, std::int64_t memory_per_rank,
                                   std::int64_t global_batch) {
  if (global_batch == 0) {
    try {
      global_batch =
          config.training.batch_size * parallel_options(config, world).dims.data_parallel();
    } catch (const ConfigError& e) {
      throw ConfigError(std::string(e.what()) +
                        "; or give the global batch (weft-plan --global-batch)");
    }
  }
  Config one = config;  // the precision, optimizer and options besides the layout
  one.parallelism.data_parallel_replicate_degree = one.parallelism.data_parallel_shard_degree = 1;
  one.parallelism.tensor_parallel_degree = one.parallelism.context_parallel_degree = 1;
  one.parallelism.pipeline_parallel_degree = 1;
  one.parallelism.pipeline_parallel_schedule_csv.clear();
  estimate::PlanRequest request;
  request.base = estimate_job(one, parallel_options(one, 1));
  request.world = world;
  request.global_batch = global_batch;
  request.memory_per_rank = memory_per_rank;
  return request;
}

std::vector<std::pair<std::string, std::string>> layout_keys(const estimate::Job& job) {
  const parallel::ParallelDims& d = job.options.dims;
  const auto number = [](std::int64_t n) { return std::to_string(n); };
  std::vector<std::pair<std::string, std::string>> keys{
      {"parallelism.data_parallel_replicate_degree", number(d.dp_replicate)},
      {"parallelism.data_parallel_shard_degree", number(d.dp_shard)},
      {"parallelism.context_parallel_degree", number(d.cp)},
      {"parallelism.tensor_parallel_degree", number(d.tp)},
      {"parallelism.pipeline_parallel_degree", number(d.pp)},
      {"training.batch_size", number(job.batch)},
      {"training.activation_checkpointing", job.activation_checkpointing ? "true" : "false"}};
  if (d.dp_shard > 1)
    keys.emplace_back("parallelism.fsdp_mode",
                      std::string(parallel::sharding_mode_name(job.options.fsdp_mode)));
  if (d.pp > 1) {
    keys.emplace_back("parallelism.pipeline_parallel_schedule", job.options.pipeline.schedule);
    keys.emplace_back("parallelism.pipeline_parallel_microbatch_size",
                      number(job.batch / job.options.pipeline.microbatches));
  }
  return keys;
}

Config with_layout(Config config, const estimate::Job& job) {
  const parallel::ParallelDims& d = job.options.dims;
  ParallelismConfig& p = config.parallelism;
  p.data_parallel_replicate_degree = d.dp_replicate;
  p.data_parallel_shard_degree = d.dp_shard;
  p.context_parallel_degree = d.cp;
  p.tensor_parallel_degree = d.tp;
  p.pipeline_parallel_degree = d.pp;
  p.fsdp_mode = std::string(parallel::sharding_mode_name(job.options.fsdp_mode));
  p.pipeline_parallel_schedule = job.options.pipeline.schedule;
  p.pipeline_parallel_schedule_csv.clear();
  p.pipeline_parallel_microbatch_size = job.batch / job.options.pipeline.microbatches;
  p.pipeline_parallel_layers_per_stage = 0;
  config.training.batch_size = job.batch;
  config.training.activation_checkpointing = job.activation_checkpointing;
  return config;
}

namespace {

// The layout plan() ranks first for `config` on `ranks` ranks, within `budget` bytes a rank.
estimate::Candidate planned(const Config& config, int ranks, std::int64_t budget,
                            const estimate::Placement& placement, std::size_t& fitting) {
  estimate::PlanRequest request = plan_request(config, ranks, budget);
  request.keep = 1;
  const estimate::Plan plan =
      estimate::plan(request, estimate::read_machine(config.parallelism.auto_machine), placement);
  if (plan.best.empty()) {
    throw ConfigError("parallelism.auto_machine: none of " + std::to_string(plan.weighed) +
                      " layouts of " + std::to_string(ranks) + " ranks fits " +
                      std::to_string(budget >> 20) +
                      " MiB a rank: give more ranks or memory, or a smaller batch or model");
  }
  fitting = plan.fitting;
  return plan.best[0];
}

}  // namespace

Config with_planned_layout(Config config, dist::ProcessGroup* world, int host_ranks,
                           std::ostream& out) {
  if (config.parallelism.auto_machine.empty()) return config;
  const int ranks = world ? world->size() : 1;
  host_ranks = std::max(host_ranks, 1);
  // Every rank plans from the least memory any rank has, so that all choose alike; and
  // every rank learns whether any could not, so that none goes on alone.
  std::vector<std::int64_t> least{available_memory_bytes()};
  if (world) world->all_reduce(least, dist::ReduceOp::kMin);
  std::string error;
  estimate::Candidate best;
  std::size_t fitting = 0;
  try {
    if (least[0] < 0)
      throw ConfigError("parallelism.auto_machine: a rank cannot read its host's available memory");
    config = with_tokenizer_vocabulary(std::move(config));
    estimate::Placement placement;
    placement.threads = static_cast<int>(config.training.threads);
    placement.ranks_per_host = host_ranks;
    if (world) placement.backend = std::string(world->backend_name());
    best = planned(config, ranks, std::max<std::int64_t>(least[0] / host_ranks, 1), placement,
                   fitting);
  } catch (const ConfigError& e) {
    error = e.what();
  } catch (const InvalidArgument& e) {
    error = std::string("parallelism.auto_machine: ") + e.what();
  }
  std::vector<std::int64_t> failed{error.empty() ? 0 : 1};
  if (world) world->all_reduce(failed, dist::ReduceOp::kMax);
  if (!error.empty()) throw ConfigError(error);
  if (failed[0] != 0)
    throw ConfigError(
        "parallelism.auto_machine: another rank could not plan the layout (its "
        "error says why)");
  std::string keys;
  for (const auto& [key, value] : layout_keys(best.job)) keys += " " + key + "=" + value;
  char line[256];
  std::snprintf(line, sizeof(line),
                "the fastest of %zu layouts that fit (estimated %.1f ms a step, %.0f MiB a rank):",
                fitting, best.time.seconds * 1e3, static_cast<double>(best.peak) / (1 << 20));
  out << "parallelism.auto_machine: " << line << keys << std::endl;
  return with_layout(std::move(config), best.job);
}

}  // namespace weft::train
