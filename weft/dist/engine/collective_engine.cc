#include "weft/dist/engine/collective_engine.h"

#include <cstring>

#include "weft/dist/algorithms/scratch.h"

namespace weft::dist {

void CollectiveEngine::all_gather_list(const std::vector<Buffer>& outs, Buffer in,
                                       const OpContext& op) {
  const std::size_t block = in.size_bytes();
  std::byte* gathered = algorithms::scratch(algorithms::Scratch::kStaging, outs.size() * block);
  all_gather(Buffer(gathered, outs.size() * in.count, in.dtype), in, op);
  if (block == 0) return;
  for (std::size_t r = 0; r < outs.size(); ++r) {
    std::memcpy(outs[r].data, gathered + r * block, block);
  }
}

}  // namespace weft::dist
