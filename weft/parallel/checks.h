// Checks data parallelism runs at start-up: that every rank holds the same parameters.
#pragma once

#include "weft/dist/process_group.h"
#include "weft/nn/parameter.h"

namespace weft::parallel {

// Throws weft::Error on every rank of `group`, naming the first parameter that differs from
// rank 0's (bitwise) on some rank. Collective: rank 0 broadcasts every parameter.
void check_parameters_identical(nn::ParameterList& params, dist::ProcessGroup& group);
// Whether WEFT_DIST_DEBUG=detail asks for such checks where they are optional.
bool debug_checks_enabled();

}  // namespace weft::parallel
