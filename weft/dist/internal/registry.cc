// The one place that lists weft's built-in backends. Optional ones (MPI, when built with it)
// are added here under their #ifdef, so no other file needs one; the auto backend gets mpi as
// its network between hosts from here too.
#include "weft/dist/internal/registry.h"

#include "weft/dist/auto/auto_backend.h"
#include "weft/dist/shm/shm_backend.h"
#include "weft/dist/tcp/tcp_backend.h"
#ifdef WEFT_HAVE_MPI
#include "weft/dist/mpi/mpi_backend.h"
#endif

namespace weft::dist::internal {
namespace {

#ifdef WEFT_HAVE_MPI
constexpr NetworkFactory kMpiNetwork = make_mpi_network;
#else
constexpr NetworkFactory kMpiNetwork = nullptr;
#endif

std::shared_ptr<ProcessGroup> make_auto(const BackendContext& context) {
  return make_auto_backend(context, kMpiNetwork);
}

}  // namespace

void register_builtin_backends(std::map<std::string, RegisteredBackend>& backends) {
  // emplace: a backend the user registered under the same name first is kept.
  backends.emplace("tcp", RegisteredBackend{make_tcp_backend, {}});
  backends.emplace("shm", RegisteredBackend{make_shm_backend, {}});
  backends.emplace("auto", RegisteredBackend{make_auto, {}});
#ifdef WEFT_HAVE_MPI
  backends.emplace("mpi", RegisteredBackend{make_mpi_backend, {.uses_store = false}});
#endif
}

}  // namespace weft::dist::internal
