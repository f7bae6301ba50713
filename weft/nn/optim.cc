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

void AdamW::step(double lr) {
  ++steps_;
  const double b1 = options_.beta1, b2 = options_.beta2;
  const double correction1 = 1.0 - std::pow(b1, static_cast<double>(steps_));
  const double correction2 = 1.0 - std::pow(b2, static_cast<double>(steps_));
  // float32 arithmetic in PyTorch's order, so that a run matches torch.optim.AdamW's.
  const float decay = static_cast<float>(1.0 - lr * options_.weight_decay);
  const float step_size = static_cast<float>(lr / correction1);
  const float sqrt_c2 = static_cast<float>(std::sqrt(correction2));
  const float fb1 = static_cast<float>(b1), fb2 = static_cast<float>(b2);
  const float eps = static_cast<float>(options_.eps);
  const auto& params = params_.all();
  for (std::size_t i = 0; i < params.size(); ++i) {
    float* p = params[i]->value.data<float>();
    const float* g = params[i]->grad.data<float>();
    float* m = m_[i].data<float>();
    float* v = v_[i].data<float>();
    const AdamWConstants k{decay, step_size, sqrt_c2, fb1, fb2, eps};
    kernels::parallel_for(params[i]->value.numel(), 1 << 14, [&](std::int64_t first, std::int64_t end) {
      adamw_range(p + first, g + first, m + first, v + first, end - first, k);
    });
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
