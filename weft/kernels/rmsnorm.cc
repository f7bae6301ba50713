#include "weft/kernels/rmsnorm.h"

#include <cmath>

#include "weft/base/simd.h"
#include "weft/kernels/internal/lanes.h"
#include "weft/kernels/parallel.h"

namespace weft::kernels {

namespace {

// The per-row loops of a share of rows (or of columns, for dw), compiled for AVX-512 and AVX2
// as well, their sums in fixed lanes (internal/lanes.h): as single running sums they were
// chains of dependent additions.
template <class T>
WEFT_VECTOR_CLONES void forward_rows(const T* x, const T* w, T* y, T* rstd, std::int64_t first,
                                     std::int64_t end, std::int64_t dim, double eps) {
  for (std::int64_t r = first; r < end; ++r) {
    const T* xr = x + r * dim;
    T* yr = y + r * dim;
    const T sum_sq = internal::lane_sum<T>(dim, [&](std::int64_t j) { return xr[j] * xr[j]; });
    const T s = static_cast<T>(
        1.0 / std::sqrt(static_cast<double>(sum_sq) / static_cast<double>(dim) + eps));
    for (std::int64_t j = 0; j < dim; ++j) yr[j] = xr[j] * s * w[j];
    rstd[r] = s;
  }
}

template <class T>
WEFT_VECTOR_CLONES void backward_rows(const T* dy, const T* x, const T* w, const T* rstd, T* dx,
                                      std::int64_t first, std::int64_t end, std::int64_t dim,
                                      bool accumulate_dx) {
  for (std::int64_t r = first; r < end; ++r) {
    const T* xr = x + r * dim;
    const T* dyr = dy + r * dim;
    T* dxr = dx + r * dim;
    const T s = rstd[r];
    const T dot = internal::lane_sum<T>(dim, [&](std::int64_t j) { return dyr[j] * w[j] * xr[j]; });
    const T mean = dot * s / static_cast<T>(dim);
    for (std::int64_t j = 0; j < dim; ++j) {
      const T g = s * (dyr[j] * w[j] - xr[j] * s * mean);
      dxr[j] = accumulate_dx ? dxr[j] + g : g;
    }
  }
}

template <class T>
WEFT_VECTOR_CLONES void accumulate_dw(const T* dy, const T* x, const T* rstd, T* dw,
                                      std::int64_t rows, std::int64_t dim, std::int64_t first,
                                      std::int64_t end) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * dim;
    const T* dyr = dy + r * dim;
    const T s = rstd[r];
    for (std::int64_t j = first; j < end; ++j) dw[j] += dyr[j] * xr[j] * s;
  }
}

}  // namespace

template <class T>
void rmsnorm_forward(const T* x, const T* w, T* y, T* rstd, std::int64_t rows, std::int64_t dim,
                     double eps) {
  parallel_for(rows, 64, [&](std::int64_t first, std::int64_t end) {
    forward_rows(x, w, y, rstd, first, end, dim, eps);
  });
}

// With xhat = x * rstd: dxhat = dy * w, dx = rstd * (dxhat - xhat * mean(dxhat * xhat)),
// dw += sum over rows of dy * xhat. Rows are split over the threads for dx, columns for dw
// (each column summed over the rows in order, whatever the thread count).
template <class T>
void rmsnorm_backward(const T* dy, const T* x, const T* w, const T* rstd, T* dx, T* dw,
                      std::int64_t rows, std::int64_t dim, bool accumulate_dx) {
  parallel_for(rows, 64, [&](std::int64_t first, std::int64_t end) {
    backward_rows(dy, x, w, rstd, dx, first, end, dim, accumulate_dx);
  });
  parallel_for(dim, 16, [&](std::int64_t first, std::int64_t end) {
    accumulate_dw(dy, x, rstd, dw, rows, dim, first, end);
  });
}

template void rmsnorm_forward<float>(const float*, const float*, float*, float*, std::int64_t,
                                     std::int64_t, double);
template void rmsnorm_forward<double>(const double*, const double*, double*, double*,
                                      std::int64_t, std::int64_t, double);
template void rmsnorm_backward<float>(const float*, const float*, const float*, const float*,
                                      float*, float*, std::int64_t, std::int64_t, bool);
template void rmsnorm_backward<double>(const double*, const double*, const double*, const double*,
                                       double*, double*, std::int64_t, std::int64_t, bool);

}  // namespace weft::kernels
