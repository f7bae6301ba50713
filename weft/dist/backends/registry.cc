// The one place that lists weft's built-in backends. Optional ones (MPI, when built with it)
// are added here under their #ifdef, so no other file needs one.
#include "weft/dist/backends/registry.h"

#include "weft/dist/backends/shm_backend.h"
#include "weft/dist/backends/tcp_backend.h"

namespace weft::dist::internal {

void register_builtin_backends(std::map<std::string, BackendFactory>& factories) {
  // emplace: a backend the user registered under the same name first is kept.
  factories.emplace("tcp", make_tcp_backend);
  factories.emplace("shm", make_shm_backend);
}

}  // namespace weft::dist::internal
