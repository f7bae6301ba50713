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

// Register blocks sized to the target's vector registers (16 on SSE4 and AVX2, 32 on AVX-512
// and NEON), so that the accumulators and the loaded vectors stay in registers with enough
// independent FMAs in flight to cover their latency. Each divides the tiles' 64 rows: a
// one-row block (2 to 4 chains of dependent FMAs) runs at a fraction of the speed. Scores:
// kScoreRows rows by two vectors (8 x 2 accumulators with 32 registers, 4 x 2 with 16); the
// other products kRows rows by as many vectors of d as each source's kMaxVectors says.
#if HWY_ARCH_X86 && HWY_TARGET > HWY_AVX3  // AVX2, SSE4, EMU128
inline constexpr int kRegisters = 16;
#else
inline constexpr int kRegisters = 32;
#endif
inline constexpr int kScoreRows = kRegisters == 32 ? 8 : 4;
inline constexpr int kRows = 4;

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
