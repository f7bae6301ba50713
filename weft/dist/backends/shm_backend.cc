#include "weft/dist/backends/shm_backend.h"

#include "weft/dist/transport/shm/shm_transport.h"

namespace weft::dist::internal {

std::shared_ptr<ProcessGroup> make_shm_backend(const BackendContext& context) {
  ShmTransportOptions options;
  options.connect_timeout = context.timeout;
  return make_world_group(
      std::make_shared<ShmTransport>(context.rank, context.world_size, context.store, options),
      "shm", context);
}

}  // namespace weft::dist::internal
