// Facts about the machine the process runs on.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace weft {

// CPUs this process may run on (its affinity mask, so taskset and cgroup cpusets are
// honoured), at least 1.
std::size_t available_cores();

// Bytes of memory the process can still take without swapping: the kernel's MemAvailable
// (/proc/meminfo), or less where the process's cgroup (v2) limits it (memory.max less
// memory.current, plus the page cache it can reclaim); -1 when neither can be read.
std::int64_t available_memory_bytes();

// The process's resident memory now (/proc/self/statm, opened each time: a forked child's
// "self" is its own), in bytes; 0 where it cannot be read.
std::int64_t resident_memory_bytes();

// The process's peak resident memory so far (getrusage), in bytes.
std::int64_t peak_resident_memory_bytes();

// The CPU's model name (/proc/cpuinfo's first "model name"), or "unknown".
std::string cpu_model();

}  // namespace weft
