// Registers the built-in backends; init_process_group calls it once. Not public.
#pragma once

#include "weft/dist/init.h"

namespace weft::dist::internal {

void register_builtin_backends();

}  // namespace weft::dist::internal
