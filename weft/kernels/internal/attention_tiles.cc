// One source for every vector target (Highway's foreach_target re-includes it per target).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "weft/kernels/internal/attention_tiles.cc"
#include "weft/kernels/internal/attention_tiles.h"

#include <algorithm>

#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "weft/kernels/internal/tile_loops-inl.h"

HWY_BEFORE_NAMESPACE();
namespace weft::kernels::HWY_NAMESPACE {
namespace {

namespace hn = hwy::HWY_NAMESPACE;

// Vectors of at most 64 bytes: two of them always divide a panel (kTilePanel, 128 bytes).
template <class T>
using Tag = hn::CappedTag<T, 64 / sizeof(T)>;

// The products other than scores: kRows rows by up to kMaxVectors vectors of d (4 x 4, or
// 4 x 3: on AVX2 the P V tile ran at 52 GFLOP/s with 4 x 2 and 64-72 with 4 x 3,
// bench_compute's BM_PvTile).
constexpr int kMaxVectors = kRegisters == 32 ? 4 : 3;

template <class D, class V>
HWY_INLINE void store_or_add(D d, V value, bool accumulate, hn::TFromD<D>* p) {
  hn::StoreU(accumulate ? hn::Add(value, hn::LoadU(d, p)) : value, d, p);
}

// Columns [0, end) of rows [r0, r0 + R) of the scores, rounded up to whole pairs of vectors:
// the panels up to the last row's visible columns.
template <class T, int R>
HWY_INLINE void scores_block(const T* a, std::int64_t lda, const T* bt, std::int64_t ldbt,
                             std::int64_t r0, std::int64_t end, std::int64_t d, T scale, T* s,
                             std::int64_t ld_s) {
  const Tag<T> dt;
  using V = hn::Vec<decltype(dt)>;
  const auto w = static_cast<std::int64_t>(hn::Lanes(dt));
  for (std::int64_t c = 0; c < end; c += 2 * w) {
    V acc[R][2];
    for (int i = 0; i < R; ++i) acc[i][0] = acc[i][1] = hn::Zero(dt);
    for (std::int64_t x = 0; x < d; ++x) {
      const V b0 = hn::LoadU(dt, bt + x * ldbt + c), b1 = hn::LoadU(dt, bt + x * ldbt + c + w);
      for (int i = 0; i < R; ++i) {
        const V av = hn::Set(dt, a[(r0 + i) * lda + x]);
        acc[i][0] = hn::MulAdd(av, b0, acc[i][0]);
        acc[i][1] = hn::MulAdd(av, b1, acc[i][1]);
      }
    }
    const V sv = hn::Set(dt, scale);
    for (int i = 0; i < R; ++i) {
      hn::StoreU(hn::Mul(acc[i][0], sv), dt, s + (r0 + i) * ld_s + c);
      hn::StoreU(hn::Mul(acc[i][1], sv), dt, s + (r0 + i) * ld_s + c + w);
    }
  }
}

// o[r0 + i][x0, x0 + NV vectors) = (+=) sum over k < end of p[r0 + i][k] * v[k][...].
template <class T, int R, int NV>
HWY_INLINE void rows_block(const T* p, std::int64_t ldp, const T* v, std::int64_t ldv,
                           std::int64_t r0, std::int64_t end, std::int64_t x0, bool accumulate,
                           T* o, std::int64_t ldo) {
  const Tag<T> dt;
  using V = hn::Vec<decltype(dt)>;
  const auto w = static_cast<std::int64_t>(hn::Lanes(dt));
  V acc[R][NV];
  for (int i = 0; i < R; ++i)
    for (int q = 0; q < NV; ++q) acc[i][q] = hn::Zero(dt);
  for (std::int64_t k = 0; k < end; ++k) {
    V vk[NV];
    for (int q = 0; q < NV; ++q) vk[q] = hn::LoadU(dt, v + k * ldv + x0 + q * w);
    for (int i = 0; i < R; ++i) {
      const V pv = hn::Set(dt, p[(r0 + i) * ldp + k]);
      for (int q = 0; q < NV; ++q) acc[i][q] = hn::MulAdd(pv, vk[q], acc[i][q]);
    }
  }
  for (int i = 0; i < R; ++i)
    for (int q = 0; q < NV; ++q)
      store_or_add(dt, acc[i][q], accumulate, o + (r0 + i) * ldo + x0 + q * w);
}

// o[k0 + i][x0, x0 + NV vectors) = (+=) sum over r in [begin, rows) of p[r][k0 + i] * b[r][...].
template <class T, int R, int NV>
HWY_INLINE void transposed_block(const T* p, std::int64_t ldp, const T* b, std::int64_t ldb,
                                 std::int64_t k0, std::int64_t begin, std::int64_t rows,
                                 std::int64_t x0, bool accumulate, T* o, std::int64_t ldo) {
  const Tag<T> dt;
  using V = hn::Vec<decltype(dt)>;
  const auto w = static_cast<std::int64_t>(hn::Lanes(dt));
  V acc[R][NV];
  for (int i = 0; i < R; ++i)
    for (int q = 0; q < NV; ++q) acc[i][q] = hn::Zero(dt);
  for (std::int64_t r = begin; r < rows; ++r) {
    V br[NV];
    for (int q = 0; q < NV; ++q) br[q] = hn::LoadU(dt, b + r * ldb + x0 + q * w);
    for (int i = 0; i < R; ++i) {
      const V pv = hn::Set(dt, p[r * ldp + k0 + i]);
      for (int q = 0; q < NV; ++q) acc[i][q] = hn::MulAdd(pv, br[q], acc[i][q]);
    }
  }
  for (int i = 0; i < R; ++i)
    for (int q = 0; q < NV; ++q)
      store_or_add(dt, acc[i][q], accumulate, o + (k0 + i) * ldo + x0 + q * w);
}

template <class T>
std::int64_t lanes() {
  return static_cast<std::int64_t>(hn::Lanes(Tag<T>()));
}

template <class T>
void transpose_scalar(const T* src, std::int64_t ld, std::int64_t j0, std::int64_t j1,
                      std::int64_t x0, std::int64_t x1, T* dst, std::int64_t ld_dst) {
  for (std::int64_t x = x0; x < x1; ++x) {
    for (std::int64_t j = j0; j < j1; ++j) dst[x * ld_dst + j] = src[j * ld + x];
  }
}

// A 4 x 4 block of floats transposed in 128-bit registers (every target but the scalar
// fallback has them): rows interleaved in pairs, then the pairs' halves concatenated; 8
// shuffles for 16 elements.
#if HWY_TARGET == HWY_SCALAR
constexpr bool kTransposeInRegisters = false;
HWY_INLINE void transpose_4x4(const float*, std::int64_t, float*, std::int64_t) {}
#else
constexpr bool kTransposeInRegisters = true;
HWY_INLINE void transpose_4x4(const float* src, std::int64_t ld, float* dst, std::int64_t ld_dst) {
  const hn::Full128<float> d4;
  const auto r0 = hn::LoadU(d4, src), r1 = hn::LoadU(d4, src + ld);
  const auto r2 = hn::LoadU(d4, src + 2 * ld), r3 = hn::LoadU(d4, src + 3 * ld);
  const auto t0 = hn::InterleaveLower(d4, r0, r1), t1 = hn::InterleaveLower(d4, r2, r3);
  const auto t2 = hn::InterleaveUpper(d4, r0, r1), t3 = hn::InterleaveUpper(d4, r2, r3);
  hn::StoreU(hn::ConcatLowerLower(d4, t1, t0), d4, dst);
  hn::StoreU(hn::ConcatUpperUpper(d4, t1, t0), d4, dst + ld_dst);
  hn::StoreU(hn::ConcatLowerLower(d4, t3, t2), d4, dst + 2 * ld_dst);
  hn::StoreU(hn::ConcatUpperUpper(d4, t3, t2), d4, dst + 3 * ld_dst);
}
#endif

// Floats go in blocks of 16 rows of src by 4 columns, four 4 x 4 transposes: each write of
// the block fills a 64-byte line of dst. The scalar loop (a column at a time) took 2.8x as
// long (bench_compute's BM_PackKeys); doubles (the float64 checks) keep it.
template <class T>
void pack_transposed(const T* src, std::int64_t ld, std::int64_t n, std::int64_t d, T* dst,
                     std::int64_t ld_dst) {
  constexpr std::int64_t kBlock = 16;
  std::int64_t j0 = 0;
  if constexpr (sizeof(T) == sizeof(float) && kTransposeInRegisters) {
    for (; j0 + kBlock <= n; j0 += kBlock) {
      std::int64_t x0 = 0;
      for (; x0 + 4 <= d; x0 += 4) {
        for (std::int64_t j = j0; j < j0 + kBlock; j += 4)
          transpose_4x4(src + j * ld + x0, ld, dst + x0 * ld_dst + j, ld_dst);
      }
      transpose_scalar(src, ld, j0, j0 + kBlock, x0, d, dst, ld_dst);
    }
  }
  for (; j0 < n; j0 += kBlock)
    transpose_scalar(src, ld, j0, std::min(n, j0 + kBlock), 0, d, dst, ld_dst);
  const std::int64_t padded = internal::panel_padded<T>(n);
  for (std::int64_t x = 0; x < d; ++x)
    std::fill(dst + x * ld_dst + n, dst + x * ld_dst + padded, T(0));
}

template <class T>
void scores_tile(const T* a, std::int64_t lda, const T* bt, std::int64_t ldbt, std::int64_t rows,
                 std::int64_t cols, std::int64_t d, std::int64_t diagonal, T scale, T* s,
                 std::int64_t ld_s) {
  over_row_blocks<kScoreRows>(0, rows, [&]<int R>(std::int64_t r) HWY_ATTR {
    scores_block<T, R>(a, lda, bt, ldbt, r, visible_end(r + R - 1, diagonal, cols), d, scale, s,
                       ld_s);
  });
}

template <class T>
void rows_times_tile(const T* p, std::int64_t ldp, const T* v, std::int64_t ldv, std::int64_t rows,
                     std::int64_t cols, std::int64_t d, std::int64_t diagonal, bool accumulate,
                     T* o, std::int64_t ldo) {
  over_row_blocks<kRows>(0, rows, [&]<int R>(std::int64_t r) HWY_ATTR {
    const std::int64_t end = visible_end(r + R - 1, diagonal, cols);
    over_vectors<kMaxVectors>(d, lanes<T>(), [&]<int NV>(std::int64_t x0) HWY_ATTR {
      rows_block<T, R, NV>(p, ldp, v, ldv, r, end, x0, accumulate, o, ldo);
    });
  });
  const std::int64_t w = lanes<T>();
  for (std::int64_t r = 0; r < rows; ++r) {  // the last d % w columns
    const std::int64_t end = visible_end(r, diagonal, cols);
    for (std::int64_t x = d - d % w; x < d; ++x) {
      T sum = 0;
      for (std::int64_t k = 0; k < end; ++k) sum += p[r * ldp + k] * v[k * ldv + x];
      o[r * ldo + x] = accumulate ? o[r * ldo + x] + sum : sum;
    }
  }
}

template <class T>
void tile_transposed_times_rows(const T* p, std::int64_t ldp, const T* b, std::int64_t ldb,
                                std::int64_t rows, std::int64_t cols, std::int64_t d,
                                std::int64_t diagonal, bool accumulate, T* o, std::int64_t ldo) {
  // Row r sees column k when r >= k - diagonal: a block of columns starts at its first's.
  auto first_row = [&](std::int64_t k) { return std::clamp<std::int64_t>(k - diagonal, 0, rows); };
  over_row_blocks<kRows>(0, cols, [&]<int R>(std::int64_t k) HWY_ATTR {
    const std::int64_t begin = first_row(k);
    over_vectors<kMaxVectors>(d, lanes<T>(), [&]<int NV>(std::int64_t x0) HWY_ATTR {
      transposed_block<T, R, NV>(p, ldp, b, ldb, k, begin, rows, x0, accumulate, o, ldo);
    });
  });
  const std::int64_t w = lanes<T>();
  for (std::int64_t k = 0; k < cols; ++k) {  // the last d % w columns of o
    for (std::int64_t x = d - d % w; x < d; ++x) {
      T sum = 0;
      for (std::int64_t r = first_row(k); r < rows; ++r) sum += p[r * ldp + k] * b[r * ldb + x];
      o[k * ldo + x] = accumulate ? o[k * ldo + x] + sum : sum;
    }
  }
}

}  // namespace

// The entry points Highway's dispatch tables take: functions, not templates.
#define WEFT_ATTENTION_TILES(T, S)                                                                \
  void PackTransposed##S(const T* src, std::int64_t ld, std::int64_t n, std::int64_t d, T* dst,   \
                         std::int64_t ld_dst) {                                                   \
    pack_transposed(src, ld, n, d, dst, ld_dst);                                                  \
  }                                                                                               \
  void ScoresTile##S(const T* a, std::int64_t lda, const T* bt, std::int64_t ldbt,                \
                     std::int64_t rows, std::int64_t cols, std::int64_t d, std::int64_t diagonal, \
                     T scale, T* s, std::int64_t ld_s) {                                          \
    scores_tile(a, lda, bt, ldbt, rows, cols, d, diagonal, scale, s, ld_s);                       \
  }                                                                                               \
  void RowsTimesTile##S(const T* p, std::int64_t ldp, const T* v, std::int64_t ldv,               \
                        std::int64_t rows, std::int64_t cols, std::int64_t d,                     \
                        std::int64_t diagonal, bool accumulate, T* o, std::int64_t ldo) {         \
    rows_times_tile(p, ldp, v, ldv, rows, cols, d, diagonal, accumulate, o, ldo);                 \
  }                                                                                               \
  void TileTransposedTimesRows##S(const T* p, std::int64_t ldp, const T* b, std::int64_t ldb,     \
                                  std::int64_t rows, std::int64_t cols, std::int64_t d,           \
                                  std::int64_t diagonal, bool accumulate, T* o,                   \
                                  std::int64_t ldo) {                                             \
    tile_transposed_times_rows(p, ldp, b, ldb, rows, cols, d, diagonal, accumulate, o, ldo);      \
  }
