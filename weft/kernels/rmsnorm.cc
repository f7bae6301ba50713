#include "weft/kernels/rmsnorm.h"

#include <cmath>

namespace weft::kernels {

template <class T>
void rmsnorm_forward(const T* x, const T* w, T* y, T* rstd, std::int64_t rows, std::int64_t dim,
                     double eps) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * dim;
    T* yr = y + r * dim;
    T sum_sq = 0;
    for (std::int64_t j = 0; j < dim; ++j) sum_sq += xr[j] * xr[j];
    const T s = static_cast<T>(1.0 / std::sqrt(static_cast<double>(sum_sq) / static_cast<double>(dim) + eps));
    for (std::int64_t j = 0; j < dim; ++j) yr[j] = xr[j] * s * w[j];
    rstd[r] = s;
  }
}

// With xhat = x * rstd: dxhat = dy * w, dx = rstd * (dxhat - xhat * mean(dxhat * xhat)),
// dw += sum over rows of dy * xhat.
template <class T>
void rmsnorm_backward(const T* dy, const T* x, const T* w, const T* rstd, T* dx, T* dw,
                      std::int64_t rows, std::int64_t dim) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * dim;
    const T* dyr = dy + r * dim;
    T* dxr = dx + r * dim;
    const T s = rstd[r];
    T dot = 0;
    for (std::int64_t j = 0; j < dim; ++j) dot += dyr[j] * w[j] * xr[j] * s;
    const T mean = dot / static_cast<T>(dim);
    for (std::int64_t j = 0; j < dim; ++j) {
      const T xhat = xr[j] * s;
      dxr[j] = s * (dyr[j] * w[j] - xhat * mean);
      dw[j] += dyr[j] * xhat;
    }
  }
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
