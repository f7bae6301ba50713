#include "weft/launch/launch_options.h"

#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string_view>

#include "weft/launch/job_token.h"

namespace weft::launch {
namespace {

constexpr const char* kDefaultPath = "/usr/local/bin:/usr/bin:/bin";
constexpr const char* kLoopback = "127.0.0.1";

bool is_executable_file(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

void check_counts(const LaunchOptions& o) {
  if (o.nproc_per_node < 1) {
    throw InvalidArgument("--nproc-per-node " + std::to_string(o.nproc_per_node) +
                          ": give the number of workers to start on this node, at least 1");
  }
  if (o.nnodes < 1) {
    throw InvalidArgument("--nnodes " + std::to_string(o.nnodes) + ": must be at least 1");
  }
  if (o.node_rank < 0 || o.node_rank >= o.nnodes) {
    throw InvalidArgument("--node-rank " + std::to_string(o.node_rank) + " with --nnodes " +
                          std::to_string(o.nnodes) + ": give this node's rank, 0 to " +
                          std::to_string(o.nnodes - 1));
  }
  if (o.max_restarts < 0) {
    throw InvalidArgument("--max-restarts " + std::to_string(o.max_restarts) +
                          ": must be 0 (never restart) or more");
  }
  if (!(o.exit_timeout.count() >= 0)) {
    throw InvalidArgument("--exit-timeout must be 0 (no limit) or more seconds");
  }
  if (o.stop_grace.count() < 0) {
    throw InvalidArgument("--stop-grace must be 0 seconds or more");
  }
  if (o.recover != "restart" && o.recover != "in-place" && o.recover != "elastic") {
    throw InvalidArgument("--recover " + o.recover +
                          ": use restart (stop every worker and start them again), in-place "
                          "(start the dead worker again alone) or elastic (the others go on "
                          "without it until it joins again)");
  }
  if (o.bind_to != "core" && o.bind_to != "none") {
    throw InvalidArgument("--bind-to " + o.bind_to + ": use core (one CPU per worker) or none");
  }
}

// The CPUs this process may run on, in order.
std::vector<int> allowed_cpus() {
  cpu_set_t set;
  std::vector<int> cpus;
  if (::sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  return cpus;
}

// --bind-to core: each worker on a CPU of its own (mpirun's default). More workers than
// CPUs: no binding at all. Not weft's default: on the 2-vCPU machine of docs/PERFORMANCE.md
// bound ranks took 0.9 us for a small all-reduce against 0.3 us unbound.
std::vector<int> worker_cpus(const LaunchOptions& o) {
  std::vector<int> cpus = allowed_cpus();
  if (o.bind_to != "core" || static_cast<std::size_t>(o.nproc_per_node) > cpus.size()) return {};
  cpus.resize(static_cast<std::size_t>(o.nproc_per_node));
  return cpus;
}

// One node: the store listens on loopback only, so workers must be told that address.
std::string single_node_master(const LaunchOptions& o) {
  if (!o.master_addr.empty() && o.master_addr != kLoopback && o.master_addr != "localhost") {
    throw InvalidArgument("--master-addr " + o.master_addr +
                          " with --nnodes 1: a single-node job's store listens on 127.0.0.1 "
                          "only; leave --master-addr out (or pass --nnodes > 1)");
  }
  return kLoopback;
}

std::string multi_node_master(const LaunchOptions& o) {
  if (o.master_addr.empty()) {
    throw InvalidArgument("--nnodes " + std::to_string(o.nnodes) +
                          " needs --master-addr: the address of node 0 that every node can "
                          "reach, the same on every node");
  }
  if (o.master_port == 0 || o.master_port == 65535) {
    throw InvalidArgument("--nnodes " + std::to_string(o.nnodes) +
                          " needs --master-port: a free port on node 0 below 65535, the same "
                          "on every node (port 0 is only for single-node jobs); the workers' "
                          "MASTER_PORT is the next one");
  }
  return o.master_addr;
}

}  // namespace

std::string find_program(const std::string& program, const char* path_env) {
  if (program.empty()) throw ProgramNotFound("PROGRAM is empty: give the program to run");
  if (program.find('/') != std::string::npos) {
    if (is_executable_file(program)) return program;
    throw ProgramNotFound("cannot run PROGRAM '" + program +
                          "': it is not an executable file; check the path and its "
                          "permissions (chmod +x)");
  }
  const std::string_view path = path_env != nullptr ? path_env : kDefaultPath;
  std::size_t start = 0;
  while (start <= path.size()) {
    std::size_t end = path.find(':', start);
    if (end == std::string_view::npos) end = path.size();
    const std::string dir(path.substr(start, end - start));
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + program;
    if (is_executable_file(candidate)) return candidate;
    start = end + 1;
  }
  throw ProgramNotFound("cannot find PROGRAM '" + program + "' in PATH (" + std::string(path) +
                        "); check its spelling, or give its path, e.g. ./" + program);
}

JobPlan plan_job(const LaunchOptions& options, const char* env_token, const char* path_env) {
  check_counts(options);
  if (options.master_port < 0 || options.master_port > 65535) {
    throw InvalidArgument("--master-port " + std::to_string(options.master_port) +
                          ": give a TCP port, 1 to 65535 (0: any free port, one node only)");
  }
  JobPlan plan;
  plan.options = options;
  const bool single = options.nnodes == 1;
  plan.master_addr = single ? single_node_master(options) : multi_node_master(options);
  plan.bind_host = plan.master_addr;
  plan.hosts_store = options.node_rank == 0;
  plan.token = resolve_job_token(options.token, env_token, options.nnodes);
  plan.program_path = find_program(options.program, path_env);
  plan.cpus = worker_cpus(options);
  return plan;
}

}  // namespace weft::launch
