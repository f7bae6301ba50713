// One source for every vector target (Highway's foreach_target re-includes it per target).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "weft/kernels/loss.cc"
#include "weft/kernels/loss.h"

#include <cmath>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "weft/base/dtype.h"
#include "weft/base/simd-inl.h"
#include "weft/kernels/internal/bf16-inl.h"
#include "weft/kernels/internal/exp-inl.h"

HWY_BEFORE_NAMESPACE();
namespace weft::kernels::HWY_NAMESPACE {
namespace {

using simd::HWY_NAMESPACE::ForVectors;
using simd::HWY_NAMESPACE::LaneMax;
using simd::HWY_NAMESPACE::LaneSum;

// max and log(sum(exp(x - max))) of one row.
template <class T>
HWY_INLINE std::pair<T, T> log_sum_exp(const T* x, std::int64_t vocab) {
  const T max = LaneMax(x, vocab);
  const T sum = LaneSum<T>(vocab, [&](auto d, std::int64_t j) {
    return FastExp(d, hn::Sub(hn::LoadU(d, x + j), hn::Set(d, max)));
  });
  return {max, std::log(sum)};
}

template <class T>
void forward_rows(const T* logits, const std::int32_t* targets, std::int64_t first,
                  std::int64_t end, std::int64_t vocab, T* losses) {
  for (std::int64_t i = first; i < end; ++i) {
    const T* row = logits + i * vocab;
    const auto [max, lse] = log_sum_exp(row, vocab);
    losses[i] = max + lse - row[targets[i]];
  }
}

// The target's gradient: (softmax - 1) * scale = e * scale - scale. In float it is the stored
// e * scale less scale; rounded to bfloat16 (O = its bits), the unrounded product is computed
// again in one lane (FastExp gives each lane the same bits whatever the vector's width).
template <class T, class O>
HWY_INLINE void subtract_target(const T* row, std::int64_t t, T shift, T scale, O* dr) {
  if constexpr (std::is_same_v<O, std::uint16_t>) {
    const hn::CappedTag<T, 1> d1;
    const auto e = FastExp(d1, hn::Sub(hn::Set(d1, row[t]), hn::Set(d1, shift)));
    dr[t] = BFloat16(hn::GetLane(hn::Mul(e, hn::Set(d1, scale))) - scale).bits;
  } else {
    dr[t] -= scale;
  }
}

// dlogits in T, or in bfloat16 (O = std::uint16_t, its bits) for the output layer's products.
template <class T, class O>
void backward_rows(const T* logits, const std::int32_t* targets, std::int64_t first,
                   std::int64_t end, std::int64_t vocab, T scale, O* dlogits) {
  for (std::int64_t i = first; i < end; ++i) {
    const T* row = logits + i * vocab;
    O* dr = dlogits + i * vocab;
    const auto [max, lse] = log_sum_exp(row, vocab);
    const T shift = max + lse;
    ForVectors<T>(vocab, [&](auto d, std::int64_t j) {
      const auto e = FastExp(d, hn::Sub(hn::LoadU(d, row + j), hn::Set(d, shift)));
      StoreAs(d, hn::Mul(e, hn::Set(d, scale)), dr + j);
    });
    subtract_target(row, targets[i], shift, scale, dr);
  }
}

// Loss parallel: this rank's columns [first, first + shard) of every row.
template <class T>
void shard_max_rows(const T* logits, std::int64_t first_row, std::int64_t end, std::int64_t shard,
                    T* max) {
  for (std::int64_t i = first_row; i < end; ++i) max[i] = LaneMax(logits + i * shard, shard);
}

template <class T>
void shard_sums_rows(const T* logits, const std::int32_t* targets, std::int64_t first_row,
                     std::int64_t end, std::int64_t first, std::int64_t shard, std::int64_t ld,
                     const T* max, T* sum_exp, T* target_logit) {
  for (std::int64_t i = first_row; i < end; ++i) {
    const T* row = logits + i * ld;
    sum_exp[i] = LaneSum<T>(shard, [&](auto d, std::int64_t j) {
      return FastExp(d, hn::Sub(hn::LoadU(d, row + j), hn::Set(d, max[i])));
    });
    const std::int64_t t = targets[i] - first;
    target_logit[i] = t >= 0 && t < shard ? row[t] : T(0);
  }
}

template <class T, class O>
void shard_backward_rows(const T* logits, const std::int32_t* targets, std::int64_t first_row,
                         std::int64_t end, std::int64_t first, std::int64_t shard, const T* shift,
                         T scale, O* dlogits) {
  for (std::int64_t i = first_row; i < end; ++i) {
    const T* row = logits + i * shard;
    O* dr = dlogits + i * shard;
    ForVectors<T>(shard, [&](auto d, std::int64_t j) {
      const auto e = FastExp(d, hn::Sub(hn::LoadU(d, row + j), hn::Set(d, shift[i])));
      StoreAs(d, hn::Mul(e, hn::Set(d, scale)), dr + j);
    });
    const std::int64_t t = targets[i] - first;
    if (t >= 0 && t < shard) subtract_target(row, t, shift[i], scale, dr);
  }
}

}  // namespace

#define WEFT_LOSS(T, S)                                                                            \
  void ForwardRows##S(const T* logits, const std::int32_t* targets, std::int64_t first,            \
                      std::int64_t end, std::int64_t vocab, T* losses) {                           \
    forward_rows(logits, targets, first, end, vocab, losses);                                      \
  }                                                                                                \
  void BackwardRows##S(const T* logits, const std::int32_t* targets, std::int64_t first,           \
                       std::int64_t end, std::int64_t vocab, T scale, T* dlogits) {                \
    backward_rows(logits, targets, first, end, vocab, scale, dlogits);                             \
  }                                                                                                \
  void ShardMaxRows##S(const T* logits, std::int64_t first_row, std::int64_t end,                  \
                       std::int64_t shard, T* max) {                                               \
    shard_max_rows(logits, first_row, end, shard, max);                                            \
  }                                                                                                \
  void ShardSumsRows##S(const T* logits, const std::int32_t* targets, std::int64_t first_row,      \
                        std::int64_t end, std::int64_t first, std::int64_t shard, std::int64_t ld, \
                        const T* max, T* sum_exp, T* target_logit) {                               \
    shard_sums_rows(logits, targets, first_row, end, first, shard, ld, max, sum_exp,               \
                    target_logit);                                                                 \
  }                                                                                                \
  void ShardBackwardRows##S(const T* logits, const std::int32_t* targets, std::int64_t first_row,  \
                            std::int64_t end, std::int64_t first, std::int64_t shard,              \
                            const T* shift, T scale, T* dlogits) {                                 \
    shard_backward_rows(logits, targets, first_row, end, first, shard, shift, scale, dlogits);     \
  }
