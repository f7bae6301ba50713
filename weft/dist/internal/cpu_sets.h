// Whether a job's ranks on one host have a CPU each: the shm and tcp backends' waits spin only
// then (docs/COLLECTIVES.md). Each rank publishes the CPUs it may run on; the ranks have a CPU
// each when those sets together hold at least as many CPUs as there are ranks. Neither one
// rank's set nor the host's CPU count is the measure: ranks bound to a core apiece (weftrun
// --bind-to core, srun --cpu-bind=cores) may each run on one CPU, yet every one has its own,
// and ranks confined to a cpuset share its CPUs however many the host has.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "weft/store/store.h"

namespace weft::dist::internal {

// The calling thread's allowed CPUs as a list of numbers ("0,1,2"); empty if not known.
std::string allowed_cpus();

// How many CPUs the lists (allowed_cpus()'s, from every rank) hold together; 0 if any list is
// empty (not known). Numbers that do not parse, or lie past CPU_SETSIZE, are skipped: a peer's
// text is never trusted to be well formed.
std::size_t cpus_together(const std::vector<std::string>& lists);

// cpus_together of the lists `ranks` ranks published under `prefix` + their index (0 to
// ranks - 1) in `store`; each get waits as the store's gets do.
std::size_t cpus_together(store::Store& store, const std::string& prefix, std::int64_t ranks);

}  // namespace weft::dist::internal
