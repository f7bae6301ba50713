#include "weft/nn/optim.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "weft/base/simd.h"
#include "weft/kernels/elementwise.h"
#include "weft/kernels/parallel.h"

namespace weft::nn {

namespace {

struct AdamWConstants {
  float decay, step_size, sqrt_c2, b1, b2, eps;
};

WEFT_VECTOR_CLONES void adamw_range(float* __restrict p, const float* __restrict g,
                                    float* __restrict m, float* __restrict v, std::int64_t n,
                                    AdamWConstants k) {
  for (std::int64_t j = 0; j < n; ++j) {
    p[j] *= k.decay;
    m[j] = m[j] * k.b1 + g[j] * (1.0f - k.b1);
    v[j] = v[j] * k.b2 + g[j] * g[j] * (1.0f - k.b2);
    const float denom = std::sqrt(v[j]) / k.sqrt_c2 + k.eps;
    p[j] -= k.step_size * (m[j] / denom);
  }
}

}  // namespace

AdamW::AdamW(ParameterList& params, AdamWOptions options) : params_(params), options_(options) {
  for (const auto& p : params_.all()) {
    m_.push_back(Tensor::zeros(p->value.shape()));
    v_.push_back(Tensor::zeros(p->value.shape()));
  }
}

AdamWState AdamW::state() const {
  AdamWState state{{}, {}, steps_};
  const auto& params = params_.all();
  for (std::size_t i = 0; i < params.size(); ++i) {
    state.exp_avg.emplace_back(params[i]->name, m_[i]);
    state.exp_avg_sq.emplace_back(params[i]->name, v_[i]);
  }
  return state;
}

void adamw_update(float* p, const float* g, float* m, float* v, std::int64_t n,
                  const AdamWOptions& options, double lr, std::int64_t step) {
  const double correction1 = 1.0 - std::pow(options.beta1, static_cast<double>(step));
  const double correction2 = 1.0 - std::pow(options.beta2, static_cast<double>(step));
  // float32 arithmetic in PyTorch's order, so that a run matches torch.optim.AdamW's.
  const AdamWConstants k{static_cast<float>(1.0 - lr * options.weight_decay),
                         static_cast<float>(lr / correction1),
                         static_cast<float>(std::sqrt(correction2)),
                         static_cast<float>(options.beta1), static_cast<float>(options.beta2),
                         static_cast<float>(options.eps)};
  kernels::parallel_for(n, 1 << 14, [&](std::int64_t first, std::int64_t end) {
    adamw_range(p + first, g + first, m + first, v + first, end - first, k);
  });
}

void AdamW::step(double lr) {
  ++steps_;
  const auto& params = params_.all();
  for (std::size_t i = 0; i < params.size(); ++i) {
    adamw_update(params[i]->value.data<float>(), params[i]->grad.data<float>(), m_[i].data<float>(),
                 v_[i].data<float>(), params[i]->value.numel(), options_, lr, steps_);
  }
}

double grad_norm(ParameterList& params) {
  double sum = 0;
  for (const auto& p : params.all()) sum += kernels::sum_squares(p->grad.data<float>(), p->grad.numel());
  return std::sqrt(sum);
}

double clip_grad_norm(ParameterList& params, double max_norm) {
  const double norm = grad_norm(params);
  const double factor = max_norm / (norm + 1e-6);
  if (factor < 1.0) {
    for (const auto& p : params.all()) {
      kernels::scale(p->grad.data<float>(), static_cast<float>(factor), p->grad.numel());
    }
  }
  return norm;
}

double LrSchedule::at(std::int64_t step) const {
  if (step < warmup_steps) {
    return lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  }
  const std::int64_t decay_steps = std::max<std::int64_t>(1, total_steps - warmup_steps);
  const double progress =
      std::clamp(static_cast<double>(step - warmup_steps) / static_cast<double>(decay_steps), 0.0, 1.0);
  double factor = 1.0;
  if (decay_type == "cosine") factor = 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
  if (decay_type == "linear") factor = 1.0 - progress;
  return lr * (min_lr_ratio + (1.0 - min_lr_ratio) * factor);
}

}  // namespace weft::nn
