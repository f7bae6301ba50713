// RMSNorm over rows of `dim`: y = x * rstd * w with rstd = 1 / sqrt(mean(x^2) + eps).
#pragma once

#include <cstdint>

#include "weft/base/dtype.h"

namespace weft::kernels {

// Saves rstd[rows] for the backward.
template <class T>
void rmsnorm_forward(const T* x, const T* w, T* y, T* rstd, std::int64_t rows, std::int64_t dim,
                     double eps);
// Mixed precision (the products read bfloat16): x, w and rstd in float32, computed in float32,
// y written as bfloat16 (rounded to nearest even) for the product that reads it. The backward
// is the float32 one (it reads x and rstd, not y).
void rmsnorm_forward(const float* x, const float* w, BFloat16* y, float* rstd, std::int64_t rows,
                     std::int64_t dim, double eps);
// dx (overwritten, or added to when accumulate_dx) and dw (accumulated) from dy.
template <class T>
void rmsnorm_backward(const T* dy, const T* x, const T* w, const T* rstd, T* dx, T* dw,
                      std::int64_t rows, std::int64_t dim, bool accumulate_dx = false);

}  // namespace weft::kernels
