// The auto backend, the default for a job across hosts: shm between the ranks of a host, tcp
// between hosts, and the world group's collectives in two levels
// (weft/dist/engine/hierarchical_engine.h), as are those of subgroups laid out the same way
// (two or more hosts, each holding a block of two or more of the group's ranks, equal blocks
// in group order); subgroups within one host run on its shared memory alone. Jobs whose hosts
// hold different numbers of ranks, or whose ranks are not numbered host by host, and other
// subgroups, run flat over tcp.
// Not public.
#pragma once

#include "weft/dist/init.h"

namespace weft::dist::internal {

std::shared_ptr<ProcessGroup> make_auto_backend(const BackendContext& context);

}  // namespace weft::dist::internal
