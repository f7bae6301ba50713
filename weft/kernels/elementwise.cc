// One source for every vector target (Highway's foreach_target re-includes it per target).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "weft/kernels/elementwise.cc"
#include "weft/kernels/elementwise.h"

#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "weft/base/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace weft::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// One block's sum of squares in double, in fixed lanes (weft/base/simd-inl.h).
template <class T>
double block_sum_squares(const T* x, std::int64_t n) {
  return simd::HWY_NAMESPACE::LaneSum<double>(n, [&](auto d, std::int64_t i) {
    if constexpr (sizeof(T) == sizeof(double)) {
      const auto v = hn::LoadU(d, x + i);
      return hn::Mul(v, v);
    } else {
      const auto v = hn::PromoteTo(d, hn::LoadU(hn::Rebind<T, decltype(d)>(), x + i));
      return hn::Mul(v, v);
    }
  });
}

double BlockSumSquaresF32(const float* x, std::int64_t n) { return block_sum_squares(x, n); }
double BlockSumSquaresF64(const double* x, std::int64_t n) { return block_sum_squares(x, n); }

void AddRowsF32(float* y, std::int64_t y_stride, const float* x, std::int64_t x_stride,
                std::int64_t rows, std::int64_t cols) {
  const hn::ScalableTag<float> d;
  const auto w = static_cast<std::int64_t>(hn::Lanes(d));
  for (std::int64_t r = 0; r < rows; ++r) {
    float* to = y + r * y_stride;
    const float* from = x + r * x_stride;
    std::int64_t c = 0;
    for (; c + w <= cols; c += w)
      hn::StoreU(hn::Add(hn::LoadU(d, to + c), hn::LoadU(d, from + c)), d, to + c);
    for (; c < cols; ++c) to[c] += from[c];
  }
}

}  // namespace weft::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <algorithm>
#include <vector>

#include "weft/base/simd.h"
#include "weft/kernels/parallel.h"

namespace weft::kernels {

HWY_EXPORT(BlockSumSquaresF32);
HWY_EXPORT(BlockSumSquaresF64);
HWY_EXPORT(AddRowsF32);

template <class T>
void scale(T* y, T factor, std::int64_t n) {
  parallel_for(n, 1 << 15, [&](std::int64_t first, std::int64_t end) {
    for (std::int64_t i = first; i < end; ++i) y[i] *= factor;
  });
}

void add_rows(float* y, std::int64_t y_stride, const float* x, std::int64_t x_stride,
              std::int64_t rows, std::int64_t cols) {
  const std::int64_t grain =
      std::max<std::int64_t>(1, (std::int64_t{1} << 15) / std::max<std::int64_t>(cols, 1));
  parallel_for(rows, grain, [&](std::int64_t first, std::int64_t end) {
    HWY_DYNAMIC_DISPATCH(AddRowsF32)
    (y + first * y_stride, y_stride, x + first * x_stride, x_stride, end - first, cols);
  });
}

namespace {

// Sums of squares go block by block, each block in fixed lanes: the adds pipeline and
// vectorise instead of waiting on one another (a single running sum chains llama_512's 27 M
// additions at ~4 cycles each: ~30 ms per step, estimated), and the blocks are fixed, so the
// result does not depend on how many threads share them.
constexpr std::int64_t kSquaresBlock = 4096;

template <class T>
double block_sum_squares(const T* x, std::int64_t n) {
  return WEFT_DISPATCH_BY_TYPE(T, BlockSumSquares, x, n);
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
      sums[static_cast<std::size_t>(b)] =
          block_sum_squares(x + at, std::min(kSquaresBlock, n - at));
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
#endif  // HWY_ONCE
