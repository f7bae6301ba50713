#include "weft/kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "weft/kernels/internal/attention_blocks.h"
#include "weft/kernels/internal/attention_tiles.h"
#include "weft/kernels/internal/softmax_rows.h"
#include "weft/kernels/parallel.h"

namespace weft::kernels {
namespace {

using internal::HeadView;
using internal::kBlock;
using internal::kTile;
using internal::mask_tile;
using internal::resolved;

// One query tile [i0, i0 + rows) against the key blocks it may see, with a running softmax:
// per row the maximum m and the sum l of exp(score - m) so far, the output accumulated
// unnormalised and rescaled whenever m grows (only between blocks, so never when the whole
// causal row fits one block).
template <class T>
void forward_tile(const AttentionShape& s, const HeadView& at, const T* q, const T* kt, const T* v,
                  T* out, T* lse, std::int64_t i0, std::int64_t rows, T* scores, T* acc) {
  const std::int64_t d = s.head_dim;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(d)));
  T m[kTile], l[kTile];
  std::fill(m, m + rows, -std::numeric_limits<T>::infinity());
  std::fill(l, l + rows, T(0));
  const T* qi = q + at.q_offset + i0 * at.q_stride;
  const std::int64_t seen = std::min(s.kv_seq, i0 + rows + s.causal_offset);  // keys the tile sees
  for (std::int64_t j0 = 0; j0 < seen; j0 += kBlock) {
    const std::int64_t cols = std::min(kBlock, seen - j0), diagonal = i0 + s.causal_offset - j0;
    internal::scores_tile(qi, at.q_stride, kt + j0, internal::panel_padded<T>(s.kv_seq), rows, cols,
                          d, diagonal, scale, scores, kBlock);
    mask_tile(scores, kBlock, rows, cols, diagonal);
    T correction[kTile];
    internal::softmax_block(scores, kBlock, rows, cols, m, l, correction);
    if (j0 > 0) internal::scale_rows(acc, d, acc, rows, d, correction);
    internal::rows_times_tile(scores, kBlock, v + at.kv_offset + j0 * at.kv_stride, at.kv_stride,
                              rows, cols, d, diagonal, /*accumulate=*/j0 > 0, acc, d);
  }
  T inv[kTile];
  for (std::int64_t r = 0; r < rows; ++r) {
    inv[r] = T(1) / l[r];
    lse[i0 + r] = m[r] + std::log(l[r]);
  }
  internal::scale_rows(out + at.o_offset + i0 * at.o_stride, at.o_stride, acc, rows, d, inv);
}

// One thread's buffers for the backward: a block of P and one of dP, and the key/value head's
// keys and values transposed.
template <class T>
struct BackwardScratch {
  std::vector<T> p, dp, kt, vt;
  explicit BackwardScratch(const AttentionShape& s)
      : p(static_cast<std::size_t>(kBlock * kTile)),
        dp(p.size()),
        kt(static_cast<std::size_t>(s.head_dim * internal::panel_padded<T>(s.kv_seq))),
        vt(kt.size()) {}
};

