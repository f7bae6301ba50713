// One source for every vector target (Highway's foreach_target re-includes it per target).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "weft/kernels/rope.cc"
#include "weft/kernels/rope.h"

#include <cmath>
#include <deque>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "weft/base/check.h"
#include "weft/base/simd.h"
#include "weft/kernels/internal/bf16-inl.h"
#include "weft/kernels/parallel.h"

#if HWY_ONCE
namespace weft::kernels {
namespace {

// cos and sin of p * theta^(-2i / head_dim) for the positions [first, first + seq): computed
// in double (as PyTorch's reference does before casting) once, and kept for later calls with
// the same sizes: a training step asks for the same table 2 x n_layers times, and for one a
// chunk under context parallelism (the last kKeptTables made are kept). Both are
// laid out as the rows they rotate, each value twice (for x[2i] and x[2i+1]), and the sines
// signed as they enter the rotation: -sin for x[2i], +sin for x[2i+1].
template <class T>
struct Table {
  std::int64_t seq = -1, head_dim = -1, first = -1;
  double theta = 0;
  std::vector<T> cos, sin;
};

constexpr std::size_t kKeptTables = 8;

template <class T>
std::shared_ptr<const Table<T>> table_for(std::int64_t seq, std::int64_t head_dim, double theta,
                                          std::int64_t first) {
  static std::mutex mu;
  static std::deque<std::shared_ptr<const Table<T>>> kept;  // the latest first
  {
    std::lock_guard lock(mu);
    for (const auto& t : kept) {
      if (t->seq == seq && t->head_dim == head_dim && t->theta == theta && t->first == first) {
        return t;
      }
    }
  }
  auto t = std::make_shared<Table<T>>();
  t->seq = seq, t->head_dim = head_dim, t->theta = theta, t->first = first;
  t->cos.resize(static_cast<std::size_t>(seq * head_dim));
  t->sin.resize(t->cos.size());
  for (std::int64_t p = 0; p < seq; ++p) {
    for (std::int64_t i = 0; i < head_dim / 2; ++i) {
      const double freq =
          std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
      const double angle = static_cast<double>(p + first) * freq;
      const auto at = static_cast<std::size_t>(p * head_dim + 2 * i);
      t->cos[at] = t->cos[at + 1] = static_cast<T>(std::cos(angle));
      t->sin[at] = static_cast<T>(-std::sin(angle));
      t->sin[at + 1] = static_cast<T>(std::sin(angle));
    }
  }
  std::lock_guard lock(mu);
  kept.push_front(t);
  if (kept.size() > kKeptTables) kept.pop_back();
  return t;
}

}  // namespace
}  // namespace weft::kernels
#endif  // HWY_ONCE

HWY_BEFORE_NAMESPACE();
namespace weft::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The rows [first, end) of a share: x = x * cos + partner(x) * sin * sign, in whole vectors
// with one shuffle each (Reverse2: each pair's partner; the pairs' interleaving, written per
// pair, left GCC's vectors half used: 8 % slower with the rows in cache, twice as slow from
// memory; docs/TRAINING.md). Multiplies and adds, not fused: the same bits on every target.
template <class T>
void rotate_rows(T* x, const T* cos, const T* sin, std::int64_t first, std::int64_t end,
                 std::int64_t seq, std::int64_t heads, std::int64_t head_dim,
                 std::int64_t row_stride, T sign) {
  const hn::ScalableTag<T> d;
  const auto w = static_cast<std::int64_t>(hn::Lanes(d));
  const auto signv = hn::Set(d, sign);
  for (std::int64_t bt = first; bt < end; ++bt) {
    const T* c = cos + (bt % seq) * head_dim;
    const T* s = sin + (bt % seq) * head_dim;
    for (std::int64_t h = 0; h < heads; ++h) {
      T* v = x + bt * row_stride + h * head_dim;
      std::int64_t j = 0;
      for (; w >= 2 && j + w <= head_dim; j += w) {  // (the scalar fallback has 1-lane vectors)
        const auto vj = hn::LoadU(d, v + j);
        const auto partner = hn::Mul(hn::Reverse2(d, vj), hn::Mul(hn::LoadU(d, s + j), signv));
        hn::StoreU(hn::Add(hn::Mul(vj, hn::LoadU(d, c + j)), partner), d, v + j);
      }
      for (; j < head_dim; j += 2) {
        const T x0 = v[j], x1 = v[j + 1];
        v[j] = x0 * c[j] + x1 * (s[j] * sign);
        v[j + 1] = x1 * c[j + 1] + x0 * (s[j + 1] * sign);
      }
    }
  }
}

