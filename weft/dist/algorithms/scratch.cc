#include "weft/dist/algorithms/scratch.h"

#include <vector>

namespace weft::dist::algorithms {

std::byte* scratch(Scratch slot, std::size_t bytes) {
  thread_local std::vector<std::byte> buffers[5];
  std::vector<std::byte>& buffer = buffers[static_cast<int>(slot)];
  if (buffer.size() < bytes) buffer = std::vector<std::byte>(bytes);
  return buffer.data();
}

}  // namespace weft::dist::algorithms
