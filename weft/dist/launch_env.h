// Where a process of a job learns its place in it, whichever launcher started it: weftrun or
// torchrun (RANK, WORLD_SIZE, ...), Open MPI's mpirun (OMPI_COMM_WORLD_*), an MPI launcher
// speaking PMI (PMI_RANK, PMI_SIZE: MPICH's and Intel MPI's mpiexec), or Slurm's srun
// (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_JOB_NODELIST). init_process_group reads
// it, so `mpirun -np 4 weft-train ...` and `srun weft-train ...` work without weftrun.
//
//   const auto env = weft::dist::launch_environment();   // env.rank, env.local_rank, ...
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "weft/base/function_ref.h"

namespace weft::dist {

struct LaunchEnvironment {
  std::string launcher;  // "torchrun" (weftrun sets the same names), "mpirun", "pmi", "slurm"
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;        // among the job's processes on this host
  int local_world_size = 1;  // the job's processes on this host
  // Where rank 0 serves the rendezvous store: MASTER_ADDR if set; under a cluster launcher
  // (mpirun, pmi, slurm) without it, the first host of SLURM_JOB_NODELIST, else 127.0.0.1
  // when every rank is on this host. std::nullopt otherwise (torchrun's names come with
  // MASTER_ADDR, as torch requires).
  std::optional<std::string> master_addr;
  // MASTER_PORT if set; under a cluster launcher without it, one derived from the job id (the
  // same on every rank, different for two jobs sharing a node), else 29500.
  std::optional<int> master_port;
};

using EnvLookup = FunctionRef<std::optional<std::string>(std::string_view name)>;

// The launcher's variables through `lookup` (tests pass their own), first match wins:
// RANK + WORLD_SIZE, then OMPI_COMM_WORLD_RANK + _SIZE, then PMI_RANK + PMI_SIZE, then
// SLURM_PROCID + SLURM_NTASKS. std::nullopt when none is set; dist::InvalidArgument naming
// the variable when one is malformed (not an integer, a rank outside the world) or when a
// rank is set without its world size.
std::optional<LaunchEnvironment> read_launch_environment(EnvLookup lookup);
// The same from this process's environment.
std::optional<LaunchEnvironment> launch_environment();

// The first host of a Slurm host list: "node[07-10,12],gpu1" -> "node07".
std::string first_slurm_host(std::string_view nodelist);

}  // namespace weft::dist
