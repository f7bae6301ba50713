// AdamW (decoupled weight decay, PyTorch's formulation), gradient clipping by global norm and
// the learning-rate schedule (linear warm-up, then cosine, linear or constant decay).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "weft/nn/parameter.h"

namespace weft::nn {

struct AdamWOptions {
  double lr = 8e-4;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
};

// AdamW's state as checkpoints hold it: the two moments by parameter name, full-size, in the
// model's parameter order, and the number of steps taken (for the bias corrections).
struct AdamWState {
  StateDict exp_avg, exp_avg_sq;
  std::int64_t steps = 0;
};

class AdamW {
 public:
  AdamW(ParameterList& params, AdamWOptions options);
  // One update of every parameter from its grad, at learning rate `lr`:
  //   p -= lr * wd * p;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
  //   p -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
  void step(double lr);
  std::int64_t steps() const { return steps_; }
  const AdamWOptions& options() const { return options_; }
  // The state; the moments are views, so loading into them restores the optimizer (with
  // set_steps).
  AdamWState state() const;
  void set_steps(std::int64_t steps) { steps_ = steps; }

 private:
  ParameterList& params_;
  AdamWOptions options_;
  std::vector<Tensor> m_, v_;
  std::int64_t steps_ = 0;
};

// One AdamW update of n elements (as AdamW::step does for each parameter), its `step`-th
// (1-based, for the bias corrections): for optimizers that hold only a slice of the state.
void adamw_update(float* p, const float* g, float* m, float* v, std::int64_t n,
                  const AdamWOptions& options, double lr, std::int64_t step);

// Scales every grad so that their global L2 norm is at most max_norm (no change when it is
// already); returns the norm before clipping. The norm is summed in double, in list order.
double clip_grad_norm(ParameterList& params, double max_norm);
// The global L2 norm of the grads (as clip_grad_norm computes it).
double grad_norm(ParameterList& params);

struct LrSchedule {
  double lr = 8e-4;
  std::int64_t warmup_steps = 0;
  std::int64_t total_steps = 1;
  std::string decay_type = "cosine";  // "cosine", "linear" or "constant"
  double min_lr_ratio = 0.0;          // the floor of the decay, as a fraction of lr

  // The learning rate of step `step` (0-based): lr * (step + 1) / warmup_steps during
  // warm-up, then from lr down to lr * min_lr_ratio over the remaining steps.
  double at(std::int64_t step) const;
};

}  // namespace weft::nn
