#include "weft/kernels/rmsnorm.h"

#include <cmath>

#include "weft/kernels/parallel.h"

namespace weft::kernels {

template <class T>
void rmsnorm_forward(const T* x, const T* w, T* y, T* rstd, std::int64_t rows, std::int64_t dim,
                     double eps) {
  parallel_for(rows, 64, [&](std::int64_t first, std::int64_t end) {
    for (std::int64_t r = first; r < end; ++r) {
      const T* xr = x + r * dim;
      T* yr = y + r * dim;
      T sum_sq = 0;
      for (std::int64_t j = 0; j < dim; ++j) sum_sq += xr[j] * xr[j];
      const T s = static_cast<T>(1.0 / std::sqrt(static_cast<double>(sum_sq) / static_cast<double>(dim) + eps));
      for (std::int64_t j = 0; j < dim; ++j) yr[j] = xr[j] * s * w[j];
      rstd[r] = s;
    }
  });
}

// With xhat = x * rstd: dxhat = dy * w, dx = rstd * (dxhat - xhat * mean(dxhat * xhat)),
// dw += sum over rows of dy * xhat. Rows are split over the threads for dx, columns for dw
// (each column summed over the rows in order, whatever the thread count).
template <class T>
void rmsnorm_backward(const T* dy, const T* x, const T* w, const T* rstd, T* dx, T* dw,
                      std::int64_t rows, std::int64_t dim) {
  parallel_for(rows, 64, [&](std::int64_t first, std::int64_t end) {
    for (std::int64_t r = first; r < end; ++r) {
      const T* xr = x + r * dim;
      const T* dyr = dy + r * dim;
      T* dxr = dx + r * dim;
      const T s = rstd[r];
      T dot = 0;
      for (std::int64_t j = 0; j < dim; ++j) dot += dyr[j] * w[j] * xr[j] * s;
      const T mean = dot / static_cast<T>(dim);
      for (std::int64_t j = 0; j < dim; ++j) dxr[j] = s * (dyr[j] * w[j] - xr[j] * s * mean);
    }
  });
  parallel_for(dim, 16, [&](std::int64_t first, std::int64_t end) {
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* xr = x + r * dim;
      const T* dyr = dy + r * dim;
      const T s = rstd[r];
      for (std::int64_t j = first; j < end; ++j) dw[j] += dyr[j] * xr[j] * s;
    }
  });
}

template void rmsnorm_forward<float>(const float*, const float*, float*, float*, std::int64_t,
                                     std::int64_t, double);
template void rmsnorm_forward<double>(const double*, const double*, double*, double*,
                                      std::int64_t, std::int64_t, double);
template void rmsnorm_backward<float>(const float*, const float*, const float*, const float*,
                                      float*, float*, std::int64_t, std::int64_t);
template void rmsnorm_backward<double>(const double*, const double*, const double*,
                                       const double*, double*, double*, std::int64_t,
                                       std::int64_t);

}  // namespace weft::kernels
