// One source for every vector target (Highway's foreach_target re-includes it per target).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "weft/kernels/rmsnorm.cc"
#include "weft/kernels/rmsnorm.h"

#include <cmath>

#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "weft/base/simd-inl.h"
#include "weft/kernels/internal/bf16-inl.h"

HWY_BEFORE_NAMESPACE();
namespace weft::kernels::HWY_NAMESPACE {
namespace {

namespace hn = hwy::HWY_NAMESPACE;
using simd::HWY_NAMESPACE::ForVectors;
using simd::HWY_NAMESPACE::LaneSum;

// The per-row loops of a share of rows (or of columns, for dw), their sums in fixed lanes
// (weft/base/simd-inl.h): as single running sums they were chains of dependent additions.
// Y: T, or bfloat16's bits (mixed precision, T float).
template <class T, class Y>
void forward_rows(const T* x, const T* w, Y* y, T* rstd, std::int64_t first, std::int64_t end,
                  std::int64_t dim, double eps) {
  for (std::int64_t r = first; r < end; ++r) {
    const T* xr = x + r * dim;
    Y* yr = y + r * dim;
    const T sum_sq = LaneSum<T>(dim, [&](auto d, std::int64_t j) {
      const auto v = hn::LoadU(d, xr + j);
      return hn::Mul(v, v);
    });
    const T s = static_cast<T>(
        1.0 / std::sqrt(static_cast<double>(sum_sq) / static_cast<double>(dim) + eps));
    ForVectors<T>(dim, [&](auto d, std::int64_t j) {
      StoreAs(d, hn::Mul(hn::Mul(hn::LoadU(d, xr + j), hn::Set(d, s)), hn::LoadU(d, w + j)),
              yr + j);
    });
    rstd[r] = s;
  }
}

template <class T>
void backward_rows(const T* dy, const T* x, const T* w, const T* rstd, T* dx, std::int64_t first,
                   std::int64_t end, std::int64_t dim, bool accumulate_dx) {
  for (std::int64_t r = first; r < end; ++r) {
    const T* xr = x + r * dim;
    const T* dyr = dy + r * dim;
    T* dxr = dx + r * dim;
    const T s = rstd[r];
    const T dot = LaneSum<T>(dim, [&](auto d, std::int64_t j) {
      return hn::Mul(hn::Mul(hn::LoadU(d, dyr + j), hn::LoadU(d, w + j)), hn::LoadU(d, xr + j));
    });
    const T mean = dot * s / static_cast<T>(dim);
    ForVectors<T>(dim, [&](auto d, std::int64_t j) {
      const auto sv = hn::Set(d, s);
      const auto dxhat = hn::Mul(hn::LoadU(d, dyr + j), hn::LoadU(d, w + j));
      const auto xhat_mean = hn::Mul(hn::Mul(hn::LoadU(d, xr + j), sv), hn::Set(d, mean));
      const auto g = hn::Mul(sv, hn::Sub(dxhat, xhat_mean));
      hn::StoreU(accumulate_dx ? hn::Add(hn::LoadU(d, dxr + j), g) : g, d, dxr + j);
    });
  }
}

template <class T>
void accumulate_dw(const T* dy, const T* x, const T* rstd, T* dw, std::int64_t rows,
                   std::int64_t dim, std::int64_t first, std::int64_t end) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * dim;
    const T* dyr = dy + r * dim;
    const T s = rstd[r];
    ForVectors<T>(end - first, [&](auto d, std::int64_t i) {
      const std::int64_t j = first + i;
      const auto g = hn::Mul(hn::Mul(hn::LoadU(d, dyr + j), hn::LoadU(d, xr + j)), hn::Set(d, s));
      hn::StoreU(hn::Add(hn::LoadU(d, dw + j), g), d, dw + j);
    });
  }
}

}  // namespace

