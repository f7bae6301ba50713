// One source for every vector target (Highway's foreach_target re-includes it per target).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "weft/kernels/swiglu.cc"
#include "weft/kernels/swiglu.h"

#include <vector>

#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "weft/base/simd-inl.h"
#include "weft/kernels/internal/bf16-inl.h"
#include "weft/kernels/internal/exp-inl.h"

HWY_BEFORE_NAMESPACE();
namespace weft::kernels::HWY_NAMESPACE {
namespace {

using simd::HWY_NAMESPACE::ForVectors;

template <class D, class V>
HWY_INLINE V sigmoid(D d, V a) {
  const V one = hn::Set(d, 1);
  return hn::Div(one, hn::Add(one, FastExp(d, hn::Neg(a))));
}

// A and H: T, or bfloat16's bits (mixed precision, T float).
template <class T, class A, class H>
void forward_range(const A* a, const A* b, H* h, std::int64_t n) {
  ForVectors<T>(n, [&](auto d, std::int64_t i) {
    const auto ai = LoadAs(d, a + i);
    StoreAs(d, hn::Mul(hn::Mul(ai, sigmoid(d, ai)), LoadAs(d, b + i)), h + i);
  });
}

// d silu(a) / da = sig * (1 + a * (1 - sig)); a and b become da and db.
// a and b are T or bfloat16 bits (A); da and db may be a and b (in place, T) or bfloat16 bits
// (D = std::uint16_t).
template <class T, class A, class D>
void backward_range(const T* dh, const A* a, const A* b, D* da, D* db, std::int64_t n) {
  ForVectors<T>(n, [&](auto d, std::int64_t i) {
    const auto ai = LoadAs(d, a + i), bi = LoadAs(d, b + i), dhi = hn::LoadU(d, dh + i);
    const auto sig = sigmoid(d, ai), one = hn::Set(d, 1);
    const auto dsilu = hn::Add(one, hn::Mul(ai, hn::Sub(one, sig)));
    StoreAs(d, hn::Mul(hn::Mul(dhi, ai), sig), db + i);
    StoreAs(d, hn::Mul(hn::Mul(hn::Mul(dhi, bi), sig), dsilu), da + i);
  });
}

// The mixed-precision backward of one row: dh's row is copied aside first, since da | db
// (2 n bfloat16) are written over its bytes.
void BackwardRowBF16(float* dh, const std::uint16_t* a, const std::uint16_t* b, std::int64_t n) {
  thread_local std::vector<float> row;
  row.assign(dh, dh + n);
  auto* dab = reinterpret_cast<std::uint16_t*>(dh);
  backward_range(row.data(), a, b, dab, dab + n, n);
}

}  // namespace

#define WEFT_SWIGLU(T, S)                                              \
  void ForwardRange##S(const T* a, const T* b, T* h, std::int64_t n) { \
    forward_range<T>(a, b, h, n);                                      \
  }                                                                    \
  void BackwardRange##S(const T* dh, T* a, T* b, std::int64_t n) {     \
    backward_range(dh, a, b, a, b, n);                                 \
  }
WEFT_SWIGLU(float, F32)
WEFT_SWIGLU(double, F64)
#undef WEFT_SWIGLU

void ForwardRangeBF16(const std::uint16_t* a, const std::uint16_t* b, std::uint16_t* h,
                      std::int64_t n) {
  forward_range<float>(a, b, h, n);
}

}  // namespace weft::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <algorithm>
#include <cstdint>

#include "weft/base/simd.h"
#include "weft/kernels/parallel.h"

namespace weft::kernels {

HWY_EXPORT(ForwardRangeF32);
HWY_EXPORT(ForwardRangeF64);
HWY_EXPORT(BackwardRangeF32);
HWY_EXPORT(BackwardRangeF64);
HWY_EXPORT(ForwardRangeBF16);
HWY_EXPORT(BackwardRowBF16);

namespace {
constexpr std::int64_t kGrain = 1 << 14;
}  // namespace

template <class T>
void swiglu_forward(const T* a, const T* b, T* h, std::int64_t rows, std::int64_t cols,
                    std::int64_t ab_stride) {
  const std::int64_t grain = std::max<std::int64_t>(1, kGrain / cols);
  parallel_for(rows, grain, [&](std::int64_t first, std::int64_t end) {
    for (std::int64_t r = first; r < end; ++r)
      WEFT_DISPATCH_BY_TYPE(T, ForwardRange, a + r * ab_stride, b + r * ab_stride, h + r * cols,
                            cols);
  });
}

template <class T>
void swiglu_backward(const T* dh, T* a, T* b, std::int64_t rows, std::int64_t cols,
                     std::int64_t ab_stride) {
  const std::int64_t grain = std::max<std::int64_t>(1, kGrain / cols);
  parallel_for(rows, grain, [&](std::int64_t first, std::int64_t end) {
    for (std::int64_t r = first; r < end; ++r) {
      const std::int64_t at = r * ab_stride;
      WEFT_DISPATCH_BY_TYPE(T, BackwardRange, dh + r * cols, a + at, b + at, cols);
    }
  });
}

void swiglu_forward(const BFloat16* a, const BFloat16* b, BFloat16* h, std::int64_t rows,
                    std::int64_t cols, std::int64_t ab_stride) {
  auto* h16 = reinterpret_cast<std::uint16_t*>(h);
  const auto* a16 = reinterpret_cast<const std::uint16_t*>(a);
  const auto* b16 = reinterpret_cast<const std::uint16_t*>(b);
  const std::int64_t grain = std::max<std::int64_t>(1, kGrain / cols);
  parallel_for(rows, grain, [&](std::int64_t first, std::int64_t end) {
    for (std::int64_t r = first; r < end; ++r) {
      HWY_DYNAMIC_DISPATCH(ForwardRangeBF16)
      (a16 + r * ab_stride, b16 + r * ab_stride, h16 + r * cols, cols);
    }
  });
}

BFloat16* swiglu_backward_bf16(float* dh, const BFloat16* a, const BFloat16* b, std::int64_t rows,
                               std::int64_t cols, std::int64_t ab_stride) {
  static_assert(sizeof(float) == 2 * sizeof(BFloat16));
  const auto* a16 = reinterpret_cast<const std::uint16_t*>(a);
  const auto* b16 = reinterpret_cast<const std::uint16_t*>(b);
  const std::int64_t grain = std::max<std::int64_t>(1, kGrain / cols);
  parallel_for(rows, grain, [&](std::int64_t first, std::int64_t end) {
    for (std::int64_t r = first; r < end; ++r) {
      HWY_DYNAMIC_DISPATCH(BackwardRowBF16)
      (dh + r * cols, a16 + r * ab_stride, b16 + r * ab_stride, cols);
    }
  });
  return reinterpret_cast<BFloat16*>(dh);
}

template void swiglu_forward<float>(const float*, const float*, float*, std::int64_t, std::int64_t,
                                    std::int64_t);
template void swiglu_forward<double>(const double*, const double*, double*, std::int64_t,
                                     std::int64_t, std::int64_t);
template void swiglu_backward<float>(const float*, float*, float*, std::int64_t, std::int64_t,
                                     std::int64_t);
template void swiglu_backward<double>(const double*, double*, double*, std::int64_t, std::int64_t,
                                      std::int64_t);

}  // namespace weft::kernels
#endif  // HWY_ONCE
