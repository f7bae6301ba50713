// The step protocol (ParallelModel) over the strategies parallelize() applied: Steps sums as
// the layout computes; the layout-invariant mode's Steps sums every token sum in the
// canonical tree (nn/leaf_sums.h). parallelize() chooses between them, the one place the mode
// is decided. Internal to weft::parallel.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "weft/parallel/parallelize.h"
#include "weft/parallel/strategies.h"

namespace weft::parallel {

class Steps : public ParallelModel {
 public:
  explicit Steps(std::unique_ptr<Strategies> strategies);

  nn::Llama& model() override { return s_->model; }
  int data_rank() const override { return s_->data_rank; }
  int data_size() const override { return s_->data_size(); }
  void init_weights(std::uint64_t seed) override { s_->dp->init_weights(seed); }
  void zero_grad() override { s_->dp->zero_grad(); }
  double forward_backward(const std::int32_t* tokens, const std::int32_t* targets,
                          std::int64_t batch, std::int64_t seq, double loss_scale) override;
  double evaluate(const std::int32_t* tokens, const std::int32_t* targets, std::int64_t batch,
                  std::int64_t seq) override;
  void prepare_sync() override { s_->dp->prepare_sync(); }
  void finish_sync() override;
  double clip_grad_norm(double max_norm) override;
  void step(double lr) override { s_->dp->step(lr); }
  double sum_over_data(double value) override;
  double step_loss(double shares) override { return sum_over_data(shares); }
  TrainingState& state() override { return *state_; }
  const TrainingReport& report() const override { return *report_; }

 protected:
  // Forward and backward of whole sequences, through the pipeline or the whole model.
  double run(const std::int32_t* tokens, const std::int32_t* targets, std::int64_t batch,
             std::int64_t seq, double loss_scale);
  // Scales the gradients so that their norm is at most max_norm (> 0); returns `norm`.
  double clip_to(double norm, double max_norm);
  // Whether this rank's gradients are the first copy of what it holds: not a data-parallel
  // replica's, nor (under DDP, not FSDP, which shards over them) a context-parallel peer's.
  bool first_copy() const;
  Strategies& strategies() { return *s_; }
  const Strategies& strategies() const { return *s_; }

 private:
  double forward_only(const std::int32_t* tokens, const std::int32_t* targets, std::int64_t batch,
                      std::int64_t seq);
  // This context-parallel rank's two chunks of each sequence, laid out per pipeline
  // micro-batch (the runtime cuts the rows into micro-batches).
  struct Chunks {
    std::vector<std::int32_t> tokens, targets;
    std::int64_t seq;  // per sequence: two chunks
  };
  Chunks chunks_of(const std::int32_t* tokens, const std::int32_t* targets, std::int64_t batch,
                   std::int64_t seq) const;

  std::unique_ptr<Strategies> s_;
  std::unique_ptr<TrainingState> state_;
  std::unique_ptr<TrainingReport> report_;
};

// The step protocol of deterministic = "layout"; InvalidArgument for the layouts it does not
// cover yet.
std::unique_ptr<ParallelModel> make_layout_invariant_steps(nn::Llama& model, DeviceMesh* mesh,
                                                           const ParallelOptions& options);

}  // namespace weft::parallel
