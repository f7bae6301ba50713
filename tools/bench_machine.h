// weft-bench machine: this machine's costs for weft-estimate's step time (estimate/machine.h),
// measured with every rank of the job computing at once, as training does. Not a library API.
#pragma once

#include <string>

#include "weft/dist.h"

namespace weft::tools {

// Collective over `pg`: times the compute path (float32 and bfloat16) on every rank at once,
// then all_reduce, all_gather, reduce_scatter and sendrecv from 4 KiB to 16 MiB, fits each
// collective's alpha and beta, and has rank 0 write the machine to `path` (keeping the other
// backends' fits a file there already has) and print it.
void measure_machine(dist::ProcessGroup& pg, const std::string& path);

}  // namespace weft::tools
