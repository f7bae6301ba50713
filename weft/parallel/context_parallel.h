// Context parallelism over a process group: nn::ContextParallelGroup's ring shift on
// dist::ProcessGroup's point-to-point operations, and the rows of a batch each
// context-parallel rank holds.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "weft/dist/process_group.h"
#include "weft/nn/context_parallel.h"

namespace weft::parallel {

class ProcessGroupContextParallel : public nn::ContextParallelGroup {
 public:
  // `group` outlives this object.
  explicit ProcessGroupContextParallel(dist::ProcessGroup& group) : group_(group) {}
  int rank() const override { return group_.rank(); }
  int size() const override { return group_.size(); }
  std::unique_ptr<Pending> ring_shift_async(const float* send, float* recv, std::int64_t n,
                                            int tag) override;
  void all_gather(const float* in, float* out, std::int64_t n) override;
  void reduce_scatter(const float* in, float* out, std::int64_t n) override;
  void all_to_all(const float* in, float* out, std::int64_t n) override;
  // Wall time spent waiting for shifts to complete and in the collectives.
  double seconds() const { return seconds_; }

 private:
  class Started;
  dist::ProcessGroup& group_;
  double seconds_ = 0;
};

// The rows of `batch` sequences of `seq` tokens (row-major [batch, seq]) that context-parallel
// rank `rank` of `size` holds, chunks of seq / (2 * size) tokens (InvalidArgument unless that
// divides): chunk `rank` of every sequence, then chunk 2 * size - 1 - rank of every sequence
// (the layout nn/ring_attention.h reads). With `groups` > 1 the batch is that many equal
// groups of sequences (a pipeline's micro-batches), each laid out so on its own after the one
// before. Works for tokens and targets alike.
std::vector<std::int32_t> context_parallel_rows(const std::int32_t* rows, std::int64_t batch,
                                                std::int64_t seq, int rank, int size,
                                                int groups = 1);

}  // namespace weft::parallel
