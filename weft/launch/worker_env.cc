#include "weft/launch/worker_env.h"

#include <algorithm>
#include <string_view>

namespace weft::launch {

EnvVars worker_variables(const JobPlan& plan, JobPorts ports, int local_rank, int restart_count) {
  const LaunchOptions& o = plan.options;
  const int rank = o.node_rank * o.nproc_per_node + local_rank;
  EnvVars vars = {
      {"RANK", std::to_string(rank)},
      {"WORLD_SIZE", std::to_string(o.nnodes * o.nproc_per_node)},
      {"LOCAL_RANK", std::to_string(local_rank)},
      {"LOCAL_WORLD_SIZE", std::to_string(o.nproc_per_node)},
      {"GROUP_RANK", std::to_string(o.node_rank)},
      {"GROUP_WORLD_SIZE", std::to_string(o.nnodes)},
      {"NODE_RANK", std::to_string(o.node_rank)},
      {"MASTER_ADDR", plan.master_addr},
      {"MASTER_PORT", std::to_string(ports.master)},
      {"WEFT_STORE_PORT", std::to_string(ports.store)},
      {"WEFT_JOB_TOKEN", plan.token},
      {"WEFT_RESTART_COUNT", std::to_string(restart_count)},
      // Rank 0 must connect to the store node 0's launcher hosts, not start its own.
      {"WEFT_STORE_HOSTED", "1"},
      // weft-train's rank 0 reports its progress for weftrun to show (progress_line.h).
      {"WEFT_PROGRESS_RELAY", "1"},
  };
  if (!o.backend.empty()) vars.emplace_back("WEFT_BACKEND", o.backend);
  // weft-train then survives a rank's death instead of failing (docs/RECOVERY.md).
  if (o.recover != "restart") vars.emplace_back("WEFT_RECOVER", o.recover);
  return vars;
}

// OpenBLAS (weft's float64 products) starts a worker per core at load, and each spins,
// yielding, for its first ~0.1 s: a rank's own waits then yield to it, 12-18 us a small
// collective instead of 0.6 (docs/PERFORMANCE.md, "Small messages"). weft runs OpenBLAS on
// one thread anyway; as torchrun does with OMP_NUM_THREADS, the user's setting wins.
EnvVars worker_defaults() { return {{"OPENBLAS_NUM_THREADS", "1"}}; }

std::vector<std::string> merge_environment(const char* const* base, const EnvVars& vars,
                                           const EnvVars& defaults) {
  std::vector<std::string> env;
  const auto named = [](const EnvVars& list, std::string_view name) {
    return std::any_of(list.begin(), list.end(), [&](const auto& kv) { return kv.first == name; });
  };
  std::vector<std::string_view> inherited;
  for (const char* const* p = base; p != nullptr && *p != nullptr; ++p) {
    const std::string_view entry(*p);
    const std::string_view name = entry.substr(0, entry.find('='));
    inherited.push_back(name);
    if (!named(vars, name)) env.emplace_back(entry);
  }
  for (const auto& [key, value] : vars) env.push_back(key + "=" + value);
  for (const auto& [key, value] : defaults) {
    if (named(vars, key) || std::find(inherited.begin(), inherited.end(), key) != inherited.end())
      continue;
    env.push_back(key + "=" + value);
  }
  return env;
}

}  // namespace weft::launch
