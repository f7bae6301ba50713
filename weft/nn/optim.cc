// One source for every vector target (Highway's foreach_target re-includes it per target).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "weft/nn/optim.cc"
#include "weft/nn/optim.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "weft/base/simd-inl.h"

#ifndef WEFT_NN_ADAMW_CONSTANTS
#define WEFT_NN_ADAMW_CONSTANTS
namespace weft::nn {
namespace {
struct AdamWConstants {
  float decay, step_size, sqrt_c2, b1, b2, eps;
};
}  // namespace
}  // namespace weft::nn
#endif

HWY_BEFORE_NAMESPACE();
namespace weft::nn::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// PyTorch's float32 order of operations, unfused: the same bits on every target.
void AdamWRange(float* p, const float* g, float* m, float* v, std::int64_t n, AdamWConstants k) {
  simd::HWY_NAMESPACE::ForVectors<float>(n, [&](auto d, std::int64_t j) {
    const auto gj = hn::LoadU(d, g + j);
    const auto mj = hn::Add(hn::Mul(hn::LoadU(d, m + j), hn::Set(d, k.b1)),
                            hn::Mul(gj, hn::Set(d, 1.0f - k.b1)));
    const auto vj = hn::Add(hn::Mul(hn::LoadU(d, v + j), hn::Set(d, k.b2)),
                            hn::Mul(hn::Mul(gj, gj), hn::Set(d, 1.0f - k.b2)));
    const auto denom = hn::Add(hn::Div(hn::Sqrt(vj), hn::Set(d, k.sqrt_c2)), hn::Set(d, k.eps));
    const auto pj = hn::Mul(hn::LoadU(d, p + j), hn::Set(d, k.decay));
    hn::StoreU(hn::Sub(pj, hn::Mul(hn::Set(d, k.step_size), hn::Div(mj, denom))), d, p + j);
    hn::StoreU(mj, d, m + j);
    hn::StoreU(vj, d, v + j);
  });
}

}  // namespace weft::nn::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "weft/kernels/elementwise.h"
#include "weft/kernels/parallel.h"

namespace weft::nn {

HWY_EXPORT(AdamWRange);

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
                         static_cast<float>(options.beta1),
                         static_cast<float>(options.beta2),
                         static_cast<float>(options.eps)};
  kernels::parallel_for(n, 1 << 14, [&](std::int64_t first, std::int64_t end) {
    HWY_DYNAMIC_DISPATCH(AdamWRange)(p + first, g + first, m + first, v + first, end - first, k);
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
  for (const auto& p : params.all())
    sum += kernels::sum_squares(p->grad.data<float>(), p->grad.numel());
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
  const double progress = std::clamp(
      static_cast<double>(step - warmup_steps) / static_cast<double>(decay_steps), 0.0, 1.0);
  double factor = 1.0;
  if (decay_type == "cosine") factor = 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
  if (decay_type == "linear") factor = 1.0 - progress;
  return lr * (min_lr_ratio + (1.0 - min_lr_ratio) * factor);
}

}  // namespace weft::nn
#endif  // HWY_ONCE
