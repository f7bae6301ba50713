// One source for every vector target (Highway's foreach_target re-includes it per target).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "weft/kernels/internal/softmax_rows.cc"
#include "weft/kernels/internal/softmax_rows.h"

#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "weft/base/simd-inl.h"
#include "weft/kernels/internal/exp-inl.h"

HWY_BEFORE_NAMESPACE();
namespace weft::kernels::HWY_NAMESPACE {
namespace {

using simd::HWY_NAMESPACE::ForVectors;
using simd::HWY_NAMESPACE::LaneMax;
using simd::HWY_NAMESPACE::LaneSum;

template <class T>
T exp_scalar(T x) {
  const hn::CappedTag<T, 1> d1;
  return hn::GetLane(FastExp(d1, hn::Set(d1, x)));
}

template <class T>
void softmax_block(T* s, std::int64_t ld, std::int64_t rows, std::int64_t cols, T* m, T* l,
                   T* correction) {
  for (std::int64_t r = 0; r < rows; ++r) {
    T* row = s + r * ld;
    const T m_row = LaneMax(row, cols);
    const T m_new = m[r] < m_row ? m_row : m[r];
    const T sum = LaneSum<T>(cols, [&](auto d, std::int64_t c) {
      const auto e = FastExp(d, hn::Sub(hn::LoadU(d, row + c), hn::Set(d, m_new)));
      hn::StoreU(e, d, row + c);
      return e;
    });
    correction[r] = exp_scalar(m[r] - m_new);
    l[r] = l[r] * correction[r] + sum;
    m[r] = m_new;
  }
}

template <class T>
void exp_block(T* p, std::int64_t ld, std::int64_t rows, std::int64_t cols, const T* shift) {
  for (std::int64_t r = 0; r < rows; ++r) {
    T* row = p + r * ld;
    const T by = shift[r];
    ForVectors<T>(cols, [&](auto d, std::int64_t c) {
      hn::StoreU(FastExp(d, hn::Sub(hn::LoadU(d, row + c), hn::Set(d, by))), d, row + c);
    });
  }
}

// A select, not a product, where p is 0: causal tiles leave the masked dp entries as they
// were, and a non-finite value there (another head's, from non-finite inputs) must not turn
// into NaN here.
template <class T>
void softmax_grad_block(T* dp, const T* p, std::int64_t ld, std::int64_t rows, std::int64_t cols,
                        const T* delta, T scale) {
  for (std::int64_t r = 0; r < rows; ++r) {
    T* g = dp + r * ld;
    const T* pr = p + r * ld;
    const T dr = delta[r];
    ForVectors<T>(cols, [&](auto d, std::int64_t c) {
      const auto pv = hn::LoadU(d, pr + c);
      const auto gv =
          hn::Mul(hn::Mul(pv, hn::Sub(hn::LoadU(d, g + c), hn::Set(d, dr))), hn::Set(d, scale));
      hn::StoreU(hn::IfThenZeroElse(hn::Eq(pv, hn::Zero(d)), gv), d, g + c);
    });
  }
}

template <class T>
void row_dots(const T* a, const T* b, std::int64_t stride, std::int64_t rows, std::int64_t n,
              T* out) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* x = a + r * stride;
    const T* y = b + r * stride;
    out[r] = LaneSum<T>(n, [&](auto d, std::int64_t i) {
      return hn::Mul(hn::LoadU(d, x + i), hn::LoadU(d, y + i));
    });
  }
}

template <class T>
void scale_rows(T* out, std::int64_t out_stride, const T* in, std::int64_t rows, std::int64_t n,
                const T* factor) {
  for (std::int64_t r = 0; r < rows; ++r) {
    T* o = out + r * out_stride;  // may be `in`
    const T* x = in + r * n;
    const T f = factor[r];
    ForVectors<T>(n, [&](auto d, std::int64_t c) {
      hn::StoreU(hn::Mul(hn::LoadU(d, x + c), hn::Set(d, f)), d, o + c);
    });
  }
}

}  // namespace

// The entry points Highway's dispatch tables take: functions, not templates.
#define WEFT_SOFTMAX_ROWS(T, S)                                                                   \
  void SoftmaxBlock##S(T* s, std::int64_t ld, std::int64_t rows, std::int64_t cols, T* m, T* l,   \
                       T* correction) {                                                           \
    softmax_block(s, ld, rows, cols, m, l, correction);                                           \
  }                                                                                               \
  void ExpBlock##S(T* p, std::int64_t ld, std::int64_t rows, std::int64_t cols, const T* shift) { \
    exp_block(p, ld, rows, cols, shift);                                                          \
  }                                                                                               \
  void SoftmaxGradBlock##S(T* dp, const T* p, std::int64_t ld, std::int64_t rows,                 \
                           std::int64_t cols, const T* delta, T scale) {                          \
    softmax_grad_block(dp, p, ld, rows, cols, delta, scale);                                      \
  }                                                                                               \
  void RowDots##S(const T* a, const T* b, std::int64_t stride, std::int64_t rows, std::int64_t n, \
                  T* out) {                                                                       \
    row_dots(a, b, stride, rows, n, out);                                                         \
  }                                                                                               \
  void ScaleRows##S(T* out, std::int64_t out_stride, const T* in, std::int64_t rows,              \
                    std::int64_t n, const T* factor) {                                            \
    scale_rows(out, out_stride, in, rows, n, factor);                                             \
  }
WEFT_SOFTMAX_ROWS(float, F32)
WEFT_SOFTMAX_ROWS(double, F64)
#undef WEFT_SOFTMAX_ROWS

}  // namespace weft::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "weft/base/simd.h"

namespace weft::kernels::internal {

HWY_EXPORT(SoftmaxBlockF32);
HWY_EXPORT(SoftmaxBlockF64);
HWY_EXPORT(ExpBlockF32);
HWY_EXPORT(ExpBlockF64);
HWY_EXPORT(SoftmaxGradBlockF32);
HWY_EXPORT(SoftmaxGradBlockF64);
HWY_EXPORT(RowDotsF32);
HWY_EXPORT(RowDotsF64);
HWY_EXPORT(ScaleRowsF32);
HWY_EXPORT(ScaleRowsF64);

template <class T>
void softmax_block(T* s, std::int64_t ld, std::int64_t rows, std::int64_t cols, T* m, T* l,
                   T* correction) {
  WEFT_DISPATCH_BY_TYPE(T, SoftmaxBlock, s, ld, rows, cols, m, l, correction);
}

template <class T>
void exp_block(T* p, std::int64_t ld, std::int64_t rows, std::int64_t cols, const T* shift) {
  WEFT_DISPATCH_BY_TYPE(T, ExpBlock, p, ld, rows, cols, shift);
}

template <class T>
void softmax_grad_block(T* dp, const T* p, std::int64_t ld, std::int64_t rows, std::int64_t cols,
                        const T* delta, T scale) {
  WEFT_DISPATCH_BY_TYPE(T, SoftmaxGradBlock, dp, p, ld, rows, cols, delta, scale);
}

template <class T>
void row_dots(const T* a, const T* b, std::int64_t stride, std::int64_t rows, std::int64_t n,
              T* out) {
  WEFT_DISPATCH_BY_TYPE(T, RowDots, a, b, stride, rows, n, out);
}

template <class T>
void scale_rows(T* out, std::int64_t out_stride, const T* in, std::int64_t rows, std::int64_t n,
                const T* factor) {
  WEFT_DISPATCH_BY_TYPE(T, ScaleRows, out, out_stride, in, rows, n, factor);
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
#endif  // HWY_ONCE