WEFT_ATTENTION_TILES(float, F32)
WEFT_ATTENTION_TILES(double, F64)
#undef WEFT_ATTENTION_TILES

}  // namespace weft::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "weft/base/simd.h"

namespace weft::kernels::internal {

HWY_EXPORT(PackTransposedF32);
HWY_EXPORT(PackTransposedF64);
HWY_EXPORT(ScoresTileF32);
HWY_EXPORT(ScoresTileF64);
HWY_EXPORT(RowsTimesTileF32);
HWY_EXPORT(RowsTimesTileF64);
HWY_EXPORT(TileTransposedTimesRowsF32);
HWY_EXPORT(TileTransposedTimesRowsF64);

template <class T>
void pack_transposed(const T* src, std::int64_t ld, std::int64_t n, std::int64_t d, T* dst,
                     std::int64_t ld_dst) {
  WEFT_DISPATCH_BY_TYPE(T, PackTransposed, src, ld, n, d, dst, ld_dst);
}

template <class T>
void scores_tile(const T* a, std::int64_t lda, const T* bt, std::int64_t ldbt, std::int64_t rows,
                 std::int64_t cols, std::int64_t d, std::int64_t diagonal, T scale, T* s,
                 std::int64_t ld_s) {
  WEFT_DISPATCH_BY_TYPE(T, ScoresTile, a, lda, bt, ldbt, rows, cols, d, diagonal, scale, s, ld_s);
}

template <class T>
void rows_times_tile(const T* p, std::int64_t ldp, const T* v, std::int64_t ldv, std::int64_t rows,
                     std::int64_t cols, std::int64_t d, std::int64_t diagonal, bool accumulate,
                     T* o, std::int64_t ldo) {
  WEFT_DISPATCH_BY_TYPE(T, RowsTimesTile, p, ldp, v, ldv, rows, cols, d, diagonal, accumulate, o,
                        ldo);
}

template <class T>
void tile_transposed_times_rows(const T* p, std::int64_t ldp, const T* b, std::int64_t ldb,
                                std::int64_t rows, std::int64_t cols, std::int64_t d,
                                std::int64_t diagonal, bool accumulate, T* o, std::int64_t ldo) {
  WEFT_DISPATCH_BY_TYPE(T, TileTransposedTimesRows, p, ldp, b, ldb, rows, cols, d, diagonal,
                        accumulate, o, ldo);
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

}  // namespace weft::kernels::internal
#endif  // HWY_ONCE
