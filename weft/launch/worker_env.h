// The environment contract between weftrun and its workers (docs/LAUNCHER.md has the
// table). The names are torchrun's, so programs written for torchrun find what they expect.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "weft/launch/launch_options.h"

namespace weft::launch {

using EnvVars = std::vector<std::pair<std::string, std::string>>;

// The job's two ports. weftrun's store listens on `store`; `master` is left free for the
// workers, as MASTER_PORT: a PyTorch program's env:// rendezvous starts its own TCPStore
// there (on rank 0), as under torchrun.
struct JobPorts {
  int store = 0;
  int master = 0;
};

// The variables weftrun sets for the worker with `local_rank` on this node: RANK,
// WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE, NODE_RANK,
// MASTER_ADDR, MASTER_PORT (ports.master), WEFT_STORE_PORT (ports.store), WEFT_JOB_TOKEN,
// WEFT_RESTART_COUNT, WEFT_STORE_HOSTED (always "1": the launcher hosts the store) and
// WEFT_BACKEND when --backend was given.
EnvVars worker_variables(const JobPlan& plan, JobPorts ports, int local_rank, int restart_count);

// What the workers get unless they inherit it: OPENBLAS_NUM_THREADS=1.
EnvVars worker_defaults();

// `base` ("NAME=value" strings, as in environ; null-terminated, may be null) with every
// variable in `vars` set (an inherited variable of the same name is replaced, not repeated)
// and every one in `defaults` that neither `base` nor `vars` names.
std::vector<std::string> merge_environment(const char* const* base, const EnvVars& vars,
                                           const EnvVars& defaults = {});

}  // namespace weft::launch
