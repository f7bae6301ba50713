// One source for every vector target (Highway's foreach_target re-includes it per target).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "weft/dist/shm/vector_copy.cc"
#include "weft/dist/shm/vector_copy.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "hwy/cache_control.h"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

// GCC must not turn the loop back into a memcpy call.
#if defined(__GNUC__) && !defined(__clang__)
#define WEFT_NO_MEMCPY_IDIOM __attribute__((optimize("no-tree-loop-distribute-patterns")))
#else
#define WEFT_NO_MEMCPY_IDIOM
#endif

HWY_BEFORE_NAMESPACE();
namespace weft::dist::shm::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Two vectors a round. Streaming: ordinary stores up to dst's first vector-aligned byte (Stream
// needs alignment), and a fence after the streaming ones, which orders them before the caller
// publishes the data.
template <bool kStream>
WEFT_NO_MEMCPY_IDIOM void CopyVectors(std::byte* dst, const std::byte* src, std::size_t bytes) {
  const hn::ScalableTag<std::uint8_t> d;
  const std::size_t n = hn::Lanes(d);
  auto* out = reinterpret_cast<std::uint8_t*>(dst);
  const auto* in = reinterpret_cast<const std::uint8_t*>(src);
  std::size_t i = 0;
  if constexpr (kStream) {
    i = std::min(bytes, (n - reinterpret_cast<std::uintptr_t>(out) % n) % n);
    if (i > 0) std::memcpy(out, in, i);
  }
  for (; i + 2 * n <= bytes; i += 2 * n) {
    const auto a = hn::LoadU(d, in + i), b = hn::LoadU(d, in + i + n);
    if constexpr (kStream) {
      hn::Stream(a, d, out + i);
      hn::Stream(b, d, out + i + n);
    } else {
      hn::StoreU(a, d, out + i);
      hn::StoreU(b, d, out + i + n);
    }
  }
  if (i < bytes) std::memcpy(out + i, in + i, bytes - i);
  if constexpr (kStream) hwy::FlushStream();
}

void VectorCopy(std::byte* dst, const std::byte* src, std::size_t bytes) {
  CopyVectors<false>(dst, src, bytes);
}

void StreamCopy(std::byte* dst, const std::byte* src, std::size_t bytes) {
  CopyVectors<true>(dst, src, bytes);
}

}  // namespace weft::dist::shm::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace weft::dist::shm {

HWY_EXPORT(VectorCopy);

void vector_copy(std::byte* dst, const std::byte* src, std::size_t bytes) {
  HWY_DYNAMIC_DISPATCH(VectorCopy)(dst, src, bytes);
}

HWY_EXPORT(StreamCopy);

void stream_copy(std::byte* dst, const std::byte* src, std::size_t bytes) {
  HWY_DYNAMIC_DISPATCH(StreamCopy)(dst, src, bytes);
}

}  // namespace weft::dist::shm
#endif  // HWY_ONCE
