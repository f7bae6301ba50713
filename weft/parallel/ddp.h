// DistributedDataParallel: every rank holds the whole model and trains on its own slice of
// each global batch; gradients are summed across the data-parallel group in buckets (25 MB by
// default), each bucket's all-reduce launched asynchronously as soon as backward has made its
// gradients final, so communication overlaps the rest of backward. The step waits for all
// buckets only before the optimizer (finish_sync). Micro-batches of gradient accumulation
// other than the last skip the reduction (backward without prepare_sync).
//
// The gradients are summed, not averaged: ranks scale their loss by 1 / (their share of the
// global batch), so the sum is the gradient of the global mean loss (docs/PARALLELISM.md).
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "weft/dist/process_group.h"
#include "weft/nn/llama.h"
#include "weft/parallel/checks.h"

namespace weft::parallel {

class DistributedDataParallel {
 public:
  // Installs the model's after_backward hook. In debug mode (WEFT_DIST_DEBUG=detail) checks that
  // the parameters are identical on every rank.
  // reduce_dtype: the buckets' dtype in the all-reduce, kFloat32 or kBFloat16
  // (ParallelOptions::reduce_dtype).
  DistributedDataParallel(nn::Llama& model, dist::ProcessGroup& group,
                          std::size_t bucket_bytes = std::size_t{25} << 20,
                          DType reduce_dtype = DType::kFloat32);
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  // The next backward reduces its gradients (call before the last micro-batch's backward).
  void prepare_sync();
  // While held, backward launches no reduction. A pipeline stage runs one backward per
  // micro-batch inside one step; its units' gradients are final only after its last one,
  // and the runtime holds the reductions during the others.
  void hold_reductions(bool held) { held_ = held; }
  // Launches every bucket not launched yet (after prepare_sync): zero bubble's weight
  // gradients are final only after the step's last W, long after the hooks have fired.
  void reduce_held();
  // Waits for every bucket launched by that backward and writes the sums into the grads.
  void finish_sync();
  // Throws weft::Error unless every rank holds bitwise the same parameters.
  void check_parameters_identical() {
    parallel::check_parameters_identical(model_.parameters(), group_);
  }
  std::size_t buckets() const { return buckets_.size(); }

 private:
  struct Bucket;
  void on_grads_ready(int unit);
  void launch(Bucket& bucket);

  nn::Llama& model_;
  dist::ProcessGroup& group_;
  DType reduce_dtype_;
  std::vector<std::unique_ptr<Bucket>> buckets_;
  int hooks_ = -1;
  bool syncing_ = false, held_ = false;
};

}  // namespace weft::parallel
