// What weftrun is asked to do (LaunchOptions, one field per command-line option) and what
// that resolves to once defaults are filled in and the options checked (JobPlan).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "weft/base/deadline.h"
#include "weft/base/error.h"

namespace weft::launch {

// PROGRAM cannot be found or is not executable. weftrun exits with 127 for it, as a shell
// does for a command it cannot find.
class ProgramNotFound : public InvalidArgument {
 public:
  using InvalidArgument::InvalidArgument;
};

struct LaunchOptions {
  int nproc_per_node = 1;            // --nproc-per-node: workers on this node
  int nnodes = 1;                    // --nnodes
  int node_rank = 0;                 // --node-rank: 0 .. nnodes-1
  std::string master_addr;           // --master-addr: empty means 127.0.0.1 (one node)
  int master_port = 0;               // --master-port: 0 means any free port (one node)
  int max_restarts = 0;              // --max-restarts
  std::string recover = "restart";   // --recover: restart, in-place or elastic (launcher.h)
  std::string backend;               // --backend: empty leaves WEFT_BACKEND as inherited
  std::optional<std::string> token;  // --token: see resolve_job_token
  Seconds stop_grace{5.0};           // --stop-grace: SIGTERM..SIGKILL when stopping
  Seconds exit_timeout{300.0};       // --exit-timeout: once a worker exited 0; 0: no limit
  std::string bind_to = "none";      // --bind-to: "none" or "core" (one CPU per worker)
  std::string program;               // PROGRAM: a path, or a name looked up in PATH
  std::vector<std::string> args;     // ARGS..., passed to PROGRAM untouched
};

struct JobPlan {
  LaunchOptions options;
  std::string program_path;  // PROGRAM resolved to the file that is executed
  std::string master_addr;   // MASTER_ADDR as the workers see it
  std::string bind_host;     // where node 0's store listens (127.0.0.1 for one node)
  bool hosts_store = false;  // this node (node 0) starts the store
  std::string token;
  // CPU of each local rank (from this process's affinity mask) when binding applies: with
  // --bind-to core and no more workers than CPUs. Empty: workers are not bound.
  std::vector<int> cpus;
};

// Checks `options` and fills in the defaults; `env_token` is WEFT_JOB_TOKEN's value (or
// null), `path_env` PATH's. Throws weft::InvalidArgument naming the offending option and
// what to pass instead, and ProgramNotFound when PROGRAM cannot be executed.
JobPlan plan_job(const LaunchOptions& options, const char* env_token, const char* path_env);

// The file `program` names: itself if it contains a '/', else the first executable
// regular file of that name in the ':'-separated `path_env` (an empty entry is the current
// directory; null PATH means "/usr/local/bin:/usr/bin:/bin"). Throws ProgramNotFound.
std::string find_program(const std::string& program, const char* path_env);

}  // namespace weft::launch