// Mixed precision: rotate_rows' rotation of the first `heads` heads of each row of x, and the
// rest of the row (up to row_width) as it is, all written to y rounded to bfloat16 (rows
// row_width apart); x is left as it was. The same arithmetic, then StoreBF16's rounding.
void RotateRowsBF16(const float* x, std::uint16_t* y, const float* cos, const float* sin,
                    std::int64_t first, std::int64_t end, std::int64_t seq, std::int64_t heads,
                    std::int64_t head_dim, std::int64_t row_width, float sign) {
  const hn::ScalableTag<float> d;
  const auto w = static_cast<std::int64_t>(hn::Lanes(d));
  const auto signv = hn::Set(d, sign);
  for (std::int64_t bt = first; bt < end; ++bt) {
    const float* c = cos + (bt % seq) * head_dim;
    const float* s = sin + (bt % seq) * head_dim;
    const float* row = x + bt * row_width;
    std::uint16_t* out = y + bt * row_width;
    for (std::int64_t h = 0; h < heads; ++h) {
      const float* v = row + h * head_dim;
      std::uint16_t* o = out + h * head_dim;
      std::int64_t j = 0;
      for (; w >= 2 && j + w <= head_dim; j += w) {
        const auto vj = hn::LoadU(d, v + j);
        const auto partner = hn::Mul(hn::Reverse2(d, vj), hn::Mul(hn::LoadU(d, s + j), signv));
        StoreBF16(d, hn::Add(hn::Mul(vj, hn::LoadU(d, c + j)), partner), o + j);
      }
      for (; j < head_dim; j += 2) {
        o[j] = BFloat16(v[j] * c[j] + v[j + 1] * (s[j] * sign)).bits;
        o[j + 1] = BFloat16(v[j + 1] * c[j + 1] + v[j] * (s[j + 1] * sign)).bits;
      }
    }
    std::int64_t j = heads * head_dim;
    for (; j + w <= row_width; j += w) StoreBF16(d, hn::LoadU(d, row + j), out + j);
    for (; j < row_width; ++j) out[j] = BFloat16(row[j]).bits;
  }
}

#define WEFT_ROPE(T, S)                                                                      \
  void RotateRows##S(T* x, const T* cos, const T* sin, std::int64_t first, std::int64_t end, \
                     std::int64_t seq, std::int64_t heads, std::int64_t head_dim,            \
                     std::int64_t row_stride, T sign) {                                      \
    rotate_rows(x, cos, sin, first, end, seq, heads, head_dim, row_stride, sign);            \
  }
WEFT_ROPE(float, F32)
WEFT_ROPE(double, F64)
#undef WEFT_ROPE

}  // namespace weft::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace weft::kernels {

HWY_EXPORT(RotateRowsF32);
HWY_EXPORT(RotateRowsF64);
HWY_EXPORT(RotateRowsBF16);

namespace {

// Rotates every pair by +angle (sign 1) or -angle (sign -1).
template <class T>
void rotate(T* x, std::int64_t batch, std::int64_t seq, std::int64_t heads, std::int64_t head_dim,
            double theta, std::int64_t first_position, std::int64_t row_stride, T sign) {
  WEFT_CHECK_EQ(head_dim % 2, 0);  // pairs: the rows' last loop reads two at a time
  if (row_stride == 0) row_stride = heads * head_dim;
  const auto table = table_for<T>(seq, head_dim, theta, first_position);
  parallel_for(batch * seq, 64, [&](std::int64_t first, std::int64_t end) {
    WEFT_DISPATCH_BY_TYPE(T, RotateRows, x, table->cos.data(), table->sin.data(), first, end, seq,
                          heads, head_dim, row_stride, sign);
  });
}

// rotate() into bfloat16 rows.
void rotate_bf16(const float* x, BFloat16* y, std::int64_t batch, std::int64_t seq,
                 std::int64_t heads, std::int64_t head_dim, double theta,
                 std::int64_t first_position, std::int64_t row_width, float sign) {
  WEFT_CHECK_EQ(head_dim % 2, 0);
  WEFT_CHECK_GE(row_width, heads * head_dim);
  const auto table = table_for<float>(seq, head_dim, theta, first_position);
  auto* bits = reinterpret_cast<std::uint16_t*>(y);
  parallel_for(batch * seq, 64, [&](std::int64_t first, std::int64_t end) {
    HWY_DYNAMIC_DISPATCH(RotateRowsBF16)
    (x, bits, table->cos.data(), table->sin.data(), first, end, seq, heads, head_dim, row_width,
     sign);
  });
}

}  // namespace

void rope_forward_bf16(const float* x, BFloat16* y, std::int64_t batch, std::int64_t seq,
                       std::int64_t heads, std::int64_t head_dim, double theta,
                       std::int64_t first_position, std::int64_t row_width) {
  rotate_bf16(x, y, batch, seq, heads, head_dim, theta, first_position, row_width, 1.0f);
}

void rope_backward_bf16(const float* dx, BFloat16* dy, std::int64_t batch, std::int64_t seq,
                        std::int64_t heads, std::int64_t head_dim, double theta,
                        std::int64_t first_position, std::int64_t row_width) {
  rotate_bf16(dx, dy, batch, seq, heads, head_dim, theta, first_position, row_width, -1.0f);
}

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

template void rope_forward<float>(float*, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                                  double, std::int64_t, std::int64_t);
template void rope_forward<double>(double*, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                                   double, std::int64_t, std::int64_t);
template void rope_backward<float>(float*, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                                   double, std::int64_t, std::int64_t);
template void rope_backward<double>(double*, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                                    double, std::int64_t, std::int64_t);

}  // namespace weft::kernels
#endif  // HWY_ONCE
