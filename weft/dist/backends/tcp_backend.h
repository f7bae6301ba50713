// The tcp backend: a TcpTransport mesh under a world ProcessGroup. Not public.
#pragma once

#include "weft/dist/init.h"

namespace weft::dist::internal {

std::shared_ptr<ProcessGroup> make_tcp_backend(const BackendContext& context);

}  // namespace weft::dist::internal
