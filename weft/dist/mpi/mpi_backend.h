// The mpi backend: ranks and world size from MPI (under mpirun or srun), collectives on MPI
// communicators (MpiEngine), send/recv on MpiTransport. Built when CMake finds MPI
// (WEFT_WITH_MPI); registered in registry.cc. Not public.
#pragma once

#include "weft/dist/backend.h"

namespace weft::dist::internal {

std::shared_ptr<ProcessGroup> make_mpi_backend(const BackendContext& context);

// The same backend, unwrapped, for another backend to run its network level on (the auto
// backend between hosts): starts MPI or checks whoever did, and checks that MPI placed this
// process at the context's rank and world size, where those are set (>= 0).
std::shared_ptr<Backend> make_mpi_network(const BackendContext& context);

}  // namespace weft::dist::internal
