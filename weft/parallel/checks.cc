#include "weft/parallel/checks.h"

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "weft/base/error.h"

namespace weft::parallel {

bool debug_checks_enabled() {
  const char* debug = std::getenv("WEFT_DIST_DEBUG");
  return debug != nullptr && std::string(debug) == "detail";
}

void check_parameters_identical(nn::ParameterList& params, dist::ProcessGroup& group) {
  for (const auto& p : params.all()) {
    std::vector<float> mine = p->value.to_vector<float>(), root = mine;
    group.broadcast(root, 0);
    // A rank that differs says so; the others learn it from the all-reduce and fail too.
    const bool differ = std::memcmp(mine.data(), root.data(), mine.size() * sizeof(float)) != 0;
    std::vector<int> differs{differ ? 1 : 0};
    group.all_reduce(differs, dist::ReduceOp::kMax);
    if (differs[0] != 0) {
      throw Error("parameter " + p->name +
                  " differs between rank 0 and another rank (this is rank " +
                  std::to_string(group.rank()) + "); initialise every rank from the same seed");
    }
  }
}

}  // namespace weft::parallel
