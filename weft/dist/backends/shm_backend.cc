#include "weft/dist/backends/shm_backend.h"

#include <numeric>

#include "weft/dist/transport/shm/shm_transport.h"

namespace weft::dist::internal {

std::shared_ptr<ProcessGroup> make_shm_backend(const BackendContext& context) {
  ShmTransportOptions options;
  options.connect_timeout = context.timeout;
  auto transport = std::make_shared<ShmTransport>(context.rank, context.world_size,
                                                  context.store, options);
  std::vector<int> members(static_cast<std::size_t>(context.world_size));
  std::iota(members.begin(), members.end(), 0);
  return std::make_shared<ProcessGroup>(std::move(transport), std::move(members), "shm",
                                        GroupOptions{context.timeout, "world"});
}

}  // namespace weft::dist::internal
