// weft-train: trains a Llama on a text file or token shards from a TOML configuration
// (docs/TRAINING.md, docs/DATA.md).
//
//   weft-train --config configs/debug.toml [--section.key value ...]
//   weftrun --nproc-per-node 2 weft-train --config configs/debug.toml   (data parallel)
//
// Exit codes: 0 trained; 2 a bad command line or configuration (nothing written); 1 a failure
// while training (the message says what).
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <new>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "weft/base/simd.h"
#include "weft/dist/init.h"
#include "weft/dist/launch_env.h"
#include "weft/train/auto_layout.h"
#include "weft/train/describe.h"
#include "weft/train/trainer.h"

namespace {

// Under weftrun, records for weftrun's bar; a bar only on a terminal of the process's own:
// mpirun and srun hand their ranks a terminal whose output ends up in log files, where
// control codes do not belong.
weft::train::Progress progress_mode(const std::optional<weft::dist::LaunchEnvironment>& launched) {
  const char* relay = std::getenv("WEFT_PROGRESS_RELAY");
  if (relay != nullptr && std::string_view(relay) == "1") return weft::train::Progress::kRelay;
  const bool cluster = launched && (launched->launcher == "mpirun" || launched->launcher == "pmi" ||
                                    launched->launcher == "slurm");
  return ::isatty(STDOUT_FILENO) == 1 && !cluster ? weft::train::Progress::kBar
                                                  : weft::train::Progress::kNone;
}

// Where the descriptions start, for CLI11's options and the configuration keys alike, and
// where the keys' lines end.
constexpr std::size_t kHelpColumn = 44;
constexpr std::size_t kHelpWidth = 100;

// The configuration keys after CLI11's options: they are not CLI11 options (parse_overrides
// reads them from what CLI11 leaves over, in order), so --help lists them from the config table.
std::string keys_help() {
  return "Configuration keys, as --section.key TYPE=default: set in the --config file as\n"
         "[section] key = value, or here as --section.key value (or =value), which wins over\n"
         "the file. The default is what applies when neither sets a key.\n\n" +
         weft::train::config_help(kHelpColumn, kHelpWidth);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app(
      "weft-train: trains a Llama on a text file or token shards (docs/TRAINING.md, "
      "docs/DATA.md).\n"
      "Any configuration key can be overridden as --section.key value, e.g.\n"
      "  weft-train --config configs/debug.toml --training.steps 100 --optimizer.lr 1e-3",
      "weft-train");
  std::string config_path;
  app.add_option("--config", config_path, "TOML configuration, e.g. configs/debug.toml");
  bool describe_only = false;
  app.add_flag("--describe", describe_only,
               "print the model's parameter count and shapes and the mesh, allocating nothing, "
               "and exit (any size: configs/llama3_405b.toml)");
  app.allow_extras();
  app.get_formatter()->column_width(kHelpColumn);
  app.footer(keys_help());
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;  // --help, or a usage error (CLI11's own codes are 100+)
  }
  try {
    weft::simd::use_target_from_env();  // WEFT_SIMD_TARGET=AVX2: that vector path
    weft::train::Config config =
        weft::train::load_config(config_path, weft::train::parse_overrides(app.remaining()));
    if (describe_only) {
      std::fputs(weft::train::describe(config).c_str(), stdout);
      return 0;
    }
    // Started by weftrun, mpirun or srun with several ranks: the job's world group (shm on
    // one host unless WEFT_BACKEND names another).
    // A replacement (weftrun --recover in-place) joins the round the others form next; in an
    // elastic job, the round that admits it.
    std::shared_ptr<weft::dist::ProcessGroup> world;
    weft::train::Membership membership = weft::train::membership_from_environment();
    const auto launched = weft::dist::launch_environment();
    if (membership.replacement && launched &&
        weft::train::recovers_elastically(config, membership)) {
      const auto trainer =
          weft::train::join_elastic_job(config, std::cout, progress_mode(launched), membership);
      if (!trainer) {
        std::fprintf(stderr, "weft-train: the job finished before this process could join it\n");
        return 0;
      }
      trainer->run();
      return 0;
    }
    if (launched && launched->world_size > 1) {
      const weft::dist::JoinedWorld joined =
          membership.replacement
              ? weft::train::rejoin_world(config, weft::dist::InitOptions::kFirstFreeRound)
              : weft::dist::join_process_group(
                    {.timeout = weft::Seconds(config.comm.init_timeout_seconds)});
      world = joined.world;
      membership.round = joined.round;
    }
    std::ostringstream quiet;  // rank 0 says which layout the plan chose
    config = weft::train::with_planned_layout(std::move(config), world.get(),
                                              launched ? launched->local_world_size : 1,
                                              world && world->rank() != 0 ? quiet : std::cout);
    weft::train::Trainer trainer(std::move(config), std::cout, progress_mode(launched), world,
                                 membership);
    trainer.run();
  } catch (const weft::train::ConfigError& e) {
    std::fprintf(stderr, "weft-train: %s\n", e.what());
    return 2;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr,
                 "weft-train: out of memory: this rank could not allocate what the model, its "
                 "optimizer state and activations need. Lower training.batch_size or "
                 "training.seq_len, set training.activation_checkpointing = true, or spread the "
                 "state over more ranks (parallelism.data_parallel_shard_degree, "
                 "tensor_parallel_degree, pipeline_parallel_degree)\n");
    return 1;
  } catch (const weft::TimeoutError& e) {
    std::fprintf(stderr,
                 "weft-train: %s\n(weft-train: comm.init_timeout_seconds bounds joining the job, "
                 "comm.train_timeout_seconds every collective after it, "
                 "comm.rejoin_timeout_seconds each round of a recovery)\n",
                 e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "weft-train: %s\n", e.what());
    return 1;
  }
  return 0;
}
