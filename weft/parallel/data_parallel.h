// The data-parallel wrapper inside a parallelized model (parallelize.h): what differs between
// one process (or tensor parallelism alone), DDP and FSDP/HSDP, behind one interface the step
// protocol, the training state and the reports share. Internal to weft::parallel.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "weft/dist/process_group.h"
#include "weft/nn/llama.h"
#include "weft/nn/optim.h"
#include "weft/parallel/parallelize.h"

namespace weft::parallel {

using Counted = std::function<bool(const nn::Parameter&)>;

// How the gradients are summed over the data-parallel ranks: as the layout computes them
// (DDP's buckets, FSDP's reduce-scatters), or in the canonical tree over the global batch's
// sequences (the layout-invariant mode, nn/leaf_sums.h).
enum class GradientSums { kAsComputed, kCanonicalTree };

class DataParallel {
 public:
  virtual ~DataParallel() = default;
  virtual void init_weights(std::uint64_t seed) = 0;
  virtual void zero_grad() = 0;
  virtual void prepare_sync() = 0;
  virtual void finish_sync() = 0;
  // Over the gradients this rank holds, after finish_sync.
  virtual double grad_sum_squares(const Counted& counted) const = 0;
  virtual void scale_grads(float factor) = 0;
  // The gradients this rank holds after finish_sync, as runs of rows: rows [first_row,
  // first_row + rows) of the parameter's (tensor-parallel slice's) gradient, `cols` floats
  // each, contiguous at `data`. For the layout-invariant norm.
  struct GradientRows {
    const nn::Parameter* param;
    std::int64_t first_row, rows, cols;
    const float* data;
  };
  virtual std::vector<GradientRows> gradient_rows() = 0;
  // Pipeline stages: no reduction starts while held (DistributedDataParallel::hold_reductions);
  // reduce_held launches those held back (zero bubble, after the last W).
  virtual void hold_reductions(bool held) = 0;
  virtual void reduce_held() = 0;
  virtual void step(double lr) = 0;
  // The state whole over the data-parallel dimensions (this rank's tensor-parallel slices):
  // filled where the data coordinates are 0. Collective over the ranks whose replica
  // coordinate is 0.
  virtual std::pair<nn::StateDict, nn::AdamWState> state() = 0;
  // The training state this rank holds, one entry per parameter and kind (value, exp_avg,
  // exp_avg_sq): rows [first_row, first_row + rows) of the parameter (this rank's
  // tensor-parallel slice of it), contiguous at `data`.
  struct Held {
    const nn::Parameter* param;
    const char* kind;  // "model.", "optim.exp_avg.", "optim.exp_avg_sq."
    std::int64_t first_row, rows;
    float* data;
  };
  virtual std::vector<Held> held() = 0;
  virtual void held_loaded(std::int64_t optimizer_steps) = 0;
  virtual std::int64_t optimizer_steps() const = 0;
  virtual void check_replicas_identical() = 0;
  virtual void memory(MemoryReport& report) const = 0;
  virtual void describe(std::vector<std::string>& lines, bool with_peaks) const = 0;
};

// Every data-parallel rank holds the whole (tensor-parallel slice of the) model: one process
// (`group` null or of one rank), or DDP over `group`.
std::unique_ptr<DataParallel> make_replicated(nn::Llama& model, dist::ProcessGroup* group,
                                              const ParallelOptions& options, GradientSums sums);
// FSDP over `shard`, HSDP with `replicate` (null: no replicas).
std::unique_ptr<DataParallel> make_sharded(nn::Llama& model, dist::ProcessGroup& shard,
                                           dist::ProcessGroup* replicate,
                                           const ParallelOptions& options, GradientSums sums);

}  // namespace weft::parallel
