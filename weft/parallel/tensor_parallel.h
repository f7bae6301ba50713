// Tensor parallelism over a process group: nn::TensorParallelGroup's collectives on
// dist::ProcessGroup, and the full tensors of a tensor-parallel model's slices
// (TrainingState::full).
#pragma once

#include "weft/dist/process_group.h"
#include "weft/nn/llama.h"
#include "weft/nn/tensor_parallel.h"

namespace weft::parallel {

class ProcessGroupTensorParallel : public nn::TensorParallelGroup {
 public:
  // `group` outlives this object.
  explicit ProcessGroupTensorParallel(dist::ProcessGroup& group) : group_(group) {}
  int rank() const override { return group_.rank(); }
  int size() const override { return group_.size(); }
  void all_reduce_sum(float* data, std::int64_t n) override;
  void all_reduce_max(float* data, std::int64_t n) override;
  void all_gather(const void* in, void* out, std::int64_t n, DType dtype) override;
  void reduce_scatter(const float* in, float* out, std::int64_t n) override;
  std::unique_ptr<Pending> all_reduce_sum_async(float* data, std::int64_t n) override;
  std::unique_ptr<Pending> all_gather_async(const void* in, void* out, std::int64_t n,
                                            DType dtype) override;
  std::unique_ptr<Pending> reduce_scatter_async(const float* in, float* out,
                                                std::int64_t n) override;
  std::unique_ptr<Pending> all_to_all_async(const float* in, float* out, std::int64_t n) override;
  // Wall time spent blocked in the collectives above (in the blocking ones, and in waits for
  // the started ones): what tensor parallelism costs in communication.
  double seconds() const { return seconds_; }

 private:
  class Started;

  dist::ProcessGroup& group_;
  double seconds_ = 0;
};

// Makes `model` tensor-parallel over `group` (nn::Llama::apply_tensor_parallel); returns the
// adapter the model now communicates through.
std::shared_ptr<ProcessGroupTensorParallel> apply_tensor_parallel(nn::Llama& model,
                                                                  dist::ProcessGroup& group,
                                                                  bool sequence_parallel,
                                                                  bool loss_parallel);

// The whole tensors of slices held across `group` (each rank passes its slices of the same
// parameters, `like` giving their sharding): on rank 0 the full tensors, elsewhere empty.
// Collective over `group`.
nn::StateDict gather_full(const nn::StateDict& slices, const nn::ParameterList& like,
                          dist::ProcessGroup& group);
// This rank's slices of full tensors, as `like` shards them (a copy of each).
nn::StateDict take_slices(const nn::StateDict& full, const nn::ParameterList& like);

}  // namespace weft::parallel
