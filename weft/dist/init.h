// init_process_group: how processes started by weftrun (or by hand) find each other and form
// the world group, with torch.distributed's init methods and environment variables.
//
//   auto world = weft::dist::init_process_group();          // everything from the environment
//   auto world = weft::dist::init_process_group({.backend = "tcp",
//                                                .init_method = "tcp://10.0.0.1:29500",
//                                                .rank = 3, .world_size = 8});
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "weft/base/deadline.h"
#include "weft/dist/process_group.h"
#include "weft/store/store.h"

namespace weft::dist {

struct InitOptions {
  std::string backend;             // empty: $WEFT_BACKEND, else "shm" when every rank runs on
                                   // this host and "auto" (shm within each host, tcp or mpi
                                   // across, collectives in two levels) when the job spans
                                   // hosts
  std::string init_method;         // empty: "env://"; also "tcp://host:port" and "file:///path"
  int rank = -1;                   // -1: $RANK
  int world_size = -1;             // -1: $WORLD_SIZE
  std::optional<Seconds> timeout;  // rendezvous and per-operation timeout; default 300 s
  // Rendezvous through this store instead of init_method's (torch's init_process_group(
  // store=...)): every rank passes a store shared by the job (say a TCPStore), and its rank
  // and world size. Keys go under "attempt<N>/", as with the other methods.
  std::shared_ptr<store::Store> store;
  // Which world of the attempt to join (in-place recovery, docs/RECOVERY.md): 0 the first;
  // R > 0 the one the ranks form again after a rank died, for the R-th time, its keys under
  // "attempt<N>/round<R>/"; kFirstFreeRound the first round this rank has not joined yet (a
  // replacement worker's: the round the survivors of the failure form next).
  int round = 0;
  static constexpr int kFirstFreeRound = -1;
};

struct JoinedWorld {
  std::shared_ptr<ProcessGroup> world;
  int round = 0;  // the round joined (InitOptions::round, resolved)
};

// Rendezvous through the init method's store, then builds the world group on the chosen
// backend. Reads the rank, world size and master from the launcher's variables (torchrun's
// RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, as torchrun sets them (weftrun: WEFT_STORE_PORT
// for its store, leaving MASTER_PORT to PyTorch), or mpirun's, PMI's or
// srun's: weft/dist/launch_env.h) plus WEFT_BACKEND, WEFT_JOB_TOKEN, WEFT_HOST,
// WEFT_RESTART_COUNT and WEFT_STORE_HOSTED (set by weftrun). A missing variable, a bad value or an
// unknown backend throws dist::InvalidArgument with one line saying what to set. Blocks until every
// rank has joined or the timeout passes (weft::TimeoutError).
std::shared_ptr<ProcessGroup> init_process_group(InitOptions options = {});
// init_process_group, also saying which round it joined. A rank joins each round once:
// options.round > 0 that this rank has joined already throws dist::InvalidArgument.
JoinedWorld join_process_group(InitOptions options = {});

// The store the job's processes meet through, as a client, its keys under this attempt's
// prefix (what join_process_group uses): for a later round's bookkeeping (ElasticMembership).
// InvalidArgument unless weftrun hosts it (WEFT_STORE_HOSTED=1), which outlives every rank.
std::shared_ptr<store::Store> connect_job_store(Seconds timeout);

// The names init_process_group accepts: the built-in backends and those registered with
// register_backend (weft/dist/backend.h, for writing one).
std::vector<std::string> registered_backends();

}  // namespace weft::dist
