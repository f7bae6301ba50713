#include "weft/kernels/rope.h"

#include <cmath>
#include <vector>

#include "weft/kernels/parallel.h"

namespace weft::kernels {
namespace {

// Rotates every pair by +angle (sign 1) or -angle (sign -1). The angles are computed in
// double once per (position, pair), as PyTorch's reference does in float64 before casting.
template <class T>
void rotate(T* x, std::int64_t batch, std::int64_t seq, std::int64_t heads, std::int64_t head_dim,
            double theta, std::int64_t first_position, double sign) {
  const std::int64_t half = head_dim / 2;
  std::vector<T> cos_table(static_cast<std::size_t>(seq * half));
  std::vector<T> sin_table(cos_table.size());
  for (std::int64_t t = 0; t < seq; ++t) {
    for (std::int64_t i = 0; i < half; ++i) {
      const double freq = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
      const double angle = static_cast<double>(t + first_position) * freq;
      cos_table[static_cast<std::size_t>(t * half + i)] = static_cast<T>(std::cos(angle));
      sin_table[static_cast<std::size_t>(t * half + i)] = static_cast<T>(sign * std::sin(angle));
    }
  }
  parallel_for(batch * seq, 64, [&](std::int64_t first, std::int64_t end) {
    for (std::int64_t bt = first; bt < end; ++bt) {
      const T* c = cos_table.data() + (bt % seq) * half;
      const T* s = sin_table.data() + (bt % seq) * half;
      for (std::int64_t h = 0; h < heads; ++h) {
        T* v = x + (bt * heads + h) * head_dim;
        for (std::int64_t i = 0; i < half; ++i) {
          const T x0 = v[2 * i];
          const T x1 = v[2 * i + 1];
          v[2 * i] = x0 * c[i] - x1 * s[i];
          v[2 * i + 1] = x0 * s[i] + x1 * c[i];
        }
      }
    }
  });
}

}  // namespace

template <class T>
void rope_forward(T* x, std::int64_t batch, std::int64_t seq, std::int64_t heads,
                  std::int64_t head_dim, double theta, std::int64_t first_position) {
  rotate(x, batch, seq, heads, head_dim, theta, first_position, 1.0);
}

template <class T>
void rope_backward(T* dx, std::int64_t batch, std::int64_t seq, std::int64_t heads,
                   std::int64_t head_dim, double theta, std::int64_t first_position) {
  rotate(dx, batch, seq, heads, head_dim, theta, first_position, -1.0);
}

template void rope_forward<float>(float*, std::int64_t, std::int64_t, std::int64_t,
                                  std::int64_t, double, std::int64_t);
template void rope_forward<double>(double*, std::int64_t, std::int64_t, std::int64_t,
                                   std::int64_t, double, std::int64_t);
template void rope_backward<float>(float*, std::int64_t, std::int64_t, std::int64_t,
                                   std::int64_t, double, std::int64_t);
template void rope_backward<double>(double*, std::int64_t, std::int64_t, std::int64_t,
                                    std::int64_t, double, std::int64_t);

}  // namespace weft::kernels
