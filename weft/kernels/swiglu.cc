#include "weft/kernels/swiglu.h"

#include <cmath>

#include "weft/kernels/parallel.h"

namespace weft::kernels {

template <class T>
void swiglu_forward(const T* a, const T* b, T* h, std::int64_t n) {
  parallel_for(n, 1 << 14, [&](std::int64_t first, std::int64_t end) {
    for (std::int64_t i = first; i < end; ++i) {
      const T sig = T(1) / (T(1) + std::exp(-a[i]));
      h[i] = a[i] * sig * b[i];
    }
  });
}

// d silu(a) / da = sig * (1 + a * (1 - sig)).
template <class T>
void swiglu_backward(const T* dh, const T* a, const T* b, T* da, T* db, std::int64_t n) {
  parallel_for(n, 1 << 14, [&](std::int64_t first, std::int64_t end) {
    for (std::int64_t i = first; i < end; ++i) {
      const T sig = T(1) / (T(1) + std::exp(-a[i]));
      const T silu = a[i] * sig;
      db[i] = dh[i] * silu;
      da[i] = dh[i] * b[i] * sig * (T(1) + a[i] * (T(1) - sig));
    }
  });
}

template void swiglu_forward<float>(const float*, const float*, float*, std::int64_t);
template void swiglu_forward<double>(const double*, const double*, double*, std::int64_t);
template void swiglu_backward<float>(const float*, const float*, const float*, float*, float*,
                                     std::int64_t);
template void swiglu_backward<double>(const double*, const double*, const double*, double*,
                                      double*, std::int64_t);

}  // namespace weft::kernels
