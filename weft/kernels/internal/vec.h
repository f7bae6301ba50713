// 64-byte vectors (one AVX-512 register, two AVX2 ones) for the kernels' register-blocked
// loops, with loads and stores through memcpy: rows need not be aligned to them. Meant for
// always-inlined code inside the vector clones (WEFT_VECTOR_CLONES): no call passes or returns
// one, so GCC's -Wpsabi note that such a call's ABI depends on AVX-512 does not apply; a
// source that defines its own functions on them silences it too.
#pragma once

#include <cstring>

namespace weft::kernels::internal {

template <class T>
using Vec [[gnu::vector_size(64)]] = T;

template <class T>
constexpr int kWidth = 64 / static_cast<int>(sizeof(T));

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"

template <class T>
[[gnu::always_inline]] inline Vec<T> load(const T* p) {
  Vec<T> v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

#pragma GCC diagnostic pop

template <class T>
[[gnu::always_inline]] inline void store(T* p, const Vec<T>& v) {
  std::memcpy(p, &v, sizeof v);
}

}  // namespace weft::kernels::internal
