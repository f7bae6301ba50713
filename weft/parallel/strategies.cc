#include "weft/parallel/strategies.h"

#include <utility>
#include <vector>

#include "weft/base/error.h"
#include "weft/parallel/timed.h"

namespace weft::parallel {
namespace {

int coordinate(const DeviceMesh* mesh, const std::string& dim) {
  return mesh != nullptr && mesh->has(dim) ? mesh->coordinate(dim) : 0;
}

dist::ProcessGroup* group(const DeviceMesh* mesh, const std::string& dim) {
  return mesh != nullptr && mesh->has(dim) ? &mesh->group(dim) : nullptr;
}

std::unique_ptr<PipelineRuntime> make_pipeline(nn::Llama& model, dist::ProcessGroup& pp,
                                               const PipelineOptions& options) {
  const int n_layers = static_cast<int>(model.config().n_layers);
  Schedule schedule = make_pipeline_schedule(options, n_layers, pp.size());
  auto layers = split_layers(n_layers, schedule.num_stages(), options.layers_per_stage);
  return std::make_unique<PipelineRuntime>(model, pp, std::move(schedule), std::move(layers));
}

// The group data parallelism reduces over along `dim`: with context parallelism, `dim` and
// cp flattened (or cp alone when `dim` is absent).
dist::ProcessGroup* data_group(DeviceMesh* mesh, dist::ProcessGroup* cp, const std::string& dim) {
  if (cp == nullptr) return group(mesh, dim);
  if (!mesh->has(dim)) return cp;
  const std::string name = dim + "_cp";
  mesh->flatten({dim, "cp"}, name);
  return &mesh->group(name);
}

}  // namespace

Strategies::Strategies(nn::Llama& llama, DeviceMesh* device_mesh,
                       const ParallelOptions& parallel_options, GradientSums sums)
    : model(llama), mesh(device_mesh), options(parallel_options) {
  const ParallelDims& d = options.dims;
  d.validate(mesh != nullptr ? mesh->world().size() : 1);
  pp = group(mesh, "pp");
  if (pp != nullptr) pipeline = make_pipeline(model, *pp, options.pipeline);
  tp = group(mesh, "tp");
  if (tp != nullptr)
    tp_adapter =
        apply_tensor_parallel(model, *tp, options.sequence_parallel, options.loss_parallel);
  cp = group(mesh, "cp");
  if (cp != nullptr) {
    cp_adapter = std::make_shared<ProcessGroupContextParallel>(*cp);
    model.apply_context_parallel({cp_adapter, options.cp_exchange});
  }
  replica = coordinate(mesh, "dp_replicate");
  data_rank = replica * d.dp_shard + coordinate(mesh, "dp_shard");
  // The context-parallel ranks hold the same parameters and compute gradients from different
  // tokens: the data-parallel wrappers reduce over them too, FSDP sharding over dp_shard x
  // cp (as TorchTitan does), DDP replicating over dp_replicate x cp.
  if (d.dp_shard > 1) {
    dp = make_sharded(model, *data_group(mesh, cp, "dp_shard"), group(mesh, "dp_replicate"),
                      options, sums);
  } else {
    dp = make_replicated(model, data_group(mesh, cp, "dp_replicate"), options, sums);
  }
  if (pipeline) {
    pipeline->on_backward([this](bool may_reduce) { dp->hold_reductions(!may_reduce); },
                          [this] { dp->reduce_held(); });
  }
}

double Strategies::sum_over_world(double value) {
  if (mesh == nullptr) return value;
  std::vector<double> v{value};
  add_seconds(seconds, [&] { mesh->world().all_reduce(v); });
  return v[0];
}

}  // namespace weft::parallel
