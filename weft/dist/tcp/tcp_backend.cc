#include "weft/dist/tcp/tcp_backend.h"

#include "weft/dist/backend.h"
#include "weft/dist/tcp/tcp_transport.h"

namespace weft::dist::internal {

std::shared_ptr<TcpTransport> make_tcp_transport(const BackendContext& context) {
  TcpTransportOptions options;
  options.listen_host = context.host;
  options.token = context.token;
  options.connect_timeout = context.timeout;
  return std::make_shared<TcpTransport>(context.rank, context.world_size, context.store, options);
}

std::shared_ptr<ProcessGroup> make_tcp_backend(const BackendContext& context) {
  return make_world_group(std::make_shared<GenericBackend>("tcp", make_tcp_transport(context),
                                                           TcpTransport::kMaxMessage),
                          context);
}

}  // namespace weft::dist::internal
