#include "weft/kernels/elementwise.h"

#include "weft/kernels/parallel.h"

namespace weft::kernels {

template <class T>
void add_into(T* y, const T* x, std::int64_t n) {
  parallel_for(n, 1 << 15, [&](std::int64_t first, std::int64_t end) {
    for (std::int64_t i = first; i < end; ++i) y[i] += x[i];
  });
}

template <class T>
void scale(T* y, T factor, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] *= factor;
}

template <class T>
double sum_squares(const T* x, std::int64_t n) {
  double sum = 0;
  for (std::int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  return sum;
}

template void add_into<float>(float*, const float*, std::int64_t);
template void add_into<double>(double*, const double*, std::int64_t);
template void scale<float>(float*, float, std::int64_t);
template void scale<double>(double*, double, std::int64_t);
template double sum_squares<float>(const float*, std::int64_t);
template double sum_squares<double>(const double*, std::int64_t);

}  // namespace weft::kernels
