#include "weft/kernels/elementwise.h"

#include <algorithm>
#include <vector>

#include "weft/base/simd.h"
#include "weft/kernels/internal/lanes.h"
#include "weft/kernels/parallel.h"

namespace weft::kernels {

template <class T>
void scale(T* y, T factor, std::int64_t n) {
  parallel_for(n, 1 << 15, [&](std::int64_t first, std::int64_t end) {
    for (std::int64_t i = first; i < end; ++i) y[i] *= factor;
  });
}

namespace {

// Sums of squares go block by block, each block in fixed lanes (internal/lanes.h): the adds
// pipeline and vectorise instead of waiting on one another (a single running sum chains
// llama_512's 27 M additions at ~4 cycles each: ~30 ms per step, estimated), and the blocks
// are fixed, so the result does not depend on how many threads share them.
constexpr std::int64_t kSquaresBlock = 4096;

template <class T>
WEFT_VECTOR_CLONES double block_sum_squares(const T* __restrict x, std::int64_t n) {
  return internal::lane_sum<double>(
      n, [&](std::int64_t i) { return static_cast<double>(x[i]) * static_cast<double>(x[i]); });
}

}  // namespace

template <class T>
double sum_squares(const T* x, std::int64_t n) {
  const std::int64_t blocks = (n + kSquaresBlock - 1) / kSquaresBlock;
  if (blocks <= 1) return block_sum_squares(x, n);
  std::vector<double> sums(static_cast<std::size_t>(blocks));
  parallel_for(blocks, 16, [&](std::int64_t first, std::int64_t end) {
    for (std::int64_t b = first; b < end; ++b) {
      const std::int64_t at = b * kSquaresBlock;
      sums[static_cast<std::size_t>(b)] = block_sum_squares(x + at, std::min(kSquaresBlock, n - at));
    }
  });
  double total = 0;
  for (double v : sums) total += v;
  return total;
}

template void scale<float>(float*, float, std::int64_t);
template void scale<double>(double*, double, std::int64_t);
template double sum_squares<float>(const float*, std::int64_t);
template double sum_squares<double>(const double*, std::int64_t);

}  // namespace weft::kernels
