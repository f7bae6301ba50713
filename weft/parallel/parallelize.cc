#include "weft/parallel/parallelize.h"

#include "weft/base/error.h"
#include "weft/parallel/steps.h"

namespace weft::parallel {

std::vector<std::pair<std::string, int>> ParallelDims::mesh_dims() const {
  std::vector<std::pair<std::string, int>> dims;
  for (const auto& [name, n] : {std::pair<std::string, int>{"pp", pp},
                                {"dp_replicate", dp_replicate},
                                {"dp_shard", dp_shard},
                                {"cp", cp},
                                {"tp", tp}}) {
    if (n > 1) dims.emplace_back(name, n);
  }
  return dims;
}

void ParallelDims::validate(int world) const {
  if (pp >= 1 && dp_replicate >= 1 && dp_shard >= 1 && cp >= 1 && tp >= 1 && product() == world)
    return;
  throw InvalidArgument(
      "parallelism: pipeline_parallel_degree " + std::to_string(pp) +
      " x data_parallel_replicate_degree " + std::to_string(dp_replicate) +
      " x data_parallel_shard_degree " + std::to_string(dp_shard) + " x context_parallel_degree " +
      std::to_string(cp) + " x tensor_parallel_degree " + std::to_string(tp) + " = " +
      std::to_string(product()) + " must equal the world size " + std::to_string(world) +
      " (weftrun --nproc-per-node, mpirun -np), each degree at least 1");
}

std::unique_ptr<ParallelModel> parallelize(nn::Llama& model, DeviceMesh* mesh,
                                           const ParallelOptions& options) {
  if (options.layout_invariant) return make_layout_invariant_steps(model, mesh, options);
  return std::make_unique<Steps>(
      std::make_unique<Strategies>(model, mesh, options, GradientSums::kAsComputed));
}

}  // namespace weft::parallel
