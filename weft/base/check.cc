#include "weft/base/check.h"

#include <cstdio>
#include <cstdlib>

namespace weft::internal {

void check_failed(const char* file, int line, const std::string& message) {
  std::fprintf(stderr, "%s:%d: weft internal check failed: %s\n", file, line, message.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace weft::internal
