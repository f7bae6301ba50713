// The mpi backend: ranks and world size from MPI (under mpirun or srun), collectives on MPI
// communicators (MpiEngine), send/recv on MpiTransport. Built when CMake finds MPI
// (WEFT_WITH_MPI); registered in registry.cc. Not public.
#pragma once

#include "weft/dist/init.h"

namespace weft::dist::internal {

std::shared_ptr<ProcessGroup> make_mpi_backend(const BackendContext& context);

}  // namespace weft::dist::internal