WEFT_LOSS(float, F32)
WEFT_LOSS(double, F64)
#undef WEFT_LOSS

void BackwardRowsBF16(const float* logits, const std::int32_t* targets, std::int64_t first,
                      std::int64_t end, std::int64_t vocab, float scale, std::uint16_t* dlogits) {
  backward_rows(logits, targets, first, end, vocab, scale, dlogits);
}
void ShardBackwardRowsBF16(const float* logits, const std::int32_t* targets, std::int64_t first_row,
                           std::int64_t end, std::int64_t first, std::int64_t shard,
                           const float* shift, float scale, std::uint16_t* dlogits) {
  shard_backward_rows(logits, targets, first_row, end, first, shard, shift, scale, dlogits);
}

}  // namespace weft::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "weft/base/simd.h"
#include "weft/kernels/internal/check_ids.h"
#include "weft/kernels/parallel.h"

namespace weft::kernels {

HWY_EXPORT(ForwardRowsF32);
HWY_EXPORT(ForwardRowsF64);
HWY_EXPORT(BackwardRowsF32);
HWY_EXPORT(BackwardRowsF64);
HWY_EXPORT(ShardMaxRowsF32);
HWY_EXPORT(ShardMaxRowsF64);
HWY_EXPORT(ShardSumsRowsF32);
HWY_EXPORT(ShardSumsRowsF64);
HWY_EXPORT(ShardBackwardRowsF32);
HWY_EXPORT(ShardBackwardRowsF64);
HWY_EXPORT(BackwardRowsBF16);
HWY_EXPORT(ShardBackwardRowsBF16);

namespace {
std::uint16_t* bits_of(BFloat16* p) { return reinterpret_cast<std::uint16_t*>(p); }
}  // namespace

void cross_entropy_backward(const float* logits, const std::int32_t* targets, std::int64_t n,
                            std::int64_t vocab, double dloss, BFloat16* dlogits) {
  const auto scale = static_cast<float>(dloss);
  internal::check_ids(targets, n, vocab, "cross_entropy: target");
  parallel_for(n, 16, [&](std::int64_t first, std::int64_t end) {
    HWY_DYNAMIC_DISPATCH(BackwardRowsBF16)
    (logits, targets, first, end, vocab, scale, bits_of(dlogits));
  });
}

void cross_entropy_shard_backward(const float* logits, const std::int32_t* targets, std::int64_t n,
                                  std::int64_t vocab, std::int64_t first, std::int64_t shard,
                                  const float* shift, double dloss, BFloat16* dlogits) {
  internal::check_ids(targets, n, vocab, "cross_entropy: target");
  const auto scale = static_cast<float>(dloss);
  parallel_for(n, 16, [&](std::int64_t first_row, std::int64_t end) {
    HWY_DYNAMIC_DISPATCH(ShardBackwardRowsBF16)
    (logits, targets, first_row, end, first, shard, shift, scale, bits_of(dlogits));
  });
}

template <class T>
double cross_entropy_forward(const T* logits, const std::int32_t* targets, std::int64_t n,
                             std::int64_t vocab, T* losses) {
  internal::check_ids(targets, n, vocab, "cross_entropy: target");
  parallel_for(n, 16, [&](std::int64_t first, std::int64_t end) {
    WEFT_DISPATCH_BY_TYPE(T, ForwardRows, logits, targets, first, end, vocab, losses);
  });
  double total = 0;  // in row order, whatever the thread count
  for (std::int64_t i = 0; i < n; ++i) total += static_cast<double>(losses[i]);
  return total;
}

template <class T>
void cross_entropy_backward(const T* logits, const std::int32_t* targets, std::int64_t n,
                            std::int64_t vocab, double dloss, T* dlogits) {
  const T scale = static_cast<T>(dloss);
  internal::check_ids(targets, n, vocab, "cross_entropy: target");
  parallel_for(n, 16, [&](std::int64_t first, std::int64_t end) {
    WEFT_DISPATCH_BY_TYPE(T, BackwardRows, logits, targets, first, end, vocab, scale, dlogits);
  });
}

template <class T>
void cross_entropy_shard_max(const T* logits, std::int64_t n, std::int64_t shard, T* max) {
  parallel_for(n, 16, [&](std::int64_t first_row, std::int64_t end) {
    WEFT_DISPATCH_BY_TYPE(T, ShardMaxRows, logits, first_row, end, shard, max);
  });
}

template <class T>
void cross_entropy_shard_sums(const T* logits, const std::int32_t* targets, std::int64_t n,
                              std::int64_t vocab, std::int64_t first, std::int64_t shard,
                              const T* max, T* sum_exp, T* target_logit, std::int64_t ld) {
  internal::check_ids(targets, n, vocab, "cross_entropy: target");
  parallel_for(n, 16, [&](std::int64_t first_row, std::int64_t end) {
    WEFT_DISPATCH_BY_TYPE(T, ShardSumsRows, logits, targets, first_row, end, first, shard,
                          ld > 0 ? ld : shard, max, sum_exp, target_logit);
  });
}

template <class T>
void cross_entropy_shard_backward(const T* logits, const std::int32_t* targets, std::int64_t n,
                                  std::int64_t vocab, std::int64_t first, std::int64_t shard,
                                  const T* shift, double dloss, T* dlogits) {
  internal::check_ids(targets, n, vocab, "cross_entropy: target");
  const T scale = static_cast<T>(dloss);
  parallel_for(n, 16, [&](std::int64_t first_row, std::int64_t end) {
    WEFT_DISPATCH_BY_TYPE(T, ShardBackwardRows, logits, targets, first_row, end, first, shard,
                          shift, scale, dlogits);
  });
}

#define WEFT_SHARD_LOSS(T)                                                                      \
  template void cross_entropy_shard_max<T>(const T*, std::int64_t, std::int64_t, T*);           \
  template void cross_entropy_shard_sums<T>(const T*, const std::int32_t*, std::int64_t,        \
                                            std::int64_t, std::int64_t, std::int64_t, const T*, \
                                            T*, T*, std::int64_t);                              \
  template void cross_entropy_shard_backward<T>(const T*, const std::int32_t*, std::int64_t,    \
                                                std::int64_t, std::int64_t, std::int64_t,       \
                                                const T*, double, T*);
WEFT_SHARD_LOSS(float)
WEFT_SHARD_LOSS(double)
#undef WEFT_SHARD_LOSS

template double cross_entropy_forward<float>(const float*, const std::int32_t*, std::int64_t,
                                             std::int64_t, float*);
template double cross_entropy_forward<double>(const double*, const std::int32_t*, std::int64_t,
                                              std::int64_t, double*);
template void cross_entropy_backward<float>(const float*, const std::int32_t*, std::int64_t,
                                            std::int64_t, double, float*);
template void cross_entropy_backward<double>(const double*, const std::int32_t*, std::int64_t,
                                             std::int64_t, double, double*);

}  // namespace weft::kernels
#endif  // HWY_ONCE
