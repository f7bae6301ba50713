// Facts about the machine the process runs on.
#pragma once

#include <cstddef>

namespace weft {

// CPUs this process may run on (its affinity mask, so taskset and cgroup cpusets are
// honoured), at least 1.
std::size_t available_cores();

}  // namespace weft
