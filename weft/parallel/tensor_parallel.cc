#include "weft/parallel/tensor_parallel.h"

#include <memory>

#include "weft/base/error.h"
#include "weft/parallel/timed.h"

namespace weft::parallel {
namespace {

dist::Buffer floats(const float* data, std::int64_t n) {
  return dist::Buffer(const_cast<float*>(data), static_cast<std::size_t>(n), DType::kFloat32);
}

dist::Buffer elements(const void* data, std::int64_t n, DType dtype) {
  return dist::Buffer(const_cast<void*>(data), static_cast<std::size_t>(n), dtype);
}

}  // namespace

void ProcessGroupTensorParallel::all_reduce_sum(float* data, std::int64_t n) {
  add_seconds(seconds_, [&] { group_.all_reduce(floats(data, n), dist::ReduceOp::kSum); });
}

void ProcessGroupTensorParallel::all_reduce_max(float* data, std::int64_t n) {
  add_seconds(seconds_, [&] { group_.all_reduce(floats(data, n), dist::ReduceOp::kMax); });
}

void ProcessGroupTensorParallel::all_gather(const void* in, void* out, std::int64_t n,
                                            DType dtype) {
  add_seconds(seconds_, [&] {
    group_.all_gather(elements(out, n * group_.size(), dtype), elements(in, n, dtype));
  });
}

void ProcessGroupTensorParallel::reduce_scatter(const float* in, float* out, std::int64_t n) {
  add_seconds(seconds_, [&] {
    group_.reduce_scatter(floats(out, n), floats(in, n * group_.size()), dist::ReduceOp::kSum);
  });
}

class ProcessGroupTensorParallel::Started : public nn::TensorParallelGroup::Pending {
 public:
  Started(ProcessGroupTensorParallel& owner, std::shared_ptr<dist::Work> work)
      : owner_(owner), work_(std::move(work)) {}
  // The buffers must outlive the operation: a Pending dropped unwaited still waits.
  ~Started() override {
    try {
      if (work_) work_->wait();
    } catch (const std::exception&) {
      // The group reported it to whoever waited; a destructor cannot.
    }
  }
  void wait() override {
    add_seconds(owner_.seconds_, [&] { work_->wait(); });
    work_.reset();
  }

 private:
  ProcessGroupTensorParallel& owner_;
  std::shared_ptr<dist::Work> work_;
};

std::unique_ptr<nn::TensorParallelGroup::Pending> ProcessGroupTensorParallel::all_reduce_sum_async(
    float* data, std::int64_t n) {
  return std::make_unique<Started>(*this,
                                   group_.all_reduce_async(floats(data, n), dist::ReduceOp::kSum));
}

std::unique_ptr<nn::TensorParallelGroup::Pending> ProcessGroupTensorParallel::all_gather_async(
    const void* in, void* out, std::int64_t n, DType dtype) {
  return std::make_unique<Started>(
      *this,
      group_.all_gather_async(elements(out, n * group_.size(), dtype), elements(in, n, dtype)));
}

std::unique_ptr<nn::TensorParallelGroup::Pending> ProcessGroupTensorParallel::reduce_scatter_async(
    const float* in, float* out, std::int64_t n) {
  return std::make_unique<Started>(
      *this, group_.reduce_scatter_async(floats(out, n), floats(in, n * group_.size()),
                                         dist::ReduceOp::kSum));
}

std::unique_ptr<nn::TensorParallelGroup::Pending> ProcessGroupTensorParallel::all_to_all_async(
    const float* in, float* out, std::int64_t n) {
  const std::int64_t all = n * group_.size();
  return std::make_unique<Started>(*this,
                                   group_.all_to_all_async(floats(out, all), floats(in, all)));
}

std::shared_ptr<ProcessGroupTensorParallel> apply_tensor_parallel(nn::Llama& model,
                                                                  dist::ProcessGroup& group,
                                                                  bool sequence_parallel,
                                                                  bool loss_parallel) {
  auto adapter = std::make_shared<ProcessGroupTensorParallel>(group);
  model.apply_tensor_parallel({adapter, sequence_parallel, loss_parallel});
  return adapter;
}

// Each rank's slice travels whole (gather), and rank 0 places slice r at offset r x its size
// along the sharded dimension.
nn::StateDict gather_full(const nn::StateDict& slices, const nn::ParameterList& like,
                          dist::ProcessGroup& group) {
  const bool root = group.rank() == 0;
  nn::StateDict full;
  for (const auto& [name, slice] : slices) {
    const nn::Parameter& p = like.at(name);
    if (!p.sharded()) {
      if (root) full.emplace_back(name, slice.clone());
      continue;
    }
    const Tensor local = slice.contiguous();
    Tensor all = root ? Tensor::zeros({group.size(), local.numel()}) : Tensor();
    group.gather(root ? floats(all.data<float>(), all.numel()) : dist::Buffer(),
                 floats(local.data<float>(), local.numel()), 0);
    if (!root) continue;
    Tensor whole = Tensor::zeros(p.full_shape);
    const std::int64_t size = local.size(p.sharding.dim);
    for (int r = 0; r < group.size(); ++r) {
      whole.narrow(p.sharding.dim, r * size, size)
          .copy_from(all.narrow(0, r, 1).view(local.shape()));
    }
    full.emplace_back(name, whole);
  }
  return full;
}

nn::StateDict take_slices(const nn::StateDict& full, const nn::ParameterList& like) {
  nn::StateDict slices;
  for (const auto& [name, whole] : full) {
    const nn::Parameter& p = like.at(name);
    if (whole.shape() != p.full_shape) {
      throw InvalidArgument("tensor parallelism: " + name + " is " + shape_string(whole.shape()) +
                            ", the model's is " + shape_string(p.full_shape));
    }
    slices.emplace_back(
        name,
        p.sharded()
            ? whole.narrow(p.sharding.dim, p.shard_offset(), p.value.size(p.sharding.dim)).clone()
            : whole);
  }
  return slices;
}

}  // namespace weft::parallel
