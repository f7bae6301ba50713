#include "weft/dist/backends/tcp_backend.h"

#include <numeric>

#include "weft/dist/transport/tcp/tcp_transport.h"

namespace weft::dist::internal {

std::shared_ptr<ProcessGroup> make_tcp_backend(const BackendContext& context) {
  TcpTransportOptions options;
  options.listen_host = context.host;
  options.token = context.token;
  options.connect_timeout = context.timeout;
  auto transport = std::make_shared<TcpTransport>(context.rank, context.world_size,
                                                  context.store, options);
  std::vector<int> members(static_cast<std::size_t>(context.world_size));
  std::iota(members.begin(), members.end(), 0);
  return std::make_shared<ProcessGroup>(std::move(transport), std::move(members), "tcp",
                                        GroupOptions{context.timeout, "world"});
}

}  // namespace weft::dist::internal
