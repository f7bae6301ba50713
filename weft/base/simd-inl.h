// Building blocks for weft's vector loops, per Highway target: include after the source's
// "hwy/foreach_target.h" and "hwy/highway.h", inside nothing (the guard below is Highway's
// per-target toggle), and use from code within HWY_NAMESPACE.
//
// Every loop here is written so that its result does not depend on the target: sums go into
// a fixed set of 16 lanes combined in a fixed order (element i into lane i % 16, whatever the
// vector width), maxima are exact, and nothing is fused (Mul then Add, never MulAdd). The
// callers that want FMAs (the tile products) use MulAdd themselves and say so.
//
// Vectors are kept in arrays and structs, which Highway's sizeless targets (SVE, RVV) do not
// allow: the build leaves those targets out (weft/base/CMakeLists.txt), Arm runs NEON.

#if defined(WEFT_BASE_SIMD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef WEFT_BASE_SIMD_INL_H_
#undef WEFT_BASE_SIMD_INL_H_
#else
#define WEFT_BASE_SIMD_INL_H_
#endif

#include <cstddef>
#include <cstdint>
#include <limits>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace weft::simd::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

inline constexpr std::size_t kSumLanes = 16;

// The sum of the n terms term(d, i), each a vector of the terms i .. i + Lanes(d) - 1, into
// 16 lanes: whole vectors of at most 16 lanes (so that 16 / Lanes(d) vectors hold them), then
// the last n % 16 terms one by one (term(d1, i) with a one-lane d1) into lanes 0, 1, ...
template <class T, class Term>
HWY_INLINE T LaneSum(std::int64_t n, const Term& term) {
  const hn::CappedTag<T, kSumLanes> d;
  using V = hn::Vec<decltype(d)>;
  const std::size_t lanes = hn::Lanes(d), vectors = kSumLanes / lanes;
  V acc[kSumLanes];
  for (std::size_t k = 0; k < vectors; ++k) acc[k] = hn::Zero(d);
  std::int64_t i = 0;
  for (; i + static_cast<std::int64_t>(kSumLanes) <= n; i += kSumLanes) {
    for (std::size_t k = 0; k < vectors; ++k)
      acc[k] = hn::Add(acc[k], term(d, i + static_cast<std::int64_t>(k * lanes)));
  }
  HWY_ALIGN T lane[kSumLanes];
  for (std::size_t k = 0; k < vectors; ++k) hn::Store(acc[k], d, lane + k * lanes);
  const hn::CappedTag<T, 1> d1;
  for (std::size_t k = 0; i < n; ++i, ++k) lane[k] += hn::GetLane(term(d1, i));
  T sum = 0;
  for (T v : lane) sum += v;
  return sum;
}

// The largest of x[0, n), -infinity when n is 0; a NaN in x is skipped, as by the scalar
// `max < x ? x : max`.
template <class T>
HWY_INLINE T LaneMax(const T* HWY_RESTRICT x, std::int64_t n) {
  const hn::ScalableTag<T> d;
  const auto lanes = static_cast<std::int64_t>(hn::Lanes(d));
  auto acc = hn::Set(d, -std::numeric_limits<T>::infinity());
  std::int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const auto v = hn::LoadU(d, x + i);
    acc = hn::IfThenElse(hn::Lt(acc, v), v, acc);
  }
  HWY_ALIGN T lane[hn::MaxLanes(d)];
  hn::Store(acc, d, lane);
  T max = lane[0];
  for (std::int64_t k = 1; k < lanes; ++k) max = max < lane[k] ? lane[k] : max;
  for (; i < n; ++i) max = max < x[i] ? x[i] : max;
  return max;
}

// f(d, i) for the vectors of [0, n): whole ones of the target's width, then the rest one
// lane at a time (a one-lane d), so that each element takes the same operations.
template <class T, class F>
HWY_INLINE void ForVectors(std::int64_t n, const F& f) {
  const hn::ScalableTag<T> d;
  const auto lanes = static_cast<std::int64_t>(hn::Lanes(d));
  std::int64_t i = 0;
  for (; i + lanes <= n; i += lanes) f(d, i);
  const hn::CappedTag<T, 1> d1;
  for (; i < n; ++i) f(d1, i);
}

}  // namespace weft::simd::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // WEFT_BASE_SIMD_INL_H_
