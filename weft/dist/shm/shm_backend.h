// The shm backend: a ShmTransport under a world ProcessGroup, for ranks on one host. Not
// public.
#pragma once

#include "weft/dist/backend.h"

namespace weft::dist::internal {

std::shared_ptr<ProcessGroup> make_shm_backend(const BackendContext& context);

}  // namespace weft::dist::internal
