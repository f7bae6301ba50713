// weft-bench tune: measures, on this machine and this job's backend and rank count, where the
// collective engines should change algorithm, writes the table every later job of that shape
// reads (weft/dist/engine/tuning.h), and times the defaults against it. Not a library API.
#pragma once

#include <string>

#include "weft/dist.h"

namespace weft::tools {

// Collective over `pg` (the world group); rank 0 prints and writes `out` (empty: where jobs
// look, dist::table_path, or the default path where $WEFT_COLLECTIVE_TABLE is "off"). Sizes
// are tried within [min_bytes, max_bytes] and each decision's own range (1 KiB-64 KiB for
// the one-step all-reduce, 64 KiB-64 MiB for single copy, ...), and the thresholds fit the
// sizes tried.
void tune_collectives(dist::ProcessGroup& pg, const std::string& out, std::size_t min_bytes,
                      std::size_t max_bytes);

}  // namespace weft::tools
