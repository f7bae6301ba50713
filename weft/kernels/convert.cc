// One source for every vector target (Highway's foreach_target re-includes it per target).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "weft/kernels/convert.cc"
#include "weft/kernels/convert.h"

#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "weft/base/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace weft::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using simd::HWY_NAMESPACE::ForVectors;

// Round to nearest even on the bits: add 0x7fff plus the lowest kept bit, keep the top half.
// Highway's own DemoteTo to bfloat16 truncates on some targets, so the rounding is spelled out;
// NaNs are kept quiet NaNs (the add could carry one into the infinities).
void ToBFloat16Range(const float* x, std::uint16_t* y, std::int64_t n) {
  ForVectors<float>(n, [&](auto d, std::int64_t i) {
    const hn::RebindToUnsigned<decltype(d)> du;
    const hn::RebindToSigned<decltype(d)> di;
    const auto v = hn::LoadU(d, x + i);
    const auto bits = hn::BitCast(du, v);
    const auto lsb = hn::And(hn::ShiftRight<16>(bits), hn::Set(du, 1));
    const auto rounded = hn::ShiftRight<16>(hn::Add(bits, hn::Add(lsb, hn::Set(du, 0x7fff))));
    const auto quiet = hn::Or(hn::ShiftRight<16>(bits), hn::Set(du, 0x40));
    const auto nan = hn::RebindMask(du, hn::IsNaN(v));
    const auto top = hn::IfThenElse(nan, quiet, rounded);
    hn::StoreU(hn::DemoteTo(hn::Rebind<std::uint16_t, decltype(d)>(), hn::BitCast(di, top)),
               hn::Rebind<std::uint16_t, decltype(d)>(), y + i);
  });
}

void ToFloatRange(const std::uint16_t* x, float* y, std::int64_t n) {
  ForVectors<float>(n, [&](auto d, std::int64_t i) {
    const hn::RebindToUnsigned<decltype(d)> du;
    const auto half = hn::LoadU(hn::Rebind<std::uint16_t, decltype(d)>(), x + i);
    hn::StoreU(hn::BitCast(d, hn::ShiftLeft<16>(hn::PromoteTo(du, half))), d, y + i);
  });
}

}  // namespace weft::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "weft/kernels/parallel.h"

namespace weft::kernels {

HWY_EXPORT(ToBFloat16Range);
HWY_EXPORT(ToFloatRange);

void to_bfloat16(const float* x, BFloat16* y, std::int64_t n) {
  static_assert(sizeof(BFloat16) == sizeof(std::uint16_t));
  HWY_DYNAMIC_DISPATCH(ToBFloat16Range)(x, reinterpret_cast<std::uint16_t*>(y), n);
}

void to_float(const BFloat16* x, float* y, std::int64_t n) {
  HWY_DYNAMIC_DISPATCH(ToFloatRange)(reinterpret_cast<const std::uint16_t*>(x), y, n);
}

namespace {
constexpr std::int64_t kGrain = 1 << 15;
}  // namespace

void to_bfloat16_threaded(const float* x, BFloat16* y, std::int64_t n) {
  parallel_for(n, kGrain, [&](std::int64_t first, std::int64_t end) {
    to_bfloat16(x + first, y + first, end - first);
  });
}

void to_float_threaded(const BFloat16* x, float* y, std::int64_t n) {
  parallel_for(n, kGrain, [&](std::int64_t first, std::int64_t end) {
    to_float(x + first, y + first, end - first);
  });
}

}  // namespace weft::kernels
#endif  // HWY_ONCE
