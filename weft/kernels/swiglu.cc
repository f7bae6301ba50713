#include "weft/kernels/swiglu.h"

#include <algorithm>

#include "weft/base/simd.h"
#include "weft/kernels/internal/fast_exp.h"
#include "weft/kernels/parallel.h"

namespace weft::kernels {
namespace {

constexpr std::int64_t kGrain = 1 << 14;

// The loops over one share, on restrict pointers so that they vectorise.
template <class T>
WEFT_VECTOR_CLONES void forward_range(const T* __restrict a, const T* __restrict b, T* __restrict h, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    const T sig = T(1) / (T(1) + internal::exp_of(-a[i]));
    h[i] = a[i] * sig * b[i];
  }
}

// d silu(a) / da = sig * (1 + a * (1 - sig)); a and b become da and db.
template <class T>
WEFT_VECTOR_CLONES void backward_range(const T* __restrict dh, T* __restrict a, T* __restrict b,
                                       std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    const T ai = a[i], bi = b[i];
    const T sig = T(1) / (T(1) + internal::exp_of(-ai));
    b[i] = dh[i] * ai * sig;
    a[i] = dh[i] * bi * sig * (T(1) + ai * (T(1) - sig));
  }
}

}  // namespace

template <class T>
void swiglu_forward(const T* a, const T* b, T* h, std::int64_t rows, std::int64_t cols,
                    std::int64_t ab_stride) {
  parallel_for(rows, std::max<std::int64_t>(1, kGrain / cols), [&](std::int64_t first, std::int64_t end) {
    for (std::int64_t r = first; r < end; ++r) {
      forward_range(a + r * ab_stride, b + r * ab_stride, h + r * cols, cols);
    }
  });
}

template <class T>
void swiglu_backward(const T* dh, T* a, T* b, std::int64_t rows, std::int64_t cols,
                     std::int64_t ab_stride) {
  parallel_for(rows, std::max<std::int64_t>(1, kGrain / cols), [&](std::int64_t first, std::int64_t end) {
    for (std::int64_t r = first; r < end; ++r) {
      const std::int64_t at = r * ab_stride;
      backward_range(dh + r * cols, a + at, b + at, cols);
    }
  });
}

template void swiglu_forward<float>(const float*, const float*, float*, std::int64_t,
                                    std::int64_t, std::int64_t);
template void swiglu_forward<double>(const double*, const double*, double*, std::int64_t,
                                     std::int64_t, std::int64_t);
template void swiglu_backward<float>(const float*, float*, float*, std::int64_t, std::int64_t,
                                     std::int64_t);
template void swiglu_backward<double>(const double*, double*, double*, std::int64_t, std::int64_t,
                                      std::int64_t);

}  // namespace weft::kernels
