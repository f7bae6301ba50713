#include "weft/nn/tensor_parallel.h"

#include <string>
#include <type_traits>
#include <vector>

#include "weft/base/error.h"
#include "weft/kernels/parallel.h"
#include "weft/nn/layers.h"

namespace weft::nn {
namespace {

// out (+)= in, over n floats, split between the compute threads.
void copy_or_add(const float* in, float* out, std::int64_t n, bool accumulate) {
  kernels::parallel_for(n, 1 << 14, [&](std::int64_t first, std::int64_t end) {
    if (accumulate) {
      for (std::int64_t i = first; i < end; ++i) out[i] += in[i];
    } else {
      for (std::int64_t i = first; i < end; ++i) out[i] = in[i];
    }
  });
}

}  // namespace

std::int64_t TensorParallelContext::local_rows(std::int64_t rows) const {
  if (!tp_.sequence_sharded()) return rows;
  if (rows % tp_.size() != 0) {
    throw InvalidArgument("sequence parallelism: " + std::to_string(rows) +
                          " tokens per micro-batch (batch x seq) cannot be split evenly over " +
                          std::to_string(tp_.size()) +
                          " tensor-parallel ranks; choose batch_size and seq_len whose product "
                          "divides, or set parallelism.enable_sequence_parallel = false");
  }
  return rows / tp_.size();
}

namespace {

template <class T>
T* ensure_as(Tensor& t, const Shape& shape) {
  if constexpr (std::is_same_v<T, BFloat16>) {
    return ensure_bf16(t, shape);
  } else {
    return ensure(t, shape);
  }
}

}  // namespace

template <class T>
const T* TensorParallelContext::gather(const T* x, std::int64_t rows, std::int64_t dim, int slot) {
  if (!tp_.sequence_sharded()) return x;
  T* full = ensure_as<T>(gathered_[slot], {rows, dim});
  tp_.group->all_gather(x, full, local_rows(rows) * dim, dtype_of<T>());
  return full;
}

const void* TensorParallelContext::Transfer::wait() {
  if (pending_) pending_->wait();
  pending_.reset();
  if (then_) then_();
  then_ = nullptr;
  return result_;
}

template <class T>
TensorParallelContext::Transfer TensorParallelContext::gather_async(const T* x, std::int64_t rows,
                                                                    std::int64_t dim, int slot) {
  if (!tp_.sequence_sharded()) return {nullptr, x, nullptr};
  T* full = ensure_as<T>(gathered_[slot], {rows, dim});
  return {tp_.group->all_gather_async(x, full, local_rows(rows) * dim, dtype_of<T>()), full,
          nullptr};
}

template const float* TensorParallelContext::gather(const float*, std::int64_t, std::int64_t, int);
template const BFloat16* TensorParallelContext::gather(const BFloat16*, std::int64_t, std::int64_t,
                                                       int);
template TensorParallelContext::Transfer TensorParallelContext::gather_async(const float*,
                                                                             std::int64_t,
                                                                             std::int64_t, int);
template TensorParallelContext::Transfer TensorParallelContext::gather_async(const BFloat16*,
                                                                             std::int64_t,
                                                                             std::int64_t, int);

const float* TensorParallelContext::combine_subtrees(float* gathered, std::int64_t n) const {
  const int ranks = tp_.size();
  const std::int64_t each = trees_->feature_blocks() / ranks;  // blocks a rank's subtree covers
  std::vector<LeafBlock> blocks;
  std::vector<float*> values;
  for (int r = 0; r < ranks; ++r) {
    blocks.push_back({r * each, each});
    values.push_back(gathered + r * n);
  }
  return combine_blocks(blocks, values, n);
}

std::function<void(const float*, float*, std::int64_t)> TensorParallelContext::gather_floats()
    const {
  return [group = tp_.group](const float* mine, float* all, std::int64_t n) {
    group->all_gather(mine, all, n, DType::kFloat32);
  };
}

// The canonical reductions all-gather each rank's subtree and finish the tree; under sequence
// parallelism each rank needs only its rows of the sum, so an all-to-all brings it every
// rank's subtree of those rows alone (a reduce-scatter's bytes, not an all-gather's).
std::unique_ptr<TensorParallelGroup::Pending> TensorParallelContext::exchange_subtrees(
    float* partial, std::int64_t rows, std::int64_t dim, float** all) {
  const std::int64_t local = local_rows(rows) * dim;
  if (tp_.sequence_sharded()) {
    *all = ensure(gathered_partials_, {tp_.size(), local});
    return tp_.group->all_to_all_async(partial, *all, local);
  }
  *all = ensure(gathered_partials_, {tp_.size(), rows * dim});
  return tp_.group->all_gather_async(partial, *all, rows * dim, DType::kFloat32);
}

TensorParallelContext::Transfer TensorParallelContext::reduce_async(float* partial,
                                                                    std::int64_t rows,
                                                                    std::int64_t dim, float* out) {
  const std::int64_t local = local_rows(rows) * dim;
  if (canonical()) {
    float* all = nullptr;
    auto pending = exchange_subtrees(partial, rows, dim, &all);
    return {std::move(pending), nullptr,
            [=, this] { copy_or_add(combine_subtrees(all, local), out, local, false); }};
  }
  if (tp_.sequence_sharded())
    return {tp_.group->reduce_scatter_async(partial, out, local), nullptr, nullptr};
  return {tp_.group->all_reduce_sum_async(partial, rows * dim), nullptr,
          [=] { copy_or_add(partial, out, local, false); }};
}

float* TensorParallelContext::partial(std::int64_t rows, std::int64_t dim) {
  return ensure(partial_, {rows, dim});
}

void TensorParallelContext::reduce(float* partial, std::int64_t rows, std::int64_t dim, float* out,
                                   bool accumulate) {
  const std::int64_t local = local_rows(rows) * dim;
  if (canonical()) {
    float* all = nullptr;
    exchange_subtrees(partial, rows, dim, &all)->wait();
    copy_or_add(combine_subtrees(all, local), out, local, accumulate);
    return;
  }
  if (!tp_.sequence_sharded()) {
    tp_.group->all_reduce_sum(partial, rows * dim);
    copy_or_add(partial, out, local, accumulate);
    return;
  }
  if (!accumulate) {
    tp_.group->reduce_scatter(partial, out, local);
    return;
  }
  float* sum = ensure(reduced_, {local_rows(rows), dim});
  tp_.group->reduce_scatter(partial, sum, local);
  copy_or_add(sum, out, local, true);
}

}  // namespace weft::nn
