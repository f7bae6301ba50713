// What the float and the bfloat16 attention kernels (kernels/attention.cc, attention_bf16.cc)
// share: their tile and block sizes, the shape checks, a head's strided views and the causal
// mask.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>

#include "weft/base/check.h"
#include "weft/kernels/attention.h"
#include "weft/kernels/internal/attention_tiles.h"

namespace weft::kernels::internal {

// Tiles of 64 queries (forward) or 64 keys (backward), each against blocks of up to 256 of
// the other side: a causal row of up to 256 keys needs no rescaling of the running softmax,
// while a block's scores (64 KiB in float) stay in L2. Memory stays linear in the sequence:
// no seq x seq matrix, and the forward's running softmax carries across key blocks when the
// sequence is longer than one. The tiles' products are internal/attention_tiles.h's (or
// attention_tiles_bf16.h's), which skip the masked pairs; each head's keys (and values, for
// the backward) are transposed once into a [head_dim, seq] panel for them.
inline constexpr std::int64_t kTile = 64;
inline constexpr std::int64_t kBlock = 256;

// The shape with its defaults filled in (strides packed, kv_seq = seq), checked.
inline AttentionShape resolved(AttentionShape s) {
  WEFT_CHECK_GT(s.kv_heads, 0);
  WEFT_CHECK_EQ(s.heads % s.kv_heads, 0);
  if (s.q_stride == 0) s.q_stride = s.heads * s.head_dim;
  if (s.kv_stride == 0) s.kv_stride = s.kv_heads * s.head_dim;
  if (s.kv_seq == 0) s.kv_seq = s.seq;
  // Every query sees key 0 (the first products overwrite dq), and every key is seen by some
  // query (the first products overwrite dk and dv).
  WEFT_CHECK_GE(s.causal_offset, 0);
  WEFT_CHECK_LE(s.kv_seq, s.seq + s.causal_offset);
  return s;
}

// Tiles and blocks start on panel boundaries of the transposed keys and values, and a block's
// scores are written in whole panels.
static_assert(kTile % kTilePanel<float> == 0 && kBlock % kTilePanel<float> == 0);
static_assert(kTile % kTilePanel<double> == 0 && kBlock % kTilePanel<double> == 0);

// The strided views of one (batch, query head) pair: q (and dq) rows q_stride apart, k and v
// (and dk, dv) rows kv_stride apart, out and dout rows o_stride apart.
struct HeadView {
  std::int64_t q_offset, kv_offset, o_offset, q_stride, kv_stride, o_stride;
  HeadView(const AttentionShape& s, std::int64_t b, std::int64_t h)  // s resolved()
      : q_stride(s.q_stride), kv_stride(s.kv_stride), o_stride(s.heads * s.head_dim) {
    q_offset = b * s.seq * q_stride + h * s.head_dim;
    kv_offset = b * s.kv_seq * kv_stride + (h / (s.heads / s.kv_heads)) * s.head_dim;
    o_offset = b * s.seq * o_stride + h * s.head_dim;
  }
};

// Causal mask of a block of scores (rows ld apart), with the tiles' convention
// (internal/attention_tiles.h): row r sees column c when c <= r + diagonal; the others
// become -inf. Blocks that lie wholly below the diagonal are left as they are.
template <class T>
void mask_tile(T* scores, std::int64_t ld, std::int64_t rows, std::int64_t cols,
               std::int64_t diagonal) {
  for (std::int64_t r = 0; r < rows && r + diagonal + 1 < cols; ++r) {
    for (std::int64_t c = std::max<std::int64_t>(0, r + diagonal + 1); c < cols; ++c) {
      scores[r * ld + c] = -std::numeric_limits<T>::infinity();
    }
  }
}

}  // namespace weft::kernels::internal
