// Reductions over a row in kLanes independent lanes, combined in a fixed order: they
// vectorise without the compiler reassociating anything (a single running sum is a chain of
// dependent additions it may not reorder), and the order of the additions does not depend on
// the vector width (the rounding can: an AVX-512 clone may fuse a * b + c into one FMA).
// Always inlined, so that they take the caller's vector clone (WEFT_VECTOR_CLONES).
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>

namespace weft::kernels::internal {

inline constexpr int kLanes = 16;

// The sum of term(i) for i in [0, n).
template <class T, class Term>
[[gnu::always_inline]] inline T lane_sum(std::int64_t n, Term term) {
  T lane[kLanes] = {};
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int k = 0; k < kLanes; ++k) lane[k] += term(i + k);
  }
  for (; i < n; ++i) lane[0] += term(i);
  T sum = 0;
  for (T v : lane) sum += v;
  return sum;
}

// The largest of x[0, n); -infinity when n is 0. On vectors of kLanes: GCC does not vectorise
// a running `a < b ? b : a` over float lanes (it is not a MAX_EXPR unless NaNs and signed
// zeros are ruled out), but a select between whole vectors becomes one vmaxps, with the same
// result for NaN (the select's order is the instruction's).
template <class T>
[[gnu::always_inline]] inline T lane_max(const T* x, std::int64_t n) {
  using Lanes [[gnu::vector_size(kLanes * sizeof(T))]] = T;
  Lanes lane;
  for (int k = 0; k < kLanes; ++k) lane[k] = -std::numeric_limits<T>::infinity();
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    Lanes v;
    std::memcpy(&v, x + i, sizeof v);  // x need not be aligned to the vector
    lane = lane < v ? v : lane;
  }
  T max = lane[0];
  for (int k = 1; k < kLanes; ++k) max = max < lane[k] ? lane[k] : max;
  for (; i < n; ++i) max = max < x[i] ? x[i] : max;
  return max;
}

}  // namespace weft::kernels::internal
