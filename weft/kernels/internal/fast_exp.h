// exp for the kernels' inner loops, written so that the compiler vectorises it (libm's expf
// is a call per element): Cody-Waite range reduction, x = n ln2 + r with |r| <= ln2/2, a
// degree-6 polynomial for e^r, and 2^n built in the exponent bits. Relative error below
// 2e-7 (2 ulp) on [-87, 88] (tests/kernels: against std::exp); inputs below -87 give 0,
// which the softmax and sigmoid callers want. double keeps std::exp (the float64 checks).
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace weft::kernels::internal {

inline float exp_fast(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  // Selects, not branches, so that loops around it vectorise (with -fno-trapping-math, set
  // for weft_kernels): clamp, and zero what underflows.
  const float keep = x >= -87.0f ? 1.0f : 0.0f;
  x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  const float n = (x * kLog2e + kRound) - kRound;
  const float r = x - n * kLn2Hi - n * kLn2Lo;
  float p = 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const float scale = std::bit_cast<float>(static_cast<std::int32_t>(n + 127.0f) << 23);
  return p * scale * keep;
}

template <class T>
T exp_of(T x) {
  if constexpr (sizeof(T) == sizeof(float)) {
    return exp_fast(x);
  } else {
    return std::exp(x);
  }
}

}  // namespace weft::kernels::internal
