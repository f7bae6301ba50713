// weft-plan: the fastest layouts to train a configuration's model on N ranks within a memory
// budget a rank, from this machine's measured costs (docs/ESTIMATE.md): every data, context,
// tensor and pipeline degree, schedule and micro-batch size, FSDP mode and activation
// checkpointing, estimated without allocating anything, the global batch kept.
//
//   weftrun --nproc-per-node 2 weft-bench machine --out machine.json
//   weft-plan --config configs/llama_512.toml --nproc 2 --machine machine.json
//   weft-plan --config configs/llama3_8b.toml --nproc 64 --machine machine.json
//       --memory-per-rank 64 --ranks-per-host 8
//
// Exit codes: 0 printed; 2 a bad command line or configuration, or no layout fits (the
// message says what to give more of); 1 the JSON file could not be written.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "placement_options.h"
#include "weft/base/system.h"
#include "weft/estimate/plan.h"
#include "weft/train/auto_layout.h"
#include "weft/train/config.h"
#include "weft/train/trainer.h"

namespace {

using weft::estimate::Candidate;

double mib(std::int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

std::string layout_name(const weft::estimate::Job& job) {
  const weft::parallel::ParallelDims& d = job.options.dims;
  std::string name = "dp_replicate " + std::to_string(d.dp_replicate) + " x dp_shard " +
                     std::to_string(d.dp_shard) + " x cp " + std::to_string(d.cp) + " x tp " +
                     std::to_string(d.tp) + " x pp " + std::to_string(d.pp);
  if (d.dp_shard > 1)
    name += ", " + std::string(weft::parallel::sharding_mode_name(job.options.fsdp_mode));
  if (d.pp > 1)
    name += ", " + job.options.pipeline.schedule + " x " +
            std::to_string(job.options.pipeline.microbatches);
  if (job.activation_checkpointing) name += ", checkpointing";
  return name;
}

std::string flags(const weft::estimate::Job& job) {
  std::string out;
  for (const auto& [key, value] : weft::train::layout_keys(job))
    out += (out.empty() ? "--" : " --") + key + " " + value;
  return out;
}

nlohmann::json to_json(const weft::estimate::Plan& plan) {
  nlohmann::json best = nlohmann::json::array();
  for (const Candidate& c : plan.best) {
    nlohmann::json keys = nlohmann::json::object();
    for (const auto& [key, value] : weft::train::layout_keys(c.job)) keys[key] = value;
    best.push_back({{"layout", layout_name(c.job)},
                    {"keys", keys},
                    {"peak_bytes", c.peak},
                    {"step_seconds", c.time.seconds},
                    {"tokens_per_second", c.time.tokens_per_second}});
  }
  return {{"weighed", plan.weighed}, {"fitting", plan.fitting}, {"best", best}};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app(
      "weft-plan: the fastest layouts for a configuration's model on N ranks within a memory "
      "budget, from the machine's measured costs (docs/ESTIMATE.md).\n"
      "Configuration keys override as in weft-train: --section.key value",
      "weft-plan");
  std::string config_path, machine_path, json_path;
  int nproc = 0;
  double memory_gib = 0;
  std::size_t keep = 5;
  std::int64_t global_batch = 0;
  weft::tools::PlacementOptions where;
  app.add_option("--config", config_path, "TOML configuration, e.g. configs/debug.toml")
      ->required();
  app.add_option("--machine", machine_path, "the machine's measured costs (weft-bench machine)")
      ->required();
  app.add_option("--nproc", nproc, "ranks in the job (default: the configured degrees')")
      ->check(CLI::PositiveNumber);
  app.add_option("--memory-per-rank", memory_gib,
                 "GiB a rank may hold (default: this host's available memory / its ranks)")
      ->check(CLI::PositiveNumber);
  app.add_option("--keep", keep, "layouts to print")->check(CLI::PositiveNumber);
  app.add_option("--global-batch", global_batch,
                 "sequences a step over all data-parallel ranks (default: batch_size x the "
                 "configured data-parallel degree)")
      ->check(CLI::PositiveNumber);
  where.add_to(app);
  app.add_option("--json", json_path, "also write the layouts to this file");
  app.allow_extras();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    namespace train = weft::train;
    const train::Config config = train::with_tokenizer_vocabulary(
        train::load_config(config_path, train::parse_overrides(app.remaining())));
    if (nproc == 0) nproc = train::configured_ranks(config);
    const weft::estimate::Placement placement =
        where.placement(static_cast<int>(config.training.threads));
    const int here =
        placement.ranks_per_host > 0 ? std::min(placement.ranks_per_host, nproc) : nproc;
    const std::int64_t available = weft::available_memory_bytes();
    if (memory_gib == 0 && available < 0)
      throw weft::InvalidArgument(
          "cannot read this host's available memory: give --memory-per-rank");
    const std::int64_t budget = memory_gib > 0 ? static_cast<std::int64_t>(memory_gib * (1 << 30))
                                               : std::max<std::int64_t>(available / here, 1);
    weft::estimate::PlanRequest request = train::plan_request(config, nproc, budget, global_batch);
    request.keep = keep;
    request.base.p2p_ring_bytes = weft::estimate::p2p_ring_bytes(where.backend);
    const auto start = std::chrono::steady_clock::now();
    const weft::estimate::Plan plan =
        weft::estimate::plan(request, weft::estimate::read_machine(machine_path), placement);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    std::printf(
        "%zu layouts of %d ranks weighed in %.0f ms, %zu within %.1f GiB a rank; global "
        "batch %lld sequences of %lld\n",
        plan.weighed, nproc, ms, plan.fitting, static_cast<double>(budget) / (1 << 30),
        static_cast<long long>(request.global_batch), static_cast<long long>(request.base.seq));
    if (plan.best.empty())
      throw weft::InvalidArgument(
          "no layout fits: give more memory a rank (--memory-per-rank), "
          "more ranks (--nproc) or a smaller batch or model");
    std::printf("  %-72s %10s %10s %12s\n", "layout", "peak MiB", "step ms", "tokens/s");
    for (const Candidate& c : plan.best)
      std::printf("  %-72s %10.1f %10.1f %12.0f\n", layout_name(c.job).c_str(), mib(c.peak),
                  c.time.seconds * 1e3, c.time.tokens_per_second);
    std::printf("the fastest, as weft-train's flags:\n  %s\n", flags(plan.best[0].job).c_str());
    if (!json_path.empty()) {
      std::ofstream out(json_path);
      out << to_json(plan).dump(2) << "\n";
      if (!out) throw weft::Error("cannot write " + json_path);
    }
  } catch (const weft::InvalidArgument& e) {
    std::fprintf(stderr, "weft-plan: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "weft-plan: %s\n", e.what());
    return 1;
  }
  return 0;
}
