#include "weft/dist/launch_env.h"

#include <algorithm>
#include <cstdlib>
#include <functional>

#include "weft/dist/errors.h"

namespace weft::dist {
namespace {

// Ports derived from a job id start at kDefaultPort and stay below kDefaultPort + kPortSpan.
constexpr int kDefaultPort = 29500;
constexpr int kPortSpan = 2000;

class Reader {
 public:
  explicit Reader(EnvLookup lookup) : lookup_(lookup) {}

  std::optional<std::string> text(std::string_view name) const { return lookup_(name); }
  std::optional<int> number(std::string_view name) const {
    const auto v = lookup_(name);
    if (!v) return std::nullopt;
    try {
      std::size_t used = 0;
      const int n = std::stoi(*v, &used);
      if (used == v->size() && n >= 0) return n;
    } catch (const std::exception&) {
    }
    throw InvalidArgument("dist: " + std::string(name) + "='" + *v +
                          "' is not a non-negative integer; it is set by the launcher, so "
                          "check how this process was started");
  }

 private:
  EnvLookup lookup_;
};

// Which launcher set which names, in the order they are tried.
struct Names {
  const char* launcher;
  const char* rank;
  const char* size;
  const char* local_rank;  // may be absent from the environment
  const char* local_size;
  const char* job_id;  // for the port
  // Whether the launcher says where the master is (MASTER_ADDR, MASTER_PORT, as torch
  // requires of torchrun's names), or weft derives it when they are not exported.
  bool sets_master;
};

constexpr Names kLaunchers[] = {
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "TORCHELASTIC_RUN_ID",
     true},
    {"mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE", "PMIX_NAMESPACE", false},
    {"pmi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", "PMI_KVS_NAME", false},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE",
     "SLURM_JOB_ID", false},
};

// The launcher's count of this host's processes; for Slurm, whose SLURM_NTASKS_PER_NODE is
// only set with --ntasks-per-node, the tasks spread over SLURM_JOB_NUM_NODES instead.
int local_world_size(const Reader& env, const Names& names, int world_size) {
  if (const auto text = env.text(names.local_size)) {
    if (text->find_first_not_of("0123456789") == std::string::npos) {
      return env.number(names.local_size).value_or(world_size);
    }
  }
  const int nodes = std::max(1, env.number("SLURM_JOB_NUM_NODES").value_or(1));
  return (world_size + nodes - 1) / nodes;
}

int port_for(const std::optional<std::string>& job_id) {
  if (!job_id) return kDefaultPort;
  return kDefaultPort + static_cast<int>(std::hash<std::string>{}(*job_id) % kPortSpan);
}

}  // namespace

std::string first_slurm_host(std::string_view nodelist) {
  std::string host;
  int depth = 0;
  bool in_first_item = true;  // inside brackets: still in the first range of the group
  for (const char c : nodelist) {
    if (depth == 0 && c == ',') break;  // the first host ends here
    if (c == '[') {
      ++depth;
      in_first_item = true;
    } else if (c == ']') {
      --depth;
    } else if (depth > 0) {
      if (c == ',' || c == '-') in_first_item = false;
      if (in_first_item) host += c;
    } else {
      host += c;
    }
  }
  return host;
}

std::optional<LaunchEnvironment> read_launch_environment(EnvLookup lookup) {
  const Reader env(lookup);
  for (const Names& names : kLaunchers) {
    const auto rank = env.number(names.rank);
    const auto size = env.number(names.size);
    if (rank.has_value() != size.has_value()) {
      throw InvalidArgument("dist: " + std::string(rank ? names.size : names.rank) +
                            " is not set but " + (rank ? names.rank : names.size) +
                            " is; set both, or run under weftrun, mpirun or srun");
    }
    if (!rank) continue;
    LaunchEnvironment out;
    out.launcher = names.launcher;
    out.rank = *rank;
    out.world_size = *size;
    if (out.world_size < 1 || out.rank >= out.world_size) {
      throw InvalidArgument("dist: " + std::string(names.rank) + "=" + std::to_string(out.rank) +
                            " is not a rank of " + names.size + "=" +
                            std::to_string(out.world_size));
    }
    out.local_rank = env.number(names.local_rank).value_or(0);
    out.local_world_size = local_world_size(env, names, out.world_size);
    out.master_addr = env.text("MASTER_ADDR");
    if (const auto port = env.number("MASTER_PORT")) {
      if (*port < 1 || *port > 65535) {
        throw InvalidArgument("dist: MASTER_PORT=" + std::to_string(*port) +
                              " is not a port (1 to 65535)");
      }
      out.master_port = *port;
    }
    if (names.sets_master) return out;
    const auto nodes = env.text("SLURM_JOB_NODELIST");
    if (!out.master_addr && nodes && env.number("SLURM_JOB_NUM_NODES").value_or(2) > 1) {
      out.master_addr = first_slurm_host(*nodes);
    } else if (!out.master_addr && out.local_world_size == out.world_size) {
      out.master_addr = "127.0.0.1";
    }
    if (!out.master_port) out.master_port = port_for(env.text(names.job_id));
    return out;
  }
  return std::nullopt;
}

std::optional<LaunchEnvironment> launch_environment() {
  return read_launch_environment([](std::string_view name) -> std::optional<std::string> {
    const char* v = std::getenv(std::string(name).c_str());
    if (v == nullptr || *v == '\0') return std::nullopt;
    return std::string(v);
  });
}

}  // namespace weft::dist