// The backward of one (batch, query head) pair into its rows of dq, dk, dv: per key tile j,
// the query rows that may see it in blocks of up to kBlock rows. The first product into a
// gradient overwrites it instead of adding to zeros: dq's rows all meet key tile 0 first, and
// dk's and dv's rows of tile j meet the first query block that sees it first, in the group's
// first head (`first_in_group`; the group's other heads add to them). buf.kt and buf.vt hold the
// head's keys and values transposed; delta_bh is rowsum(dO * O) per query.
template <class T>
void backward_head(const AttentionShape& s, const HeadView& at, const T* q, const T* k,
                   const T* dout, const T* lse_bh, const T* delta_bh, T* dq, T* dk, T* dv,
                   bool first_in_group, BackwardScratch<T>& buf) {
  const std::int64_t d = s.head_dim, ldt = internal::panel_padded<T>(s.kv_seq);
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(d)));
  T* p = buf.p.data();
  T* dp = buf.dp.data();
  for (std::int64_t j0 = 0; j0 < s.kv_seq; j0 += kTile) {
    const std::int64_t cols = std::min(kTile, s.kv_seq - j0);
    const T* kj = k + at.kv_offset + j0 * at.kv_stride;
    T* dkj = dk + at.kv_offset + j0 * at.kv_stride;
    T* dvj = dv + at.kv_offset + j0 * at.kv_stride;
    const std::int64_t first_row = std::max<std::int64_t>(0, j0 - s.causal_offset);  // sees j0
    for (std::int64_t i0 = first_row; i0 < s.seq; i0 += kBlock) {
      const std::int64_t rows = std::min(kBlock, s.seq - i0), diagonal = i0 + s.causal_offset - j0;
      const T* qi = q + at.q_offset + i0 * at.q_stride;
      const T* doi = dout + at.o_offset + i0 * at.o_stride;
      const bool kv_accumulate = !(first_in_group && i0 == first_row);
      internal::scores_tile(qi, at.q_stride, buf.kt.data() + j0, ldt, rows, cols, d, diagonal,
                            scale, p, kTile);
      mask_tile(p, kTile, rows, cols, diagonal);
      internal::exp_block(p, kTile, rows, cols, lse_bh + i0);
      internal::tile_transposed_times_rows(p, kTile, doi, at.o_stride, rows, cols, d, diagonal,
                                           kv_accumulate, dvj, at.kv_stride);
      internal::scores_tile(doi, at.o_stride, buf.vt.data() + j0, ldt, rows, cols, d, diagonal,
                            T(1), dp, kTile);
      internal::softmax_grad_block(dp, p, kTile, rows, cols, delta_bh + i0, scale);
      internal::rows_times_tile(dp, kTile, kj, at.kv_stride, rows, cols, d, diagonal,
                                /*accumulate=*/j0 > 0, dq + at.q_offset + i0 * at.q_stride,
                                at.q_stride);
      internal::tile_transposed_times_rows(dp, kTile, qi, at.q_stride, rows, cols, d, diagonal,
                                           kv_accumulate, dkj, at.kv_stride);
    }
  }
}

}  // namespace

template <class T>
void attention_forward(const AttentionShape& shape, const T* q, const T* k, const T* v, T* out,
                       T* lse) {
  const AttentionShape s = resolved(shape);
  const std::int64_t group = s.heads / s.kv_heads;
  // (batch, head) pairs are independent: split them over the threads. Consecutive heads of a
  // group read the same keys (bh / group is their (batch, key/value head)): packed once.
  parallel_for(s.batch * s.heads, 1, [&](std::int64_t first, std::int64_t end) {
    std::vector<T> scores(static_cast<std::size_t>(kTile * kBlock));
    std::vector<T> acc(static_cast<std::size_t>(kTile * s.head_dim));
    std::vector<T> kt(static_cast<std::size_t>(s.head_dim * internal::panel_padded<T>(s.kv_seq)));
    std::int64_t packed = -1;  // the (batch, key/value head) whose keys kt holds
    for (std::int64_t bh = first; bh < end; ++bh) {
      const HeadView at(s, bh / s.heads, bh % s.heads);
      if (bh / group != packed) {
        internal::pack_transposed(k + at.kv_offset, at.kv_stride, s.kv_seq, s.head_dim, kt.data(),
                                  internal::panel_padded<T>(s.kv_seq));
        packed = bh / group;
      }
      T* lse_bh = lse + bh * s.seq;
      for (std::int64_t i0 = 0; i0 < s.seq; i0 += kTile) {
        forward_tile(s, at, q, kt.data(), v, out, lse_bh, i0, std::min(kTile, s.seq - i0),
                     scores.data(), acc.data());
      }
    }
  });
}

