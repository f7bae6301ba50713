// The products of tiled attention, register-blocked and causal: a tile computes only the
// rows' visible (query, key) pairs, rounded out to its register blocks, where OpenBLAS would
// pack both operands of every 64-wide product and compute the masked half of the diagonal
// tiles too (docs/TRAINING.md measures both). Row-major throughout; one Highway source for
// every vector target, register blocks sized to the target's registers (weft/base/simd.h).
//
// Causality is one number, `diagonal`: row r of the tile sees column c when c <= r + diagonal
// (a query tile starting at i0 against keys starting at j0 has diagonal i0 - j0). Each product
// works on the visible pairs plus the rest of their register blocks:
// - scores_tile leaves the other pairs of s as they were: the caller masks every invisible
//   pair (to -inf before the softmax's exp) before reading s;
// - rows_times_tile and tile_transposed_times_rows read some invisible pairs of p, those in
//   the register blocks of visible ones: p must be exactly 0 there (a softmax of masked
//   scores is).
#pragma once

#include <cstdint>

namespace weft::kernels::internal {

// Columns of a packed transposed operand are padded to a multiple of this (128 bytes: two
// vectors of the widest target, four of AVX2's), and scores_tile writes whole panels of them.
template <class T>
constexpr std::int64_t kTilePanel = 2 * 64 / static_cast<std::int64_t>(sizeof(T));

// n rounded up to whole panels.
template <class T>
constexpr std::int64_t panel_padded(std::int64_t n) {
  return (n + kTilePanel<T> - 1) / kTilePanel<T> * kTilePanel<T>;
}

// dst[x][j] = src[j * ld + x] for x < d, j < n, and 0 for n <= j < panel_padded(n): the
// transposed rows [n, d] that scores_tile reads (dst rows ld_dst >= panel_padded(n) apart).
template <class T>
void pack_transposed(const T* src, std::int64_t ld, std::int64_t n, std::int64_t d, T* dst,
                     std::int64_t ld_dst);

// s[r][c] = scale * sum over x < d of a[r][x] * bt[x][c], for r < rows and the visible c <
// cols, written in whole panels (up to panel_padded(cols) <= ld_s). bt points at a panel
// boundary of pack_transposed's output, rows ldbt apart.
template <class T>
void scores_tile(const T* a, std::int64_t lda, const T* bt, std::int64_t ldbt, std::int64_t rows,
                 std::int64_t cols, std::int64_t d, std::int64_t diagonal, T scale, T* s,
                 std::int64_t ld_s);

// o[r][0:d] = (or += when accumulate) sum over the visible k < cols of p[r][k] * v[k][0:d].
template <class T>
void rows_times_tile(const T* p, std::int64_t ldp, const T* v, std::int64_t ldv, std::int64_t rows,
                     std::int64_t cols, std::int64_t d, std::int64_t diagonal, bool accumulate,
                     T* o, std::int64_t ldo);

// o[k][0:d] = (or += when accumulate) sum over the rows r < rows that see column k of
// p[r][k] * b[r][0:d], for k < cols: the transposed product, p^T b.
template <class T>
void tile_transposed_times_rows(const T* p, std::int64_t ldp, const T* b, std::int64_t ldb,
                                std::int64_t rows, std::int64_t cols, std::int64_t d,
                                std::int64_t diagonal, bool accumulate, T* o, std::int64_t ldo);

}  // namespace weft::kernels::internal
