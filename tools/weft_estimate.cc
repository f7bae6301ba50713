// weft-estimate: what each rank of a training job will hold, and with a machine's measured
// costs how long its step takes, from its configuration alone (docs/ESTIMATE.md): nothing is
// allocated, so any model and any mesh estimates in milliseconds.
//
//   weft-estimate --config configs/llama_512.toml --training.mixed_precision_param bfloat16
//   weft-estimate --config configs/llama3_8b.toml --nproc 64 --parallelism.tensor_parallel_degree 8
//       --parallelism.data_parallel_shard_degree 8 --json estimate.json
//   weftrun --nproc-per-node 2 weft-bench machine --out machine.json
//   weft-estimate --config configs/debug.toml --nproc 2 --machine machine.json --svg step.svg
//
// Exit codes: 0 printed; 2 a bad command line or configuration, or a layout that cannot run
// the model (the message says why); 1 the JSON file could not be written.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "placement_options.h"
#include "weft/estimate/memory_estimate.h"
#include "weft/estimate/step_time.h"
#include "weft/parallel/pipeline_picture.h"
#include "weft/train/config.h"
#include "weft/train/describe.h"
#include "weft/train/trainer.h"

namespace {

using weft::estimate::RankMemory;
using weft::estimate::RankTime;
using weft::estimate::StepEstimate;

double mib(std::int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

bool same_figures(const RankMemory& a, const RankMemory& b) {
  return a.stage == b.stage && a.parameters == b.parameters && a.gradients == b.gradients &&
         a.optimizer == b.optimizer && a.activations == b.activations && a.scratch == b.scratch &&
         a.working == b.working;
}

// One line per run of consecutive ranks with the same figures.
std::string table(const std::vector<RankMemory>& ranks) {
  std::string out =
      "memory per rank, estimated (MiB):\n"
      "  ranks        stage  parameters  gradients  optimizer  activations    scratch    working"
      "    program      total\n";
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i + 1;
    while (j < ranks.size() && same_figures(ranks[i], ranks[j])) ++j;
    const RankMemory& m = ranks[i];
    const std::string which =
        j - i == 1 ? std::to_string(i) : std::to_string(i) + "-" + std::to_string(j - 1);
    char line[240];
    std::snprintf(
        line, sizeof(line), "  %-12s %5d %11.1f %10.1f %10.1f %12.1f %10.1f %10.1f %10.1f %10.1f\n",
        which.c_str(), m.stage, mib(m.parameters), mib(m.gradients), mib(m.optimizer),
        mib(m.activations), mib(m.scratch), mib(m.working), mib(m.program), mib(m.total()));
    out += line;
    i = j;
  }
  return out;
}

nlohmann::json to_json(const std::vector<RankMemory>& ranks) {
  nlohmann::json out = nlohmann::json::array();
  for (const RankMemory& m : ranks) {
    out.push_back({{"rank", m.rank},
                   {"stage", m.stage},
                   {"parameters", m.parameters},
                   {"gradients", m.gradients},
                   {"optimizer", m.optimizer},
                   {"activations", m.activations},
                   {"scratch", m.scratch},
                   {"working", m.working},
                   {"program", m.program},
                   {"total", m.total()}});
  }
  return {{"unit", "bytes"}, {"ranks", out}};
}

double ms(double seconds) { return seconds * 1e3; }

std::string step_table(const StepEstimate& t) {
  std::string out =
      "step time per pipeline rank, estimated (ms):\n"
      "  stage    forward   backward  optimizer   blocking  exposed (of background)  pipeline idle"
      "       step\n";
  for (const RankTime& r : t.ranks) {
    char line[240];
    std::snprintf(line, sizeof(line),
                  "  %5d %10.1f %10.1f %10.1f %10.1f %10.1f (%10.1f) %14.1f %10.1f\n", r.stage,
                  ms(r.forward), ms(r.backward), ms(r.optimizer), ms(r.blocking), ms(r.exposed),
                  ms(r.background), ms(r.pipeline_idle), ms(r.step()));
    out += line;
  }
  char line[160];
  std::snprintf(line, sizeof(line), "step %.1f ms, %.0f tokens/s\n", ms(t.seconds),
                t.tokens_per_second);
  return out + line;
}

nlohmann::json to_json(const StepEstimate& t) {
  nlohmann::json ranks = nlohmann::json::array();
  for (const RankTime& r : t.ranks) {
    ranks.push_back({{"stage", r.stage},
                     {"forward", r.forward},
                     {"backward", r.backward},
                     {"optimizer", r.optimizer},
                     {"blocking", r.blocking},
                     {"background", r.background},
                     {"exposed", r.exposed},
                     {"pipeline_idle", r.pipeline_idle},
                     {"step", r.step()}});
  }
  return {{"unit", "seconds"},
          {"step", t.seconds},
          {"tokens_per_second", t.tokens_per_second},
          {"pipeline_ranks", ranks}};
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  if (!out) throw weft::Error("cannot write " + path);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app(
      "weft-estimate: the memory each rank of a training job will hold, from its configuration "
      "alone (docs/ESTIMATE.md).\n"
      "Configuration keys override as in weft-train: --section.key value",
      "weft-estimate");
  std::string config_path, json_path;
  int nproc = 0;
  app.add_option("--config", config_path, "TOML configuration, e.g. configs/debug.toml");
  app.add_option("--nproc", nproc,
                 "ranks in the job (default: the product of the configured degrees, "
                 "data_parallel_replicate_degree -1 counting as 1)")
      ->check(CLI::PositiveNumber);
  app.add_option("--json", json_path, "also write the figures (bytes, seconds) to this file");
  std::string machine_path, svg_path;
  weft::tools::PlacementOptions where;
  app.add_option("--machine", machine_path,
                 "the machine's measured costs (weft-bench machine): also estimate the step time");
  where.add_to(app);
  app.add_option("--svg", svg_path,
                 "with --machine: draw the step's forwards and backwards on each pipeline rank");
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
    if (!svg_path.empty() && machine_path.empty())
      throw weft::InvalidArgument("--svg draws the step time's timeline: give --machine too");
    weft::estimate::Job job = train::estimate_job(config, train::parallel_options(config, nproc));
    job.p2p_ring_bytes = weft::estimate::p2p_ring_bytes(where.backend);
    const std::vector<RankMemory> ranks = weft::estimate::estimate_memory(job);
    std::fputs(train::describe_job(config, nproc).c_str(), stdout);
    std::fputs(table(ranks).c_str(), stdout);
    nlohmann::json json = to_json(ranks);
    if (!machine_path.empty()) {
      const StepEstimate t = weft::estimate::estimate_step_time(
          job, weft::estimate::read_machine(machine_path),
          where.placement(static_cast<int>(config.training.threads)));
      std::fputs(step_table(t).c_str(), stdout);
      json["step_time"] = to_json(t);
      if (!svg_path.empty()) {
        write_file(svg_path, weft::parallel::timeline_svg(t.schedule, t.simulation,
                                                          "estimated step of " + config_path));
      }
    }
    if (!json_path.empty()) write_file(json_path, json.dump(2) + "\n");
  } catch (const weft::InvalidArgument& e) {
    std::fprintf(stderr, "weft-estimate: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "weft-estimate: %s\n", e.what());
    return 1;
  }
  return 0;
}
