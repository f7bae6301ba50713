#include "weft/kernels/rope.h"

#include <cmath>
#include <memory>
#include <mutex>
#include <vector>

#include "weft/base/simd.h"
#include "weft/kernels/parallel.h"

namespace weft::kernels {
namespace {

// cos and sin of p * theta^(-2i / head_dim) for the positions [first, first + seq): computed
// in double (as PyTorch's reference does before casting) once, and kept for the next call
// with the same sizes: a training step asks for the same table 4 x n_layers times.
template <class T>
struct Table {
  std::int64_t seq = -1, head_dim = -1, first = -1;
  double theta = 0;
  std::vector<T> cos, sin;
};

template <class T>
std::shared_ptr<const Table<T>> table_for(std::int64_t seq, std::int64_t head_dim, double theta,
                                          std::int64_t first) {
  static std::mutex mu;
  static std::shared_ptr<const Table<T>> last;
  {
    std::lock_guard lock(mu);
    if (last && last->seq == seq && last->head_dim == head_dim && last->theta == theta &&
        last->first == first) {
      return last;
    }
  }
  auto t = std::make_shared<Table<T>>();
  t->seq = seq, t->head_dim = head_dim, t->theta = theta, t->first = first;
  const std::int64_t half = head_dim / 2;
  t->cos.resize(static_cast<std::size_t>(seq * half));
  t->sin.resize(t->cos.size());
  for (std::int64_t p = 0; p < seq; ++p) {
    for (std::int64_t i = 0; i < half; ++i) {
      const double freq = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
      const double angle = static_cast<double>(p + first) * freq;
      t->cos[static_cast<std::size_t>(p * half + i)] = static_cast<T>(std::cos(angle));
      t->sin[static_cast<std::size_t>(p * half + i)] = static_cast<T>(std::sin(angle));
    }
  }
  std::lock_guard lock(mu);
  last = t;
  return t;
}

// The rows [first, end) of a share, compiled for AVX-512 and AVX2 as well (the pairs'
// interleaving needs shuffles that the baseline's vectors do poorly).
template <class T>
WEFT_VECTOR_CLONES void rotate_rows(T* x, const Table<T>& table, std::int64_t first,
                                    std::int64_t end, std::int64_t seq, std::int64_t heads,
                                    std::int64_t head_dim, std::int64_t row_stride, T sign) {
  const std::int64_t half = head_dim / 2;
  for (std::int64_t bt = first; bt < end; ++bt) {
    const T* __restrict c = table.cos.data() + (bt % seq) * half;
    const T* __restrict s = table.sin.data() + (bt % seq) * half;
    for (std::int64_t h = 0; h < heads; ++h) {
      T* __restrict v = x + bt * row_stride + h * head_dim;
      for (std::int64_t i = 0; i < half; ++i) {
        const T x0 = v[2 * i];
        const T x1 = v[2 * i + 1];
        v[2 * i] = x0 * c[i] - x1 * sign * s[i];
        v[2 * i + 1] = x0 * sign * s[i] + x1 * c[i];
      }
    }
  }
}

// Rotates every pair by +angle (sign 1) or -angle (sign -1).
template <class T>
void rotate(T* x, std::int64_t batch, std::int64_t seq, std::int64_t heads, std::int64_t head_dim,
            double theta, std::int64_t first_position, std::int64_t row_stride, T sign) {
  if (row_stride == 0) row_stride = heads * head_dim;
  const auto table = table_for<T>(seq, head_dim, theta, first_position);
  parallel_for(batch * seq, 64, [&](std::int64_t first, std::int64_t end) {
    rotate_rows(x, *table, first, end, seq, heads, head_dim, row_stride, sign);
  });
}

}  // namespace

template <class T>
void rope_forward(T* x, std::int64_t batch, std::int64_t seq, std::int64_t heads,
                  std::int64_t head_dim, double theta, std::int64_t first_position,
                  std::int64_t row_stride) {
  rotate(x, batch, seq, heads, head_dim, theta, first_position, row_stride, T(1));
}

template <class T>
void rope_backward(T* dx, std::int64_t batch, std::int64_t seq, std::int64_t heads,
                   std::int64_t head_dim, double theta, std::int64_t first_position,
                   std::int64_t row_stride) {
  rotate(dx, batch, seq, heads, head_dim, theta, first_position, row_stride, T(-1));
}

template void rope_forward<float>(float*, std::int64_t, std::int64_t, std::int64_t,
                                  std::int64_t, double, std::int64_t, std::int64_t);
template void rope_forward<double>(double*, std::int64_t, std::int64_t, std::int64_t,
                                   std::int64_t, double, std::int64_t, std::int64_t);
template void rope_backward<float>(float*, std::int64_t, std::int64_t, std::int64_t,
                                   std::int64_t, double, std::int64_t, std::int64_t);
template void rope_backward<double>(double*, std::int64_t, std::int64_t, std::int64_t,
                                    std::int64_t, double, std::int64_t, std::int64_t);

}  // namespace weft::kernels
