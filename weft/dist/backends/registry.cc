// The one place that lists weft's built-in backends. Optional ones (MPI, when built with it)
// are added here under their #ifdef, so no other file needs one.
#include "weft/dist/backends/registry.h"

#include "weft/dist/backends/tcp_backend.h"

namespace weft::dist::internal {

void register_builtin_backends() {
  register_backend("tcp", make_tcp_backend);
}

}  // namespace weft::dist::internal
