#include "weft/kernels/internal/softmax_rows.h"

#include <algorithm>

#include "weft/base/simd.h"
#include "weft/kernels/internal/fast_exp.h"
#include "weft/kernels/internal/lanes.h"

namespace weft::kernels::internal {

template <class T>
WEFT_VECTOR_CLONES void softmax_block(T* s, std::int64_t ld, std::int64_t rows, std::int64_t cols,
                                      T* m, T* l, T* correction) {
  for (std::int64_t r = 0; r < rows; ++r) {
    T* row = s + r * ld;
    const T m_new = std::max(m[r], lane_max(row, cols));
    const T sum =
        lane_sum<T>(cols, [&](std::int64_t c) { return row[c] = exp_of(row[c] - m_new); });
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
    // A select, not a product, where p is 0: causal tiles leave the masked dp entries as they
    // were, and a non-finite value there (another head's, from non-finite inputs) must not
    // turn into NaN here.
    for (std::int64_t c = 0; c < cols; ++c)
      g[c] = pr[c] != T(0) ? pr[c] * (g[c] - dr) * scale : T(0);
  }
}

template <class T>
WEFT_VECTOR_CLONES void row_dots(const T* a, const T* b, std::int64_t stride, std::int64_t rows,
                                 std::int64_t n, T* out) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* __restrict x = a + r * stride;
    const T* __restrict y = b + r * stride;
    out[r] = lane_sum<T>(n, [&](std::int64_t i) { return x[i] * y[i]; });
  }
}

template <class T>
WEFT_VECTOR_CLONES void scale_rows(T* out, std::int64_t out_stride, const T* in, std::int64_t rows,
                                   std::int64_t n, const T* factor) {
  for (std::int64_t r = 0; r < rows; ++r) {
    T* o = out + r * out_stride;  // may be `in`: no restrict
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
