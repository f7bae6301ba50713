// Tensor parallelism inside the model (Megatron-LM's, Shoeybi et al. 2019): the ranks of a
// tensor-parallel group each hold a slice of every matrix and compute together, exchanging
// activations at the edges of each region. The model does its own communication through
// TensorParallelGroup, which weft::parallel implements over a process group (nn does not
// depend on dist). Layout and costs: docs/PARALLELISM.md.
//
//   attention   wq, wk, wv column-parallel (each rank n_heads / tp query heads and the
//               n_kv_heads / tp key/value heads they share), wo row-parallel
//   feed-forward w1, w3 column-parallel, w2 row-parallel
//   embedding   row-parallel over the vocabulary (each rank vocab / tp rows; a token outside
//               a rank's rows contributes zeros, and the sum over ranks is the lookup)
//   output      column-parallel over the vocabulary: each rank the logits of its vocab / tp
//               words; with loss parallel the cross-entropy is computed on these shards
//               (a max and a sum-exp all-reduce), without it the logits are gathered
//   norms       replicated
//
// Without sequence parallelism the residual stream is replicated: each row-parallel product
// (wo, w2, the embedding) ends in an all-reduce of its partial sums in forward, and each
// column-parallel one (wq|wk|wv, w1|w3, the output) in an all-reduce of its input gradient in
// backward. With sequence parallelism each rank holds rows / tp rows of the residual stream
// (rows of the flattened [batch * seq] tokens): all-gather before a column-parallel region,
// reduce-scatter after a row-parallel one, and the conjugates in backward; the norms then see
// a slice of the rows, so their weight gradients are summed across the group.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>

#include "weft/nn/leaf_sums.h"
#include "weft/tensor/tensor.h"

namespace weft::nn {

class TensorParallelGroup {
 public:
  virtual ~TensorParallelGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // In place, every rank gets the same result.
  virtual void all_reduce_sum(float* data, std::int64_t n) = 0;
  virtual void all_reduce_max(float* data, std::int64_t n) = 0;
  // out[size() * n]: rank r's in[n] at out[r * n], n elements of `dtype` (float32, or bfloat16
  // activations in mixed precision).
  virtual void all_gather(const void* in, void* out, std::int64_t n, DType dtype) = 0;
  // out[n] = the sum over ranks of their in[rank() * n, + n).
  virtual void reduce_scatter(const float* in, float* out, std::int64_t n) = 0;

  // The same, started: the buffers stay untouched until wait() returns. Operations run in
  // the order they were started (blocking ones too).
  class Pending {
   public:
    virtual ~Pending() = default;
    virtual void wait() = 0;
  };
  virtual std::unique_ptr<Pending> all_reduce_sum_async(float* data, std::int64_t n) = 0;
  virtual std::unique_ptr<Pending> all_gather_async(const void* in, void* out, std::int64_t n,
                                                    DType dtype) = 0;
  virtual std::unique_ptr<Pending> reduce_scatter_async(const float* in, float* out,
                                                        std::int64_t n) = 0;
  // out[size() * n]: rank r's in[rank() * n, + n) at out[r * n].
  virtual std::unique_ptr<Pending> all_to_all_async(const float* in, float* out,
                                                    std::int64_t n) = 0;
};

struct TensorParallel {
  std::shared_ptr<TensorParallelGroup> group;  // null: no tensor parallelism
  bool sequence_parallel = true;
  bool loss_parallel = true;

  int size() const { return group ? group->size() : 1; }
  int rank() const { return group ? group->rank() : 0; }
  bool enabled() const { return size() > 1; }
  bool sequence_sharded() const { return enabled() && sequence_parallel; }
};

// What the layers of one model share under tensor parallelism: the plan, and the buffers for
// activations at the edges of the parallel regions (one set for the model, reused by every
// layer: a few activations' worth of memory, not a few per layer).
class TensorParallelContext {
 public:
  explicit TensorParallelContext(TensorParallel tp) : tp_(std::move(tp)) {}
  const TensorParallel& plan() const { return tp_; }
  bool enabled() const { return tp_.enabled(); }
  // Rows of the residual stream this rank holds: rows / size() when sequence-sharded (which
  // must divide: InvalidArgument otherwise), else all of them.
  std::int64_t local_rows(std::int64_t rows) const;
  // x [local_rows, dim] as the whole [rows, dim]: x itself unless sequence-sharded, else all
  // ranks' rows gathered into buffer `slot` (0 or 1; valid until the next gather there).
  // T: float, or BFloat16 (a norm's output in mixed precision: half the bytes).
  template <class T>
  const T* gather(const T* x, std::int64_t rows, std::int64_t dim, int slot);
  // gather() and reduce() (without accumulate) started, finished by wait() (which returns
  // the gathered rows, of gather_async's T; null for a reduction). Overlap: backward starts the
  // gather of a region's input and the reduction of its input gradient, and computes the weight
  // gradient while they travel.
  class Transfer {
   public:
    Transfer(std::unique_ptr<TensorParallelGroup::Pending> pending, const void* result,
             std::function<void()> then)
        : pending_(std::move(pending)), result_(result), then_(std::move(then)) {}
    const void* wait();

   private:
    std::unique_ptr<TensorParallelGroup::Pending> pending_;
    const void* result_ = nullptr;
    std::function<void()> then_;
  };
  template <class T>
  Transfer gather_async(const T* x, std::int64_t rows, std::int64_t dim, int slot);
  Transfer reduce_async(float* partial, std::int64_t rows, std::int64_t dim, float* out);
  // A [rows, dim] buffer for a row-parallel product's partial sums.
  float* partial(std::int64_t rows, std::int64_t dim);
  // Sums `partial` [rows, dim] over the group and writes (or adds, when accumulate) this
  // rank's rows of the sum into out [local_rows, dim]. `partial` is clobbered.
  void reduce(float* partial, std::int64_t rows, std::int64_t dim, float* out, bool accumulate);
  // Layout-invariant tensor parallelism (nn/feature_blocks.h): while trees.blocked(), the
  // partial sums reduce() and reduce_async() add are each rank's subtree of the feature
  // blocks, finished in the canonical tree (all-gathered, or under sequence parallelism each
  // rank's rows all-to-all'd, then combined_subtrees) instead of by the group's all-reduce or
  // reduce-scatter. `trees` outlives this object.
  void sum_canonically(const LeafTrees* trees) { trees_ = trees; }
  // The group's subtrees of n values each, gathered into `gathered` [size(), n], combined in
  // the canonical tree over the feature blocks (in those buffers): the sum.
  const float* combine_subtrees(float* gathered, std::int64_t n) const;
  // all_gather of floats over the group, for RMSNorm::backward_sequence_sharded.
  std::function<void(const float*, float*, std::int64_t)> gather_floats() const;
  // Sums n floats in place over the group (the sequence-sharded norms' weight gradients).
  void all_reduce(float* data, std::int64_t n) { tp_.group->all_reduce_sum(data, n); }
  TensorParallelGroup& group() const { return *tp_.group; }

 private:
  bool canonical() const { return trees_ != nullptr && trees_->blocked() && tp_.enabled(); }
  // Started: every rank's subtree of this rank's elements of the sum of `partial` [rows, dim]
  // (its rows when sequence-sharded) into *all, [size()][those elements].
  std::unique_ptr<TensorParallelGroup::Pending> exchange_subtrees(float* partial, std::int64_t rows,
                                                                  std::int64_t dim, float** all);

  TensorParallel tp_;
  const LeafTrees* trees_ = nullptr;
  Tensor gathered_[2], partial_, reduced_, gathered_partials_;
};

}  // namespace weft::nn
