// The row loops of tiled attention, one call per tile: softmax's maximum, exponentials and
// sums, and the backward's element-wise steps: one Highway source for every vector target,
// sums in fixed lanes (weft/base/simd-inl.h), so the same bits on every target.
#pragma once

#include <cstdint>

namespace weft::kernels::internal {

// Per row r of the rows x cols block `s` (rows ld apart): m_new = max(m[r], max of the row);
// s = exp(s - m_new); correction[r] = exp(m[r] - m_new); l[r] = l[r] * correction[r] + the
// row's sum of s; m[r] = m_new.
template <class T>
void softmax_block(T* s, std::int64_t ld, std::int64_t rows, std::int64_t cols, T* m, T* l,
                   T* correction);

// p = exp(p - shift[r]) per row r.
template <class T>
void exp_block(T* p, std::int64_t ld, std::int64_t rows, std::int64_t cols, const T* shift);

// dp = p * (dp - delta[r]) * scale per row r (the softmax's backward), and exactly 0 where p
// is 0 whatever dp held.
template <class T>
void softmax_grad_block(T* dp, const T* p, std::int64_t ld, std::int64_t rows, std::int64_t cols,
                        const T* delta, T scale);

// out[r] = sum over x < n of a[r * stride + x] * b[r * stride + x].
template <class T>
void row_dots(const T* a, const T* b, std::int64_t stride, std::int64_t rows, std::int64_t n,
              T* out);

// out[r * out_stride + x] = in[r * n + x] * factor[r] for x < n; out may be in
// when out_stride is n.
template <class T>
void scale_rows(T* out, std::int64_t out_stride, const T* in, std::int64_t rows, std::int64_t n,
                const T* factor);

}  // namespace weft::kernels::internal
