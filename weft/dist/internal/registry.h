// Adds the built-in backends to the registry; init_process_group calls it once, under the
// registry lock. Not public.
#pragma once

#include <map>
#include <string>

#include "weft/dist/backend.h"

namespace weft::dist::internal {

struct RegisteredBackend {
  BackendFactory factory;
  BackendTraits traits;
};

void register_builtin_backends(std::map<std::string, RegisteredBackend>& backends);

}  // namespace weft::dist::internal
