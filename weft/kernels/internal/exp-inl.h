// exp for the kernels' vector loops, per Highway target (include like weft/base/simd-inl.h).
//
// float: Cody-Waite range reduction, x = n ln2 + r with |r| <= ln2/2, a degree-6 polynomial
// for e^r, and 2^n built in the exponent bits, in separate multiplies and adds (no FMA), so
// that every target gives the same bits. Relative error below 2e-7 (2 ulp) on [-87, 88]
// (tests/kernels: against std::exp); inputs below -87 (and -inf) give 0, which the softmax and
// sigmoid callers want; NaN stays NaN.
// double (the float64 checks): Highway's Exp (1 ulp), 0 below -708.

#if defined(WEFT_KERNELS_INTERNAL_EXP_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef WEFT_KERNELS_INTERNAL_EXP_INL_H_
#undef WEFT_KERNELS_INTERNAL_EXP_INL_H_
#else
#define WEFT_KERNELS_INTERNAL_EXP_INL_H_
#endif

#include <cstdint>

#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace weft::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

template <class D, class V = hn::Vec<D>>
HWY_INLINE V FastExp(D d, V x) {
  using T = hn::TFromD<D>;
  if constexpr (sizeof(T) == sizeof(float)) {
    const V lo = hn::Set(d, -87.0f), hi = hn::Set(d, 88.0f);
    const auto keep = hn::Not(hn::Lt(x, lo));  // true for NaN
    // Selects, not Min/Max: those would turn a NaN into a bound.
    x = hn::IfThenElse(hn::Lt(x, lo), lo, hn::IfThenElse(hn::Gt(x, hi), hi, x));
    const V round = hn::Set(d, 12582912.0f);  // 1.5 * 2^23: adding it rounds to an integer
    const V n = hn::Sub(hn::Add(hn::Mul(x, hn::Set(d, 1.44269504088896341f)), round), round);
    const V r = hn::Sub(hn::Sub(x, hn::Mul(n, hn::Set(d, 0.693359375f))),
                        hn::Mul(n, hn::Set(d, -2.12194440e-4f)));
    V p = hn::Set(d, 1.0f / 720);
    for (float c : {1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f, 1.0f})
      p = hn::Add(hn::Mul(p, r), hn::Set(d, c));
    const hn::RebindToSigned<D> di;
    const V scale =
        hn::BitCast(d, hn::ShiftLeft<23>(hn::ConvertTo(di, hn::Add(n, hn::Set(d, 127.0f)))));
    return hn::IfThenElseZero(keep, hn::Mul(p, scale));
  } else {
    const V lo = hn::Set(d, T(-708));
    const auto keep = hn::Not(hn::Lt(x, lo));
    return hn::IfThenElseZero(keep, hn::Exp(d, hn::IfThenElse(keep, x, lo)));
  }
}

}  // namespace weft::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // WEFT_KERNELS_INTERNAL_EXP_INL_H_
