#include "weft/dist/internal/machine_id.h"

#include <unistd.h>

#include <fstream>

namespace weft::dist::internal {

std::string machine_id() {
  char name[256] = {};
  ::gethostname(name, sizeof(name) - 1);
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  char netns[64] = {};
  const ssize_t n = ::readlink("/proc/self/ns/net", netns, sizeof(netns) - 1);
  return std::string(name) + "/" + boot + "/" + (n > 0 ? std::string(netns, n) : "");
}

}  // namespace weft::dist::internal
