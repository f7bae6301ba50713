// The tcp backend: a TcpTransport mesh under a world ProcessGroup. Not public.
#pragma once

#include "weft/dist/backend.h"
#include "weft/dist/tcp/tcp_transport.h"

namespace weft::dist::internal {

std::shared_ptr<ProcessGroup> make_tcp_backend(const BackendContext& context);

// The tcp transport of `context`'s rank: listening where the job is reached, with its
// token and timeout (the auto backend's tcp level too).
std::shared_ptr<TcpTransport> make_tcp_transport(const BackendContext& context);

}  // namespace weft::dist::internal
