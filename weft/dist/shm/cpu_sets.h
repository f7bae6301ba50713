// Whether a job's ranks on one host have a CPU each: the shm backend's waits spin only then
// (docs/COLLECTIVES.md, "Waiting"). Each rank publishes the CPUs it may run on; the job has a
// CPU per rank when those sets together hold at least as many CPUs as there are ranks. Each
// set alone is not the measure: ranks bound to a core apiece (weftrun --bind-to core, srun
// --cpu-bind=cores) may run on one CPU each, yet every one of them has its own.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace weft::dist::shm {

// The calling thread's allowed CPUs as a list of numbers ("0,1,2"); empty if not known.
std::string allowed_cpus();

// How many CPUs the lists (allowed_cpus()'s, from every rank) hold together; 0 if any list is
// empty (not known). Numbers that do not parse, or lie past CPU_SETSIZE, are skipped: a peer's
// text is never trusted to be well formed.
std::size_t cpus_together(const std::vector<std::string>& lists);

}  // namespace weft::dist::shm