#define WEFT_RMSNORM(T, S)                                                                         \
  void ForwardRows##S(const T* x, const T* w, T* y, T* rstd, std::int64_t first, std::int64_t end, \
                      std::int64_t dim, double eps) {                                              \
    forward_rows(x, w, y, rstd, first, end, dim, eps);                                             \
  }                                                                                                \
  void BackwardRows##S(const T* dy, const T* x, const T* w, const T* rstd, T* dx,                  \
                       std::int64_t first, std::int64_t end, std::int64_t dim,                     \
                       bool accumulate_dx) {                                                       \
    backward_rows(dy, x, w, rstd, dx, first, end, dim, accumulate_dx);                             \
  }                                                                                                \
  void AccumulateDw##S(const T* dy, const T* x, const T* rstd, T* dw, std::int64_t rows,           \
                       std::int64_t dim, std::int64_t first, std::int64_t end) {                   \
    accumulate_dw(dy, x, rstd, dw, rows, dim, first, end);                                         \
  }
WEFT_RMSNORM(float, F32)
WEFT_RMSNORM(double, F64)
#undef WEFT_RMSNORM

void ForwardRowsBF16(const float* x, const float* w, std::uint16_t* y, float* rstd,
                     std::int64_t first, std::int64_t end, std::int64_t dim, double eps) {
  forward_rows(x, w, y, rstd, first, end, dim, eps);
}

}  // namespace weft::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "weft/base/simd.h"
#include "weft/kernels/parallel.h"

namespace weft::kernels {

HWY_EXPORT(ForwardRowsF32);
HWY_EXPORT(ForwardRowsF64);
HWY_EXPORT(BackwardRowsF32);
HWY_EXPORT(BackwardRowsF64);
HWY_EXPORT(AccumulateDwF32);
HWY_EXPORT(AccumulateDwF64);
HWY_EXPORT(ForwardRowsBF16);

template <class T>
void rmsnorm_forward(const T* x, const T* w, T* y, T* rstd, std::int64_t rows, std::int64_t dim,
                     double eps) {
  parallel_for(rows, 64, [&](std::int64_t first, std::int64_t end) {
    WEFT_DISPATCH_BY_TYPE(T, ForwardRows, x, w, y, rstd, first, end, dim, eps);
  });
}

void rmsnorm_forward(const float* x, const float* w, BFloat16* y, float* rstd, std::int64_t rows,
                     std::int64_t dim, double eps) {
  auto* y16 = reinterpret_cast<std::uint16_t*>(y);
  parallel_for(rows, 64, [&](std::int64_t first, std::int64_t end) {
    HWY_DYNAMIC_DISPATCH(ForwardRowsBF16)(x, w, y16, rstd, first, end, dim, eps);
  });
}

// With xhat = x * rstd: dxhat = dy * w, dx = rstd * (dxhat - xhat * mean(dxhat * xhat)),
// dw += sum over rows of dy * xhat. Rows are split over the threads for dx, columns for dw
// (each column summed over the rows in order, whatever the thread count).
template <class T>
void rmsnorm_backward(const T* dy, const T* x, const T* w, const T* rstd, T* dx, T* dw,
                      std::int64_t rows, std::int64_t dim, bool accumulate_dx) {
  parallel_for(rows, 64, [&](std::int64_t first, std::int64_t end) {
    WEFT_DISPATCH_BY_TYPE(T, BackwardRows, dy, x, w, rstd, dx, first, end, dim, accumulate_dx);
  });
  parallel_for(dim, 16, [&](std::int64_t first, std::int64_t end) {
    WEFT_DISPATCH_BY_TYPE(T, AccumulateDw, dy, x, rstd, dw, rows, dim, first, end);
  });
}

template void rmsnorm_forward<float>(const float*, const float*, float*, float*, std::int64_t,
                                     std::int64_t, double);
template void rmsnorm_forward<double>(const double*, const double*, double*, double*, std::int64_t,
                                      std::int64_t, double);
template void rmsnorm_backward<float>(const float*, const float*, const float*, const float*,
                                      float*, float*, std::int64_t, std::int64_t, bool);
template void rmsnorm_backward<double>(const double*, const double*, const double*, const double*,
                                       double*, double*, std::int64_t, std::int64_t, bool);

}  // namespace weft::kernels
#endif  // HWY_ONCE
