// Which machine this process runs on, as weft tells hosts apart. Not public.
#pragma once

#include <string>

namespace weft::dist::internal {

// The host name, this boot of it, and this process's network namespace: ranks with equal
// ids share /dev/shm and loopback. Ranks in different network namespaces count as different
// hosts even on one kernel (containers, and the tests that model hosts with namespaces).
std::string machine_id();

}  // namespace weft::dist::internal
