// One source for every vector target (Highway's foreach_target re-includes it per target).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "weft/kernels/convert.cc"
#include "weft/kernels/convert.h"

#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "weft/base/simd-inl.h"
#include "weft/kernels/internal/bf16-inl.h"

HWY_BEFORE_NAMESPACE();
namespace weft::kernels::HWY_NAMESPACE {

using simd::HWY_NAMESPACE::ForVectors;

// The rounding (nearest even, NaN kept) is internal/bf16-inl.h's, which the kernels that write
// bfloat16 share.
void ToBFloat16Range(const float* x, std::uint16_t* y, std::int64_t n) {
  ForVectors<float>(n, [&](auto d, std::int64_t i) { StoreBF16(d, hn::LoadU(d, x + i), y + i); });
}

void ToFloatRange(const std::uint16_t* x, float* y, std::int64_t n) {
  ForVectors<float>(n, [&](auto d, std::int64_t i) { hn::StoreU(LoadBF16(d, x + i), d, y + i); });
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