// Per key tile j and every block of up to 256 query rows that may see it (flash attention 2's
// backward), the scores are recomputed from lse (P = exp(S - lse)) and the gradients follow:
// dV_j += P^T dO_i, dP = dO_i V_j^T, dS = P * (dP - rowsum(dO_i * O_i)) * scale,
// dQ_i += dS K_j, dK_j += dS^T Q_i.
template <class T>
void attention_backward(const AttentionShape& shape, const T* q, const T* k, const T* v,
                        const T* out, const T* dout, const T* lse, T* dq, T* dk, T* dv) {
  const AttentionShape s = resolved(shape);
  const std::int64_t group = s.heads / s.kv_heads, d = s.head_dim;
  // delta = rowsum(dO * O) per (batch, head, query), all heads of a token's contiguous row at
  // once (head by head, over strided rows, it took about 3 % of the backward).
  std::vector<T> delta(static_cast<std::size_t>(s.batch * s.heads * s.seq));
  parallel_for(s.batch * s.seq, 64, [&](std::int64_t first, std::int64_t end) {
    std::vector<T> dots(static_cast<std::size_t>(s.heads));
    for (std::int64_t t = first; t < end; ++t) {
      const std::int64_t b = t / s.seq, i = t % s.seq;
      internal::row_dots(out + t * s.heads * d, dout + t * s.heads * d, d, s.heads, d, dots.data());
      for (std::int64_t h = 0; h < s.heads; ++h) {
        delta[static_cast<std::size_t>((b * s.heads + h) * s.seq + i)] =
            dots[static_cast<std::size_t>(h)];
      }
    }
  });
  // A key/value head and the query heads that read it write their own dk, dv and dq rows:
  // split the (batch, key/value head) pairs over the threads.
  parallel_for(s.batch * s.kv_heads, 1, [&](std::int64_t first, std::int64_t end) {
    BackwardScratch<T> scratch(s);
    for (std::int64_t bg = first; bg < end; ++bg) {
      const std::int64_t b = bg / s.kv_heads, first_head = (bg % s.kv_heads) * group;
      const HeadView kv(s, b, first_head);
      internal::pack_transposed(k + kv.kv_offset, kv.kv_stride, s.kv_seq, s.head_dim,
                                scratch.kt.data(), internal::panel_padded<T>(s.kv_seq));
      internal::pack_transposed(v + kv.kv_offset, kv.kv_stride, s.kv_seq, s.head_dim,
                                scratch.vt.data(), internal::panel_padded<T>(s.kv_seq));
      for (std::int64_t h = first_head; h < first_head + group; ++h) {
        const std::int64_t bh = b * s.heads + h;
        backward_head(s, HeadView(s, b, h), q, k, dout, lse + bh * s.seq, delta.data() + bh * s.seq,
                      dq, dk, dv, h == first_head, scratch);
      }
    }
  });
}

// Per row and head: the new lse from the two, then each side's weight exp(its lse - new lse).
template <class T>
void attention_merge(std::int64_t batch, std::int64_t seq, std::int64_t heads,
                     std::int64_t head_dim, T* out, T* lse, const T* block_out,
                     const T* block_lse) {
  parallel_for(batch * seq, 64, [&](std::int64_t first, std::int64_t end) {
    for (std::int64_t i = first; i < end; ++i) {  // a (sequence, position) row
      for (std::int64_t h = 0; h < heads; ++h) {
        const std::int64_t at = (i / seq * heads + h) * seq + i % seq;
        T& l = lse[at];
        const T b = block_lse[at];
        const T hi = std::max(l, b);
        if (hi == -std::numeric_limits<T>::infinity()) continue;  // neither block sees a key
        const T merged = hi + std::log(std::exp(l - hi) + std::exp(b - hi));
        const T keep = std::exp(l - merged), add = std::exp(b - merged);
        T* o = out + (i * heads + h) * head_dim;
        const T* bo = block_out + (i * heads + h) * head_dim;
        for (std::int64_t x = 0; x < head_dim; ++x) o[x] = o[x] * keep + bo[x] * add;
        l = merged;
      }
    }
  });
}

template void attention_forward<float>(const AttentionShape&, const float*, const float*,
                                       const float*, float*, float*);
template void attention_forward<double>(const AttentionShape&, const double*, const double*,
                                        const double*, double*, double*);
template void attention_backward<float>(const AttentionShape&, const float*, const float*,
                                        const float*, const float*, const float*, const float*,
                                        float*, float*, float*);
template void attention_backward<double>(const AttentionShape&, const double*, const double*,
                                         const double*, const double*, const double*, const double*,
                                         double*, double*, double*);

template void attention_merge<float>(std::int64_t, std::int64_t, std::int64_t, std::int64_t, float*,
                                     float*, const float*, const float*);
template void attention_merge<double>(std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                                      double*, double*, const double*, const double*);

}  // namespace weft::kernels
