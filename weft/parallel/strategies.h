// What parallelize() applied to a model, shared by its three views (parallelize.h): the step
// protocol, the training state and the reports. Internal to weft::parallel.
#pragma once

#include <memory>
#include <string>

#include "weft/dist/process_group.h"
#include "weft/nn/llama.h"
#include "weft/parallel/context_parallel.h"
#include "weft/parallel/data_parallel.h"
#include "weft/parallel/device_mesh.h"
#include "weft/parallel/parallelize.h"
#include "weft/parallel/pipeline.h"
#include "weft/parallel/tensor_parallel.h"

namespace weft::parallel {

struct Strategies {
  // Validates the degrees, cuts the model into pipeline stages, then applies tensor and
  // context parallelism (in TorchTitan's order), and makes the data-parallel wrapper, its
  // gradients summed as `sums` says.
  Strategies(nn::Llama& model, DeviceMesh* mesh, const ParallelOptions& options, GradientSums sums);
  // The pipeline's callbacks hold `this`.
  Strategies(const Strategies&) = delete;
  Strategies& operator=(const Strategies&) = delete;

  // The sum of `value` over the world (itself alone without a mesh), its wait counted in
  // `seconds`. Collective.
  double sum_over_world(double value);
  int data_size() const { return options.dims.data_parallel(); }

  nn::Llama& model;
  DeviceMesh* mesh;  // null: one process
  const ParallelOptions options;
  // The mesh's groups along each dimension used (null where the degree is 1).
  dist::ProcessGroup *pp = nullptr, *tp = nullptr, *cp = nullptr;
  std::unique_ptr<PipelineRuntime> pipeline;  // with pp
  std::shared_ptr<ProcessGroupTensorParallel> tp_adapter;
  std::shared_ptr<ProcessGroupContextParallel> cp_adapter;
  // This rank's replica (dp_replicate coordinate) and data slice (replica x dp_shard + shard).
  int replica = 0, data_rank = 0;
  std::unique_ptr<DataParallel> dp;
  // Blocked in finish_sync, the world all-reduces and the invariant norm's tensor-parallel
  // all-gather.
  double seconds = 0;
};

// The training state and the reports of `s`, which outlives them.
std::unique_ptr<TrainingState> make_training_state(Strategies& s);
std::unique_ptr<TrainingReport> make_training_report(const Strategies& s);

}  // namespace weft::parallel
