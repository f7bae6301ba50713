// The products of tiled attention in mixed precision: bfloat16 operands, float32 accumulation
// and results, computed as AVX512_BF16's dot-product instruction (VDPBF16PS) computes them.
// Operands travel in pairs: a word (std::uint32_t) holds two bfloat16 elements that are
// consecutive in the sum, the first in its low half. Each word of a product adds
// a.high * b.high and then a.low * b.low to the float32 accumulator, one rounding each (a
// product of two bfloat16 is exact in float32, so every target gives the same bits: with the
// instruction on AVX-512 CPUs that have it, with two multiply-adds elsewhere; the
// instruction's flushing of subnormals is the one difference, and the sums attention makes
// are normal numbers).
//
// Causality as in attention_tiles.h: row r of a tile sees column c when c <= r + diagonal; a
// product reads invisible pairs only inside the words and register blocks of visible ones,
// where the operand must be exactly 0 (a rounded softmax of masked scores is).
#pragma once

#include <cstdint>

#include "weft/base/dtype.h"

namespace weft::kernels::internal {

// Whether the products run on the CPU's VDPBF16PS: an x86-64 CPU with AVX512_BF16 while the
// kernels' Highway target is AVX-512 (WEFT_SIMD_TARGET=AVX2 turns it off).
bool bf16_dot_instruction();

// dst words [ceil(n / 2)][d], rows ld_dst words apart: word (j, x) pairs src[2j][x] with
// src[2j + 1][x] (0 past row n - 1). src rows ld elements apart. The right-hand operand of
// pairs_times_rows: values, keys, queries and output gradients in pairs of rows.
void pack_row_pairs(const BFloat16* src, std::int64_t ld, std::int64_t n, std::int64_t d,
                    std::uint32_t* dst, std::int64_t ld_dst);

// dst words [d / 2][panel_padded<float>(n)], rows ld_dst words apart: word (x, j) is
// src[j][2x .. 2x + 1], 0 for n <= j: keys (or values) transposed in pairs for
// scores_tile_bf16. d, ld and src's offset are even.
void pack_transposed_pairs(const BFloat16* src, std::int64_t ld, std::int64_t n, std::int64_t d,
                           std::uint32_t* dst, std::int64_t ld_dst);

// dst[r][c] = src[r][c] rounded to nearest even for c < cols, and 0 up to an even column
// count: a block of P or dS as the left-hand operand of pairs_times_rows (rows' pairs along
// the keys). ld_dst is even.
void round_rows(const float* src, std::int64_t ld, std::int64_t rows, std::int64_t cols,
                BFloat16* dst, std::int64_t ld_dst);

// dst words [cols][ceil(rows / 2)], rows ld_dst words apart: word (c, j) pairs src[2j][c] and
// src[2j + 1][c] rounded (0 past row rows - 1): P^T or dS^T, pairs along the queries. Words up
// to panel_padded<float>(ceil(rows / 2)) <= ld_dst are written, 0 past the last pair.
void round_transposed_pairs(const float* src, std::int64_t ld, std::int64_t rows, std::int64_t cols,
                            std::uint32_t* dst, std::int64_t ld_dst);

// s[r][c] = scale * sum over x < d of a[r][x] * b[c][x] for r < rows and the visible c < cols,
// written in whole panels (kTilePanel<float> columns, up to panel_padded<float>(cols) <= ld_s)
// as scores_tile writes them. a's rows lda elements apart (d, lda and a's offset even); bt is
// pack_transposed_pairs' output from a panel boundary, rows ldbt words apart.
void scores_tile_bf16(const BFloat16* a, std::int64_t lda, const std::uint32_t* bt,
                      std::int64_t ldbt, std::int64_t rows, std::int64_t cols, std::int64_t d,
                      std::int64_t diagonal, float scale, float* s, std::int64_t ld_s);

// o[r][0:d] = (or += when accumulate) sum over the visible k < cols of p[r][k] * v[k][0:d]:
// p's rows as words (round_rows' output, ldp words apart), v as pack_row_pairs' words (ldv
// apart), o rows ldo floats apart.
void rows_times_tile_bf16(const std::uint32_t* p, std::int64_t ldp, const std::uint32_t* v,
                          std::int64_t ldv, std::int64_t rows, std::int64_t cols, std::int64_t d,
                          std::int64_t diagonal, bool accumulate, float* o, std::int64_t ldo);

// o[k][0:d] = (or += when accumulate) sum over the rows r < rows that see column k of
// p[r][k] * b[r][0:d], for k < cols: p^T b with pt = round_transposed_pairs(p) (ldpt words
// apart) and b as pack_row_pairs' words (ldb apart).
void tile_transposed_times_rows_bf16(const std::uint32_t* pt, std::int64_t ldpt,
                                     const std::uint32_t* b, std::int64_t ldb, std::int64_t rows,
                                     std::int64_t cols, std::int64_t d, std::int64_t diagonal,
                                     bool accumulate, float* o, std::int64_t ldo);

}  // namespace weft::kernels::internal
