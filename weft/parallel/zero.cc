#include "weft/parallel/zero.h"

#include <algorithm>
#include <cstring>

namespace weft::parallel {

ZeroOptimizer::ZeroOptimizer(nn::ParameterList& params, dist::ProcessGroup& group,
                             nn::AdamWOptions options)
    : params_(params), group_(group), options_(options) {
  total_ = params_.numel();
  const std::int64_t n = group_.size();
  shard_ = (total_ + n - 1) / n;
  const std::int64_t first = shard_ * group_.rank(), end = std::min(total_, first + shard_);
  std::int64_t at = 0;  // flat index of the current parameter's first element
  for (const auto& p : params_.all()) {
    const std::int64_t numel = p->value.numel();
    const std::int64_t lo = std::max(first, at), hi = std::min(end, at + numel);
    if (lo < hi) segments_.push_back({p.get(), lo - at, lo - first, hi - lo});
    at += numel;
  }
  m_.assign(static_cast<std::size_t>(shard_), 0.0f);
  v_.assign(static_cast<std::size_t>(shard_), 0.0f);
  mine_.assign(static_cast<std::size_t>(shard_), 0.0f);
  all_.assign(static_cast<std::size_t>(shard_ * n), 0.0f);
}

void ZeroOptimizer::step(double lr) {
  ++steps_;
  for (const Segment& s : segments_) {
    float* p = s.param->value.data<float>() + s.param_offset;
    nn::adamw_update(p, s.param->grad.data<float>() + s.param_offset, m_.data() + s.shard_offset,
                     v_.data() + s.shard_offset, s.count, options_, lr, steps_);
    std::memcpy(mine_.data() + s.shard_offset, p, static_cast<std::size_t>(s.count) * sizeof(float));
  }
  group_.all_gather(all_, mine_);
  // Slices are laid out back to back in flat order: parameter k starts at its flat offset.
  std::int64_t at = 0;
  for (const auto& p : params_.all()) {
    std::memcpy(p->value.data<float>(), all_.data() + at,
                static_cast<std::size_t>(p->value.numel()) * sizeof(float));
    at += p->value.numel();
  }
}

}  // namespace weft::parallel
