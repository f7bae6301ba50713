// The auto backend, the default for a job across hosts: shm between the ranks of a host, a
// network between hosts (tcp, or mpi: below), and the world group's collectives in two levels
// (weft/dist/auto/hierarchical_engine.h), as are those of subgroups laid out the same way
// (two or more hosts, each holding a block of two or more of the group's ranks, equal blocks
// in group order); subgroups within one host run on its shared memory alone. Jobs whose hosts
// hold different numbers of ranks, or whose ranks are not numbered host by host, and other
// subgroups, run flat on the network.
//
// The network: $WEFT_AUTO_NETWORK, "tcp" or "mpi"; unset, mpi when the job was started by
// Open MPI's mpirun and weft was built with MPI (`mpi_network` given), else tcp; mpi only in
// a job an MPI launcher started. Every rank must choose the same (checked: InvalidArgument
// on every rank otherwise). Sends and receives go over the network too.
// Not public.
#pragma once

#include "weft/dist/backend.h"

namespace weft::dist::internal {

// Makes the mpi backend for use as the network (registry.cc passes it when built with MPI).
using NetworkFactory = std::shared_ptr<Backend> (*)(const BackendContext& context);

std::shared_ptr<ProcessGroup> make_auto_backend(const BackendContext& context,
                                                NetworkFactory mpi_network);

}  // namespace weft::dist::internal
