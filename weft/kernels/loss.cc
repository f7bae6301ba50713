#include "weft/kernels/loss.h"

#include <cmath>
#include <utility>

#include "weft/base/simd.h"
#include "weft/kernels/internal/check_ids.h"
#include "weft/kernels/internal/fast_exp.h"
#include "weft/kernels/internal/lanes.h"
#include "weft/kernels/parallel.h"

namespace weft::kernels {
namespace {

// max and log(sum(exp(x - max))) of one row.
template <class T>
[[gnu::always_inline]] inline std::pair<T, T> log_sum_exp(const T* x, std::int64_t vocab) {
  const T max = internal::lane_max(x, vocab);
  const T sum =
      internal::lane_sum<T>(vocab, [&](std::int64_t j) { return internal::exp_of(x[j] - max); });
  return {max, std::log(sum)};
}

// The rows of a share, compiled for AVX-512 and AVX2 as well, with log_sum_exp inlined.
template <class T>
WEFT_VECTOR_CLONES void forward_rows(const T* logits, const std::int32_t* targets,
                                     std::int64_t first, std::int64_t end, std::int64_t vocab,
                                     T* losses) {
  for (std::int64_t i = first; i < end; ++i) {
    const T* row = logits + i * vocab;
    const auto [max, lse] = log_sum_exp(row, vocab);
    losses[i] = max + lse - row[targets[i]];
  }
}

template <class T>
WEFT_VECTOR_CLONES void backward_rows(const T* logits, const std::int32_t* targets,
                                      std::int64_t first, std::int64_t end, std::int64_t vocab,
                                      T scale, T* dlogits) {
  for (std::int64_t i = first; i < end; ++i) {
    const T* row = logits + i * vocab;
    T* d = dlogits + i * vocab;
    const auto [max, lse] = log_sum_exp(row, vocab);
    const T shift = max + lse;
    for (std::int64_t j = 0; j < vocab; ++j) d[j] = internal::exp_of(row[j] - shift) * scale;
    d[targets[i]] -= scale;
  }
}

}  // namespace

template <class T>
double cross_entropy_forward(const T* logits, const std::int32_t* targets, std::int64_t n,
                             std::int64_t vocab, T* losses) {
  internal::check_ids(targets, n, vocab, "cross_entropy: target");
  parallel_for(n, 16, [&](std::int64_t first, std::int64_t end) {
    forward_rows(logits, targets, first, end, vocab, losses);
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
    backward_rows(logits, targets, first, end, vocab, scale, dlogits);
  });
}

template double cross_entropy_forward<float>(const float*, const std::int32_t*, std::int64_t,
                                             std::int64_t, float*);
template double cross_entropy_forward<double>(const double*, const std::int32_t*, std::int64_t,
                                              std::int64_t, double*);
template void cross_entropy_backward<float>(const float*, const std::int32_t*, std::int64_t,
                                            std::int64_t, double, float*);
template void cross_entropy_backward<double>(const double*, const std::int32_t*, std::int64_t,
                                             std::int64_t, double, double*);

}  // namespace weft::kernels
