#include "weft/kernels/loss.h"

#include <algorithm>
#include <cmath>

#include "weft/kernels/internal/check_ids.h"
#include "weft/kernels/internal/fast_exp.h"
#include "weft/kernels/parallel.h"

namespace weft::kernels {
namespace {

// max and log(sum(exp(x - max))) of one row.
template <class T>
std::pair<T, T> log_sum_exp(const T* x, std::int64_t vocab) {
  const T max = *std::max_element(x, x + vocab);
  T sum = 0;
  for (std::int64_t j = 0; j < vocab; ++j) sum += internal::exp_of(x[j] - max);
  return {max, std::log(sum)};
}

}  // namespace

template <class T>
double cross_entropy_forward(const T* logits, const std::int32_t* targets, std::int64_t n,
                             std::int64_t vocab, T* losses) {
  internal::check_ids(targets, n, vocab, "cross_entropy: target");
  parallel_for(n, 16, [&](std::int64_t first, std::int64_t end) {
    for (std::int64_t i = first; i < end; ++i) {
      const T* row = logits + i * vocab;
      const auto [max, lse] = log_sum_exp(row, vocab);
      losses[i] = max + lse - row[targets[i]];
    }
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
    for (std::int64_t i = first; i < end; ++i) {
      const T* row = logits + i * vocab;
      T* d = dlogits + i * vocab;
      const auto [max, lse] = log_sum_exp(row, vocab);
      const T shift = max + lse;
      for (std::int64_t j = 0; j < vocab; ++j) d[j] = internal::exp_of(row[j] - shift) * scale;
      d[targets[i]] -= scale;
    }
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
