// Token ids read by the embedding and the loss, checked against the vocabulary before any is
// used as an index: the first one outside [0, vocab) is an InvalidArgument naming it.
#pragma once

#include <cstdint>
#include <string>

#include "weft/base/error.h"

namespace weft::kernels::internal {

inline void check_ids(const std::int32_t* ids, std::int64_t n, std::int64_t vocab,
                      const char* what) {
  for (std::int64_t i = 0; i < n; ++i) {
    if (ids[i] < 0 || ids[i] >= vocab) {
      throw InvalidArgument(std::string(what) + " " + std::to_string(ids[i]) + " at position " +
                            std::to_string(i) + " is outside the vocabulary [0, " +
                            std::to_string(vocab) + ")");
    }
  }
}

}  // namespace weft::kernels::internal
