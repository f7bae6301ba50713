// Tiled attention in mixed precision: kernels/attention.cc's tiles and blocks with bfloat16
// products (internal/attention_tiles_bf16.h). q, k and v arrive in bfloat16; the softmax
// stays float32 and its P (and in the backward dS) is rounded for the products that read it.
// Every operand a product reads is laid out once per head in the pairs the products take:
// keys (and values, for dP) transposed in pairs, values, keys, queries and output gradients
// in pairs of rows.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "weft/base/check.h"
#include "weft/kernels/attention.h"
#include "weft/kernels/convert.h"
#include "weft/kernels/internal/attention_blocks.h"
#include "weft/kernels/internal/attention_tiles_bf16.h"
#include "weft/kernels/internal/softmax_rows.h"
#include "weft/kernels/parallel.h"

namespace weft::kernels {
namespace {

using internal::HeadView;
using internal::kBlock;
using internal::kTile;
using internal::mask_tile;
using Words = std::vector<std::uint32_t>;

std::size_t size(std::int64_t n) { return static_cast<std::size_t>(n); }
std::int64_t pairs(std::int64_t n) { return (n + 1) / 2; }

AttentionShape resolved(const AttentionShape& shape) {
  const AttentionShape s = internal::resolved(shape);
  WEFT_CHECK(s.head_dim % 2 == 0 && s.q_stride % 2 == 0 && s.kv_stride % 2 == 0);
  return s;
}

// A key/value head's keys or values transposed in pairs, [head_dim / 2, padded kv_seq] words.
void pack_keys(const AttentionShape& s, const BFloat16* k, const HeadView& at, Words& kt) {
  const std::int64_t ld = internal::panel_padded<float>(s.kv_seq);
  kt.resize(size(s.head_dim / 2 * ld));
  internal::pack_transposed_pairs(k + at.kv_offset, at.kv_stride, s.kv_seq, s.head_dim, kt.data(),
                                  ld);
}

// Rows of one head in pairs, [ceil(n / 2), head_dim] words.
void pack_rows(const BFloat16* x, std::int64_t ld, std::int64_t n, std::int64_t d, Words& out) {
  out.resize(size(pairs(n) * d));
  internal::pack_row_pairs(x, ld, n, d, out.data(), d);
}

struct ForwardScratch {
  std::vector<float> scores, acc;
  std::vector<BFloat16> p;
  Words kt, vp;
  explicit ForwardScratch(const AttentionShape& s)
      : scores(size(kTile * kBlock)), acc(size(kTile * s.head_dim)), p(scores.size()) {}
};

// One query tile [i0, i0 + rows) against the key blocks it may see, as attention.cc's
// forward_tile, P rounded for its product with the values.
void forward_tile(const AttentionShape& s, const HeadView& at, const BFloat16* q, float* out,
                  float* lse, std::int64_t i0, std::int64_t rows, ForwardScratch& buf) {
  const std::int64_t d = s.head_dim;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  float m[kTile], l[kTile];
  std::fill(m, m + rows, -std::numeric_limits<float>::infinity());
  std::fill(l, l + rows, 0.0f);
  const BFloat16* qi = q + at.q_offset + i0 * at.q_stride;
  const std::int64_t seen = std::min(s.kv_seq, i0 + rows + s.causal_offset);
  const auto* p_words = reinterpret_cast<const std::uint32_t*>(buf.p.data());
  for (std::int64_t j0 = 0; j0 < seen; j0 += kBlock) {
    const std::int64_t cols = std::min(kBlock, seen - j0), diagonal = i0 + s.causal_offset - j0;
    internal::scores_tile_bf16(qi, at.q_stride, buf.kt.data() + j0,
                               internal::panel_padded<float>(s.kv_seq), rows, cols, d, diagonal,
                               scale, buf.scores.data(), kBlock);
    mask_tile(buf.scores.data(), kBlock, rows, cols, diagonal);
    float correction[kTile];
    internal::softmax_block(buf.scores.data(), kBlock, rows, cols, m, l, correction);
    if (j0 > 0) internal::scale_rows(buf.acc.data(), d, buf.acc.data(), rows, d, correction);
    internal::round_rows(buf.scores.data(), kBlock, rows, cols, buf.p.data(), kBlock);
    internal::rows_times_tile_bf16(p_words, kBlock / 2, buf.vp.data() + j0 / 2 * d, d, rows, cols,
                                   d, diagonal, /*accumulate=*/j0 > 0, buf.acc.data(), d);
  }
  float inv[kTile];
  for (std::int64_t r = 0; r < rows; ++r) {
    inv[r] = 1.0f / l[r];
    lse[i0 + r] = m[r] + std::log(l[r]);
  }
  internal::scale_rows(out + at.o_offset + i0 * at.o_stride, at.o_stride, buf.acc.data(), rows, d,
                       inv);
}

// One thread's buffers for the backward: a block of P and of dP (float32), their rounded
// copies, and the key/value head's and query head's operands in pairs.
struct BackwardScratch {
  std::vector<float> p, dp;
  std::vector<BFloat16> ds, dout;
  Words pt, dst, kt, vt, kp, qp, dop;
  BackwardScratch()
      : p(size(kBlock * kTile)), dp(p.size()), ds(p.size()), pt(p.size() / 2), dst(pt.size()) {}
};

// attention.cc's backward_head in bfloat16 products. A query block starts at an even row, so
// that its rows pair as the packed queries and output gradients do: a row before the first
// that sees the key tile has P = 0 and adds nothing.
void backward_head(const AttentionShape& s, const HeadView& at, const BFloat16* q,
                   const float* dout, const float* lse_bh, const float* delta_bh, float* dq,
                   float* dk, float* dv, bool first_in_group, BackwardScratch& buf) {
  const std::int64_t d = s.head_dim, ldt = internal::panel_padded<float>(s.kv_seq);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  buf.dout.resize(size(s.seq * d));
  internal::round_rows(dout + at.o_offset, at.o_stride, s.seq, d, buf.dout.data(), d);
  pack_rows(q + at.q_offset, at.q_stride, s.seq, d, buf.qp);
  pack_rows(buf.dout.data(), d, s.seq, d, buf.dop);
  const auto* ds_words = reinterpret_cast<const std::uint32_t*>(buf.ds.data());
  for (std::int64_t j0 = 0; j0 < s.kv_seq; j0 += kTile) {
    const std::int64_t cols = std::min(kTile, s.kv_seq - j0);
    float* dkj = dk + at.kv_offset + j0 * at.kv_stride;
    float* dvj = dv + at.kv_offset + j0 * at.kv_stride;
    const std::int64_t first_row = std::max<std::int64_t>(0, j0 - s.causal_offset) / 2 * 2;
    for (std::int64_t i0 = first_row; i0 < s.seq; i0 += kBlock) {
      const std::int64_t rows = std::min(kBlock, s.seq - i0), diagonal = i0 + s.causal_offset - j0;
      const bool kv_accumulate = !(first_in_group && i0 == first_row);
      internal::scores_tile_bf16(q + at.q_offset + i0 * at.q_stride, at.q_stride,
                                 buf.kt.data() + j0, ldt, rows, cols, d, diagonal, scale,
                                 buf.p.data(), kTile);
      mask_tile(buf.p.data(), kTile, rows, cols, diagonal);
      internal::exp_block(buf.p.data(), kTile, rows, cols, lse_bh + i0);
      internal::round_transposed_pairs(buf.p.data(), kTile, rows, cols, buf.pt.data(), kBlock / 2);
      internal::tile_transposed_times_rows_bf16(buf.pt.data(), kBlock / 2,
                                                buf.dop.data() + i0 / 2 * d, d, rows, cols, d,
                                                diagonal, kv_accumulate, dvj, at.kv_stride);
      internal::scores_tile_bf16(buf.dout.data() + i0 * d, d, buf.vt.data() + j0, ldt, rows, cols,
                                 d, diagonal, 1.0f, buf.dp.data(), kTile);
      internal::softmax_grad_block(buf.dp.data(), buf.p.data(), kTile, rows, cols, delta_bh + i0,
                                   scale);
      internal::round_rows(buf.dp.data(), kTile, rows, cols, buf.ds.data(), kTile);
      internal::rows_times_tile_bf16(ds_words, kTile / 2, buf.kp.data() + j0 / 2 * d, d, rows, cols,
                                     d, diagonal, /*accumulate=*/j0 > 0,
                                     dq + at.q_offset + i0 * at.q_stride, at.q_stride);
      internal::round_transposed_pairs(buf.dp.data(), kTile, rows, cols, buf.dst.data(),
                                       kBlock / 2);
      internal::tile_transposed_times_rows_bf16(buf.dst.data(), kBlock / 2,
                                                buf.qp.data() + i0 / 2 * d, d, rows, cols, d,
                                                diagonal, kv_accumulate, dkj, at.kv_stride);
    }
  }
}

}  // namespace

void attention_forward(const AttentionShape& shape, const BFloat16* q, const BFloat16* k,
                       const BFloat16* v, float* out, float* lse) {
  const AttentionShape s = resolved(shape);
  const std::int64_t group = s.heads / s.kv_heads;
  parallel_for(s.batch * s.heads, 1, [&](std::int64_t first, std::int64_t end) {
    ForwardScratch buf(s);
    std::int64_t packed = -1;  // the (batch, key/value head) whose keys and values buf holds
    for (std::int64_t bh = first; bh < end; ++bh) {
      const HeadView at(s, bh / s.heads, bh % s.heads);
      if (bh / group != packed) {
        pack_keys(s, k, at, buf.kt);
        pack_rows(v + at.kv_offset, at.kv_stride, s.kv_seq, s.head_dim, buf.vp);
        packed = bh / group;
      }
      for (std::int64_t i0 = 0; i0 < s.seq; i0 += kTile) {
        forward_tile(s, at, q, out, lse + bh * s.seq, i0, std::min(kTile, s.seq - i0), buf);
      }
    }
  });
}

void attention_backward(const AttentionShape& shape, const BFloat16* q, const BFloat16* k,
                        const BFloat16* v, const BFloat16* out, const float* dout, const float* lse,
                        float* dq, float* dk, float* dv) {
  const AttentionShape s = resolved(shape);
  const std::int64_t group = s.heads / s.kv_heads, d = s.head_dim;
  // delta = rowsum(dO * O) per (batch, head, query), O widened a token's row at a time.
  std::vector<float> delta(size(s.batch * s.heads * s.seq));
  parallel_for(s.batch * s.seq, 64, [&](std::int64_t first, std::int64_t end) {
    std::vector<float> dots(size(s.heads)), o(size(s.heads * d));
    for (std::int64_t t = first; t < end; ++t) {
      to_float(out + t * s.heads * d, o.data(), s.heads * d);
      internal::row_dots(o.data(), dout + t * s.heads * d, d, s.heads, d, dots.data());
      for (std::int64_t h = 0; h < s.heads; ++h)
        delta[size((t / s.seq * s.heads + h) * s.seq + t % s.seq)] = dots[size(h)];
    }
  });
  parallel_for(s.batch * s.kv_heads, 1, [&](std::int64_t first, std::int64_t end) {
    BackwardScratch buf;
    for (std::int64_t bg = first; bg < end; ++bg) {
      const std::int64_t b = bg / s.kv_heads, first_head = (bg % s.kv_heads) * group;
      const HeadView kv(s, b, first_head);
      pack_keys(s, k, kv, buf.kt);
      pack_keys(s, v, kv, buf.vt);
      pack_rows(k + kv.kv_offset, kv.kv_stride, s.kv_seq, d, buf.kp);
      for (std::int64_t h = first_head; h < first_head + group; ++h) {
        const std::int64_t bh = b * s.heads + h;
        backward_head(s, HeadView(s, b, h), q, dout, lse + bh * s.seq, delta.data() + bh * s.seq,
                      dq, dk, dv, h == first_head, buf);
      }
    }
  });
}

}  // namespace weft::kernels
