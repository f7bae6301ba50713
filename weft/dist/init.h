// init_process_group: how processes started by weftrun (or by hand) find each other and form
// the world group, with torch.distributed's init methods and environment variables.
//
//   auto world = weft::dist::init_process_group();          // everything from the environment
//   auto world = weft::dist::init_process_group({.backend = "tcp",
//                                                .init_method = "tcp://10.0.0.1:29500",
//                                                .rank = 3, .world_size = 8});
#pragma once

#include <functional>
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

// What a backend gets to build the world group from.
struct BackendContext {
  int rank = 0;        // -1 for a backend that places ranks itself, when nothing said where
  int world_size = 1;  // likewise
  std::shared_ptr<store::Store> store;  // the job's store, private to this attempt (null for
                                        // a backend that rendezvouses by itself)
  std::string token;                    // the job token (may be empty when run by hand)
  std::string host;                     // the address peers reach this rank at
  Seconds timeout{300};
};

using BackendFactory = std::function<std::shared_ptr<ProcessGroup>(const BackendContext&)>;

// For backends: the world group (every rank of the backend's transport, in rank order), once
// the backend has connected its transport.
std::shared_ptr<ProcessGroup> make_world_group(std::shared_ptr<Backend> backend,
                                               const BackendContext& context);

struct BackendTraits {
  // False for a backend whose processes find each other by themselves (mpi: MPI's launcher
  // places them): init_process_group then opens no store and lets the backend set the rank
  // and world size the caller or the environment left open.
  bool uses_store = true;
};

// Makes `name` available to init_process_group. The built-in backends (shm, tcp, auto, and
// mpi when built with it) are registered in weft/dist/backends/registry.cc. Thread-safe.
void register_backend(const std::string& name, BackendFactory factory, BackendTraits traits = {});
std::vector<std::string> registered_backends();

}  // namespace weft::dist
