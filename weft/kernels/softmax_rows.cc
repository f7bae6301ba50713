#include "weft/kernels/internal/softmax_rows.h"

#include <algorithm>
#include <limits>

#include "weft/base/simd.h"
#include "weft/kernels/internal/fast_exp.h"

namespace weft::kernels::internal {
namespace {

constexpr int kLanes = 16;

template <class T>
[[gnu::always_inline]] inline T row_max(const T* __restrict x, std::int64_t n) {
  T lane[kLanes];
  std::fill(lane, lane + kLanes, -std::numeric_limits<T>::infinity());
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int k = 0; k < kLanes; ++k) lane[k] = lane[k] < x[i + k] ? x[i + k] : lane[k];
  }
  for (; i < n; ++i) lane[0] = lane[0] < x[i] ? x[i] : lane[0];
  T max = lane[0];
  for (int k = 1; k < kLanes; ++k) max = max < lane[k] ? lane[k] : max;
  return max;
}

template <class T>
[[gnu::always_inline]] inline T exp_and_sum(T* __restrict x, std::int64_t n, T shift) {
  T lane[kLanes] = {};
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int k = 0; k < kLanes; ++k) lane[k] += (x[i + k] = exp_of(x[i + k] - shift));
  }
  for (; i < n; ++i) lane[0] += (x[i] = exp_of(x[i] - shift));
  T sum = 0;
  for (T v : lane) sum += v;
  return sum;
}

template <class T>
[[gnu::always_inline]] inline T dot(const T* __restrict a, const T* __restrict b, std::int64_t n) {
  T lane[kLanes] = {};
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int k = 0; k < kLanes; ++k) lane[k] += a[i + k] * b[i + k];
  }
  for (; i < n; ++i) lane[0] += a[i] * b[i];
  T sum = 0;
  for (T v : lane) sum += v;
  return sum;
}

}  // namespace

template <class T>
WEFT_VECTOR_CLONES void softmax_block(T* s, std::int64_t ld, std::int64_t rows, std::int64_t cols,
                                      T* m, T* l, T* correction) {
  for (std::int64_t r = 0; r < rows; ++r) {
    T* row = s + r * ld;
    const T m_new = std::max(m[r], row_max(row, cols));
    const T sum = exp_and_sum(row, cols, m_new);
    correction[r] = exp_of(m[r] - m_new);
    l[r] = l[r] * correction[r] + sum;
    m[r] = m_new;
  }
}

template <class T>
WEFT_VECTOR_CLONES void exp_block(T* p, std::int64_t ld, std::int64_t rows, std::int64_t cols,
                                  const T* shift) {
  for (std::int64_t r = 0; r < rows; ++r) {
    T* __restrict row = p + r * ld;
    const T by = shift[r];
    for (std::int64_t c = 0; c < cols; ++c) row[c] = exp_of(row[c] - by);
  }
}

template <class T>
WEFT_VECTOR_CLONES void softmax_grad_block(T* dp, const T* p, std::int64_t ld, std::int64_t rows,
                                           std::int64_t cols, const T* delta, T scale) {
  for (std::int64_t r = 0; r < rows; ++r) {
    T* __restrict g = dp + r * ld;
    const T* __restrict pr = p + r * ld;
    const T dr = delta[r];
    for (std::int64_t c = 0; c < cols; ++c) g[c] = pr[c] * (g[c] - dr) * scale;
  }
}

template <class T>
WEFT_VECTOR_CLONES void row_dots(const T* a, const T* b, std::int64_t stride, std::int64_t rows,
                                 std::int64_t n, T* out) {
  for (std::int64_t r = 0; r < rows; ++r) out[r] = dot(a + r * stride, b + r * stride, n);
}

template <class T>
WEFT_VECTOR_CLONES void scale_rows(T* out, std::int64_t out_stride, const T* in, std::int64_t rows,
                                   std::int64_t n, const T* factor) {
  for (std::int64_t r = 0; r < rows; ++r) {
    T* o = out + r * out_stride;  // may be x: no restrict
    const T* x = in + r * n;
    const T f = factor[r];
    for (std::int64_t c = 0; c < n; ++c) o[c] = x[c] * f;
  }
}

#define WEFT_SOFTMAX_ROWS(T)                                                                   \
  template void softmax_block<T>(T*, std::int64_t, std::int64_t, std::int64_t, T*, T*, T*);    \
  template void exp_block<T>(T*, std::int64_t, std::int64_t, std::int64_t, const T*);          \
  template void softmax_grad_block<T>(T*, const T*, std::int64_t, std::int64_t, std::int64_t,  \
                                      const T*, T);                                            \
  template void row_dots<T>(const T*, const T*, std::int64_t, std::int64_t, std::int64_t, T*); \
  template void scale_rows<T>(T*, std::int64_t, const T*, std::int64_t, std::int64_t, const T*);
WEFT_SOFTMAX_ROWS(float)
WEFT_SOFTMAX_ROWS(double)
#undef WEFT_SOFTMAX_ROWS

}  // namespace weft::kernels::internal
