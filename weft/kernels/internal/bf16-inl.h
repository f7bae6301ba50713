// bfloat16 loads and stores for the kernels' vector loops, per Highway target (include like
// weft/base/simd-inl.h). The kernels hold bfloat16 as its bits (std::uint16_t; callers pass
// weft::BFloat16 arrays reinterpreted) and compute in float32.
//
// StoreBF16 rounds to nearest even on the bits (add 0x7fff plus the lowest kept bit, keep the
// top half), exactly as BFloat16(float) does (weft/base/dtype.h): Highway's own DemoteTo to
// bfloat16 truncates on some targets. A NaN stays a quiet NaN (the add could carry one into
// the infinities).
//
// StoreAs(d, v, p) stores float32 lanes to float or to bfloat16 bits, and LoadAs(d, p) loads
// them from either, so that one kernel body reads and writes both.

#if defined(WEFT_KERNELS_INTERNAL_BF16_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef WEFT_KERNELS_INTERNAL_BF16_INL_H_
#undef WEFT_KERNELS_INTERNAL_BF16_INL_H_
#else
#define WEFT_KERNELS_INTERNAL_BF16_INL_H_
#endif

#include <cstdint>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace weft::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The bfloat16 bits of each float32 lane, rounded, in the low half of an unsigned lane.
template <class D, class V = hn::Vec<D>>
HWY_INLINE hn::Vec<hn::RebindToUnsigned<D>> BF16Bits(D /*d*/, V v) {
  const hn::RebindToUnsigned<D> du;
  const auto bits = hn::BitCast(du, v);
  const auto lsb = hn::And(hn::ShiftRight<16>(bits), hn::Set(du, 1));
  const auto rounded = hn::ShiftRight<16>(hn::Add(bits, hn::Add(lsb, hn::Set(du, 0x7fff))));
  const auto quiet = hn::Or(hn::ShiftRight<16>(bits), hn::Set(du, 0x40));
  return hn::IfThenElse(hn::RebindMask(du, hn::IsNaN(v)), quiet, rounded);
}

template <class D, class V = hn::Vec<D>>
HWY_INLINE void StoreBF16(D d, V v, std::uint16_t* HWY_RESTRICT p) {
  const hn::RebindToSigned<D> di;
  const hn::Rebind<std::uint16_t, D> d16;
  hn::StoreU(hn::DemoteTo(d16, hn::BitCast(di, BF16Bits(d, v))), d16, p);
}

template <class D>
HWY_INLINE hn::Vec<D> LoadBF16(D d, const std::uint16_t* HWY_RESTRICT p) {
  const hn::RebindToUnsigned<D> du;
  const auto half = hn::LoadU(hn::Rebind<std::uint16_t, D>(), p);
  return hn::BitCast(d, hn::ShiftLeft<16>(hn::PromoteTo(du, half)));
}

// Lanes from T (float, double) or float32 lanes from bfloat16 bits, so that one kernel body
// reads either.
template <class D, class T>
HWY_INLINE hn::Vec<D> LoadAs(D d, const T* HWY_RESTRICT p) {
  return hn::LoadU(d, p);
}
template <class D>
HWY_INLINE hn::Vec<D> LoadAs(D d, const std::uint16_t* HWY_RESTRICT p) {
  return LoadBF16(d, p);
}

template <class D, class V, class T>
HWY_INLINE void StoreAs(D d, V v, T* HWY_RESTRICT p) {
  hn::StoreU(v, d, p);
}
template <class D, class V>
HWY_INLINE void StoreAs(D d, V v, std::uint16_t* HWY_RESTRICT p) {
  StoreBF16(d, v, p);
}

}  // namespace weft::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // WEFT_KERNELS_INTERNAL_BF16_INL_H_
