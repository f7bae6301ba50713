#include "weft/kernels/internal/attention_tiles.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "weft/base/simd.h"
#include "weft/kernels/internal/vec.h"

// load8() below returns a 32-byte vector (internal/vec.h says why that is harmless).
#pragma GCC diagnostic ignored "-Wpsabi"

namespace weft::kernels::internal {
namespace {

// The lambdas that walk the blocks must be inlined into the vector clones too: otherwise they
// are functions of their own, built for the baseline x86-64 (20x slower here).
#define WEFT_INLINE_LAMBDA __attribute__((always_inline))

// Rows per register block: 8 rows by the two vectors of a panel for the scores, 4 rows by up
// to 4 vectors of d for the others: 16 accumulators and the loaded vectors stay in registers
// (AVX-512 has 32), with enough independent FMAs in flight to cover their latency. Both
// divide the tiles' 64 rows: a one-row block (2 to 4 chains of dependent FMAs) runs at a
// fraction of the speed, and with blocks of 6 every tile ended in four of them.
constexpr int kScoreRows = 8;
constexpr int kRows = 4;
constexpr int kMaxVectors = 4;

template <class T>
[[gnu::always_inline]] inline void store_or_add(T* p, const Vec<T>& value, bool accumulate) {
  store<T>(p, accumulate ? value + load<T>(p) : value);
}

// Columns [0, end) of rows [r0, r0 + R) of the scores: the panels up to the last row's
// visible columns.
template <class T, int R>
[[gnu::always_inline]] inline void scores_block(const T* a, std::int64_t lda, const T* bt,
                                                std::int64_t ldbt, std::int64_t r0,
                                                std::int64_t end, std::int64_t d, T scale, T* s,
                                                std::int64_t ld_s) {
  constexpr int W = kWidth<T>;
  for (std::int64_t c = 0; c < end; c += 2 * W) {
    Vec<T> acc[R][2] = {};
    for (std::int64_t x = 0; x < d; ++x) {
      const Vec<T> b0 = load<T>(bt + x * ldbt + c), b1 = load<T>(bt + x * ldbt + c + W);
      for (int i = 0; i < R; ++i) {
        const T av = a[(r0 + i) * lda + x];
        acc[i][0] += av * b0;
        acc[i][1] += av * b1;
      }
    }
    for (int i = 0; i < R; ++i) {
      store<T>(s + (r0 + i) * ld_s + c, acc[i][0] * scale);
      store<T>(s + (r0 + i) * ld_s + c + W, acc[i][1] * scale);
    }
  }
}

// o[r0 + i][x0, x0 + NV * W) = (+=) sum over k < end of p[r0 + i][k] * v[k][...].
template <class T, int R, int NV>
[[gnu::always_inline]] inline void rows_block(const T* p, std::int64_t ldp, const T* v,
                                              std::int64_t ldv, std::int64_t r0, std::int64_t end,
                                              std::int64_t x0, bool accumulate, T* o,
                                              std::int64_t ldo) {
  constexpr int W = kWidth<T>;
  Vec<T> acc[R][NV] = {};
  for (std::int64_t k = 0; k < end; ++k) {
    Vec<T> vk[NV];
    for (int q = 0; q < NV; ++q) vk[q] = load<T>(v + k * ldv + x0 + q * W);
    for (int i = 0; i < R; ++i) {
      const T pv = p[(r0 + i) * ldp + k];
      for (int q = 0; q < NV; ++q) acc[i][q] += pv * vk[q];
    }
  }
  for (int i = 0; i < R; ++i) {
    for (int q = 0; q < NV; ++q)
      store_or_add<T>(o + (r0 + i) * ldo + x0 + q * W, acc[i][q], accumulate);
  }
}

// o[k0 + i][x0, x0 + NV * W) = (+=) sum over r in [begin, rows) of p[r][k0 + i] * b[r][...].
template <class T, int R, int NV>
[[gnu::always_inline]] inline void transposed_block(const T* p, std::int64_t ldp, const T* b,
                                                    std::int64_t ldb, std::int64_t k0,
                                                    std::int64_t begin, std::int64_t rows,
                                                    std::int64_t x0, bool accumulate, T* o,
                                                    std::int64_t ldo) {
  constexpr int W = kWidth<T>;
  Vec<T> acc[R][NV] = {};
  for (std::int64_t r = begin; r < rows; ++r) {
    Vec<T> br[NV];
    for (int q = 0; q < NV; ++q) br[q] = load<T>(b + r * ldb + x0 + q * W);
    for (int i = 0; i < R; ++i) {
      const T pv = p[r * ldp + k0 + i];
      for (int q = 0; q < NV; ++q) acc[i][q] += pv * br[q];
    }
  }
  for (int i = 0; i < R; ++i) {
    for (int q = 0; q < NV; ++q)
      store_or_add<T>(o + (k0 + i) * ldo + x0 + q * W, acc[i][q], accumulate);
  }
}

static_assert(kMaxVectors == 4, "over_vectors spells out blocks of 4, 3, 2 and 1 vectors");

// Calls block.template operator()<NV>(x0) over d in chunks of up to kMaxVectors vectors, up
// to the last whole vector (the caller does the rest of d in scalars).
template <class T, class Block>
[[gnu::always_inline]] inline void over_vectors(std::int64_t d, Block&& block) {
  constexpr int W = kWidth<T>;
  std::int64_t x0 = 0;
  for (; x0 + kMaxVectors * W <= d; x0 += kMaxVectors * W) block.template operator()<4>(x0);
  switch ((d - x0) / W) {
    case 3:
      block.template operator()<3>(x0);
      break;
    case 2:
      block.template operator()<2>(x0);
      break;
    case 1:
      block.template operator()<1>(x0);
      break;
    default:
      break;
  }
}

// Calls block.template operator()<R>(r) for the blocks of R rows in [begin, end), then the
// rest in at most one block each of R / 2, R / 4, ..., 1 rows.
template <int R, class Block>
[[gnu::always_inline]] inline void over_row_blocks(std::int64_t begin, std::int64_t end,
                                                   Block&& block) {
  for (; begin + R <= end; begin += R) block.template operator()<R>(begin);
  if constexpr (R > 1) over_row_blocks<R / 2>(begin, end, block);
}

// The visible end (exclusive) of a block's columns: those of its last row, within [0, cols].
std::int64_t visible_end(std::int64_t last_row, std::int64_t diagonal, std::int64_t cols) {
  return std::clamp<std::int64_t>(last_row + diagonal + 1, 0, cols);
}

template <class T>
void transpose_scalar(const T* src, std::int64_t ld, std::int64_t j0, std::int64_t j1,
                      std::int64_t x0, std::int64_t x1, T* dst, std::int64_t ld_dst) {
  for (std::int64_t x = x0; x < x1; ++x) {
    for (std::int64_t j = j0; j < j1; ++j) dst[x * ld_dst + j] = src[j * ld + x];
  }
}

// An 8 x 8 block of floats transposed in registers: pairs of rows interleaved, then pairs of
// pairs, then halves; 24 two-input shuffles for 64 elements.
using Vec8f [[gnu::vector_size(32)]] = float;

[[gnu::always_inline]] inline Vec8f load8(const float* p) {
  Vec8f v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

[[gnu::always_inline]] inline void transpose_8x8(const float* src, std::int64_t ld, float* dst,
                                                 std::int64_t ld_dst) {
  Vec8f r[8], t[8];
  for (int i = 0; i < 8; ++i) r[i] = load8(src + i * ld);
  for (int i = 0; i < 8; i += 2) {
    t[i] = __builtin_shufflevector(r[i], r[i + 1], 0, 8, 1, 9, 4, 12, 5, 13);
    t[i + 1] = __builtin_shufflevector(r[i], r[i + 1], 2, 10, 3, 11, 6, 14, 7, 15);
  }
  for (int h = 0; h < 8; h += 4) {
    r[h] = __builtin_shufflevector(t[h], t[h + 2], 0, 1, 8, 9, 4, 5, 12, 13);
    r[h + 1] = __builtin_shufflevector(t[h], t[h + 2], 2, 3, 10, 11, 6, 7, 14, 15);
    r[h + 2] = __builtin_shufflevector(t[h + 1], t[h + 3], 0, 1, 8, 9, 4, 5, 12, 13);
    r[h + 3] = __builtin_shufflevector(t[h + 1], t[h + 3], 2, 3, 10, 11, 6, 7, 14, 15);
  }
  // r[h + c] holds column c (low half) and column c + 4 (high half) of rows h to h + 3.
  for (int c = 0; c < 4; ++c) {
    const Vec8f low = __builtin_shufflevector(r[c], r[c + 4], 0, 1, 2, 3, 8, 9, 10, 11);
    const Vec8f high = __builtin_shufflevector(r[c], r[c + 4], 4, 5, 6, 7, 12, 13, 14, 15);
    std::memcpy(dst + c * ld_dst, &low, sizeof low);
    std::memcpy(dst + (c + 4) * ld_dst, &high, sizeof high);
  }
}

}  // namespace

// Floats go in blocks of 16 rows of src by 8 columns, two 8 x 8 transposes: each write fills
// a 64-byte line of dst. The scalar loop (16 rows, a column at a time) took 2.8x as long, 9.1
// us per 256 x 64 head (bench_compute's BM_PackKeys), 8 % of attention; doubles (the float64
// checks) keep it.
template <class T>
WEFT_VECTOR_CLONES void pack_transposed(const T* src, std::int64_t ld, std::int64_t n,
                                        std::int64_t d, T* dst, std::int64_t ld_dst) {
  constexpr std::int64_t kBlock = 16;
  std::int64_t j0 = 0;
  if constexpr (std::is_same_v<T, float>) {
    for (; j0 + kBlock <= n; j0 += kBlock) {
      std::int64_t x0 = 0;
      for (; x0 + 8 <= d; x0 += 8) {
        transpose_8x8(src + j0 * ld + x0, ld, dst + x0 * ld_dst + j0, ld_dst);
        transpose_8x8(src + (j0 + 8) * ld + x0, ld, dst + x0 * ld_dst + j0 + 8, ld_dst);
      }
      transpose_scalar(src, ld, j0, j0 + kBlock, x0, d, dst, ld_dst);
    }
  }
  for (; j0 < n; j0 += kBlock)
    transpose_scalar(src, ld, j0, std::min(n, j0 + kBlock), 0, d, dst, ld_dst);
  const std::int64_t padded = panel_padded<T>(n);
  for (std::int64_t x = 0; x < d; ++x)
    std::fill(dst + x * ld_dst + n, dst + x * ld_dst + padded, T(0));
}

template <class T>
WEFT_VECTOR_CLONES void scores_tile(const T* a, std::int64_t lda, const T* bt, std::int64_t ldbt,
                                    std::int64_t rows, std::int64_t cols, std::int64_t d,
                                    std::int64_t diagonal, T scale, T* s, std::int64_t ld_s) {
  over_row_blocks<kScoreRows>(0, rows, [&]<int R>(std::int64_t r) WEFT_INLINE_LAMBDA {
    scores_block<T, R>(a, lda, bt, ldbt, r, visible_end(r + R - 1, diagonal, cols), d, scale, s,
                       ld_s);
  });
}

template <class T>
WEFT_VECTOR_CLONES void rows_times_tile(const T* p, std::int64_t ldp, const T* v, std::int64_t ldv,
                                        std::int64_t rows, std::int64_t cols, std::int64_t d,
                                        std::int64_t diagonal, bool accumulate, T* o,
                                        std::int64_t ldo) {
  over_row_blocks<kRows>(0, rows, [&]<int R>(std::int64_t r) WEFT_INLINE_LAMBDA {
    const std::int64_t end = visible_end(r + R - 1, diagonal, cols);
    over_vectors<T>(d, [&]<int NV>(std::int64_t x0) WEFT_INLINE_LAMBDA {
      rows_block<T, R, NV>(p, ldp, v, ldv, r, end, x0, accumulate, o, ldo);
    });
  });
  const std::int64_t vectors_end = d - d % kWidth<T>;
  for (std::int64_t r = 0; r < rows; ++r) {  // the last d % W columns, when d is not whole vectors
    const std::int64_t end = visible_end(r, diagonal, cols);
    for (std::int64_t x = vectors_end; x < d; ++x) {
      T sum = 0;
      for (std::int64_t k = 0; k < end; ++k) sum += p[r * ldp + k] * v[k * ldv + x];
      o[r * ldo + x] = accumulate ? o[r * ldo + x] + sum : sum;
    }
  }
}

template <class T>
WEFT_VECTOR_CLONES void tile_transposed_times_rows(const T* p, std::int64_t ldp, const T* b,
                                                   std::int64_t ldb, std::int64_t rows,
                                                   std::int64_t cols, std::int64_t d,
                                                   std::int64_t diagonal, bool accumulate, T* o,
                                                   std::int64_t ldo) {
  // Row r sees column k when r >= k - diagonal: a block of columns starts at its first's.
  auto first_row = [&](std::int64_t k) { return std::clamp<std::int64_t>(k - diagonal, 0, rows); };
  over_row_blocks<kRows>(0, cols, [&]<int R>(std::int64_t k) WEFT_INLINE_LAMBDA {
    const std::int64_t begin = first_row(k);
    over_vectors<T>(d, [&]<int NV>(std::int64_t x0) WEFT_INLINE_LAMBDA {
      transposed_block<T, R, NV>(p, ldp, b, ldb, k, begin, rows, x0, accumulate, o, ldo);
    });
  });
  const std::int64_t vectors_end = d - d % kWidth<T>;
  for (std::int64_t k = 0; k < cols; ++k) {  // the last d % W columns of o
    for (std::int64_t x = vectors_end; x < d; ++x) {
      T sum = 0;
      for (std::int64_t r = first_row(k); r < rows; ++r) sum += p[r * ldp + k] * b[r * ldb + x];
      o[k * ldo + x] = accumulate ? o[k * ldo + x] + sum : sum;
    }
  }
}

#define WEFT_ATTENTION_TILES(T)                                                                  \
  template void pack_transposed<T>(const T*, std::int64_t, std::int64_t, std::int64_t, T*,       \
                                   std::int64_t);                                                \
  template void scores_tile<T>(const T*, std::int64_t, const T*, std::int64_t, std::int64_t,     \
                               std::int64_t, std::int64_t, std::int64_t, T, T*, std::int64_t);   \
  template void rows_times_tile<T>(const T*, std::int64_t, const T*, std::int64_t, std::int64_t, \
                                   std::int64_t, std::int64_t, std::int64_t, bool, T*,           \
                                   std::int64_t);                                                \
  template void tile_transposed_times_rows<T>(const T*, std::int64_t, const T*, std::int64_t,    \
                                              std::int64_t, std::int64_t, std::int64_t,          \
                                              std::int64_t, bool, T*, std::int64_t);
WEFT_ATTENTION_TILES(float)
WEFT_ATTENTION_TILES(double)
#undef WEFT_ATTENTION_TILES
#undef WEFT_INLINE_LAMBDA

}  // namespace weft::kernels::internal
