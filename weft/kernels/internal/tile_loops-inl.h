// The loops over register blocks that attention's tile products share (attention_tiles.cc,
// attention_tiles_bf16.cc), per Highway target (include like weft/base/simd-inl.h).

#if defined(WEFT_KERNELS_INTERNAL_TILE_LOOPS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef WEFT_KERNELS_INTERNAL_TILE_LOOPS_INL_H_
#undef WEFT_KERNELS_INTERNAL_TILE_LOOPS_INL_H_
#else
#define WEFT_KERNELS_INTERNAL_TILE_LOOPS_INL_H_
#endif

#include <algorithm>
#include <cstdint>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace weft::kernels::HWY_NAMESPACE {

// block.template operator()<NV>(x0) for the last chunk of d: NV == rest vectors.
template <int NV, class Block>
HWY_INLINE void rest_of_vectors(std::int64_t rest, std::int64_t x0, Block& block) {
  if constexpr (NV > 0) {
    if (rest == NV) {
      block.template operator()<NV>(x0);
    } else {
      rest_of_vectors<NV - 1>(rest, x0, block);
    }
  }
}

// Calls block.template operator()<NV>(x0) over d in chunks of up to kMax vectors of w lanes,
// up to the last whole vector (the caller does the rest of d in scalars).
template <int kMax, class Block>
HWY_INLINE void over_vectors(std::int64_t d, std::int64_t w, Block&& block) {
  std::int64_t x0 = 0;
  for (; x0 + kMax * w <= d; x0 += kMax * w) block.template operator()<kMax>(x0);
  rest_of_vectors<kMax - 1>((d - x0) / w, x0, block);
}

// Calls block.template operator()<R>(r) for the blocks of R rows in [begin, end), then the
// rest in at most one block each of R / 2, R / 4, ..., 1 rows.
template <int R, class Block>
HWY_INLINE void over_row_blocks(std::int64_t begin, std::int64_t end, Block&& block) {
  for (; begin + R <= end; begin += R) block.template operator()<R>(begin);
  if constexpr (R > 1) over_row_blocks<R / 2>(begin, end, block);
}

// The visible end (exclusive) of a block's columns: those of its last row, within [0, cols].
HWY_INLINE std::int64_t visible_end(std::int64_t last_row, std::int64_t diagonal,
                                    std::int64_t cols) {
  return std::clamp<std::int64_t>(last_row + diagonal + 1, 0, cols);
}

}  // namespace weft::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // WEFT_KERNELS_INTERNAL_TILE_LOOPS_INL_H_
