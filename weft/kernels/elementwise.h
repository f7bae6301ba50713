// Element-wise operations and reductions the model and the optimizer need.
#pragma once

#include <cstdint>

namespace weft::kernels {

template <class T>
void scale(T* y, T factor, std::int64_t n);  // y *= factor
// y[r * y_stride + c] += x[r * x_stride + c] for rows x cols; each element one float add, so
// the bits match a plain loop's on every target.
void add_rows(float* y, std::int64_t y_stride, const float* x, std::int64_t x_stride,
              std::int64_t rows, std::int64_t cols);
// sum of x[i]^2, accumulated in double (the gradient norm for clipping).
template <class T>
double sum_squares(const T* x, std::int64_t n);

}  // namespace weft::kernels
