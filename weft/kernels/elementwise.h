// Element-wise operations and reductions the model and the optimizer need.
#pragma once

#include <cstdint>

namespace weft::kernels {

template <class T>
void scale(T* y, T factor, std::int64_t n);  // y *= factor
// sum of x[i]^2, accumulated in double (the gradient norm for clipping).
template <class T>
double sum_squares(const T* x, std::int64_t n);

}  // namespace weft::kernels
