#include "weft/kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "weft/base/check.h"
#include "weft/kernels/blas.h"
#include "weft/kernels/internal/fast_exp.h"
#include "weft/kernels/parallel.h"

namespace weft::kernels {
namespace {

// Tiles of 64 queries by 64 keys: the score tile (16 KiB in float) and the tiles of q, k, v
// and the accumulator stay in L1/L2 while the products run through OpenBLAS.
constexpr std::int64_t kTile = 64;

void check_shape(const AttentionShape& s) {
  WEFT_CHECK_GT(s.kv_heads, 0);
  WEFT_CHECK_EQ(s.heads % s.kv_heads, 0);
}

// The strided views of one (batch, query head) pair: q (and dq) rows q_stride apart, k and v
// (and dk, dv) rows kv_stride apart, out and dout rows o_stride apart.
template <class T>
struct HeadView {
  std::int64_t q_offset, kv_offset, o_offset, q_stride, kv_stride, o_stride;
  HeadView(const AttentionShape& s, std::int64_t b, std::int64_t h)
      : q_stride(s.qkv_stride ? s.qkv_stride : s.heads * s.head_dim),
        kv_stride(s.qkv_stride ? s.qkv_stride : s.kv_heads * s.head_dim),
        o_stride(s.heads * s.head_dim) {
    q_offset = b * s.seq * q_stride + h * s.head_dim;
    kv_offset = b * s.seq * kv_stride + (h / (s.heads / s.kv_heads)) * s.head_dim;
    o_offset = b * s.seq * o_stride + h * s.head_dim;
  }
};

// Causal mask of the tile whose first query is i0 and first key j0: scores of keys after
// their query become -inf.
template <class T>
void mask_tile(T* scores, std::int64_t rows, std::int64_t cols, std::int64_t i0, std::int64_t j0) {
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = std::max<std::int64_t>(0, i0 + r - j0 + 1); c < cols; ++c) {
      scores[r * kTile + c] = -std::numeric_limits<T>::infinity();
    }
  }
}

// One query tile [i0, i0 + rows) against the key tiles it may see, with a running softmax:
// per row the maximum m and the sum l of exp(score - m) so far, the output accumulated
// unnormalised and rescaled whenever m grows.
template <class T>
void forward_tile(const AttentionShape& s, const HeadView<T>& at, const T* q, const T* k,
                  const T* v, T* out, T* lse, std::int64_t i0, std::int64_t rows, T* scores, T* acc) {
  const std::int64_t d = s.head_dim;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(d)));
  T m[kTile], l[kTile];
  std::fill(m, m + rows, -std::numeric_limits<T>::infinity());
  std::fill(l, l + rows, T(0));
  std::fill(acc, acc + rows * d, T(0));
  const T* qi = q + at.q_offset + i0 * at.q_stride;
  for (std::int64_t j0 = 0; j0 < i0 + rows; j0 += kTile) {
    const std::int64_t cols = std::min(kTile, i0 + rows - j0);
    const T* kj = k + at.kv_offset + j0 * at.kv_stride;
    gemm<T>(false, true, rows, cols, d, scale, qi, at.q_stride, kj, at.kv_stride, T(0), scores, kTile);
    if (j0 + cols > i0) mask_tile(scores, rows, cols, i0, j0);
    for (std::int64_t r = 0; r < rows; ++r) {
      T* row = scores + r * kTile;
      const T m_new = std::max(m[r], *std::max_element(row, row + cols));
      const T correction = internal::exp_of(m[r] - m_new);
      for (std::int64_t c = 0; c < cols; ++c) row[c] = internal::exp_of(row[c] - m_new);
      T sum = 0;
      for (std::int64_t c = 0; c < cols; ++c) sum += row[c];
      l[r] = l[r] * correction + sum;
      m[r] = m_new;
      if (correction != T(1)) {
        for (std::int64_t x = 0; x < d; ++x) acc[r * d + x] *= correction;
      }
    }
    gemm<T>(false, false, rows, d, cols, T(1), scores, kTile, v + at.kv_offset + j0 * at.kv_stride,
            at.kv_stride, T(1), acc, d);
  }
  for (std::int64_t r = 0; r < rows; ++r) {
    T* o = out + at.o_offset + (i0 + r) * at.o_stride;
    const T inv = T(1) / l[r];
    for (std::int64_t x = 0; x < d; ++x) o[x] = acc[r * d + x] * inv;
    lse[i0 + r] = m[r] + std::log(l[r]);
  }
}

// The backward of one (batch, query head) pair, accumulating into its rows of dq, dk, dv.
template <class T>
void backward_head(const AttentionShape& s, const HeadView<T>& at, const T* q, const T* k, const T* v,
                   const T* out, const T* dout, const T* lse_bh, T* dq, T* dk, T* dv, T scale,
                   T* delta, T* p, T* dp) {
  const std::int64_t d = s.head_dim;
  for (std::int64_t i = 0; i < s.seq; ++i) {
    const T* o = out + at.o_offset + i * at.o_stride;
    const T* g = dout + at.o_offset + i * at.o_stride;
    T sum = 0;
    for (std::int64_t x = 0; x < d; ++x) sum += o[x] * g[x];
    delta[i] = sum;
  }
  for (std::int64_t j0 = 0; j0 < s.seq; j0 += kTile) {
    const std::int64_t cols = std::min(kTile, s.seq - j0);
    const T* kj = k + at.kv_offset + j0 * at.kv_stride;
    const T* vj = v + at.kv_offset + j0 * at.kv_stride;
    T* dkj = dk + at.kv_offset + j0 * at.kv_stride;
    T* dvj = dv + at.kv_offset + j0 * at.kv_stride;
    for (std::int64_t i0 = j0 / kTile * kTile; i0 < s.seq; i0 += kTile) {
      const std::int64_t rows = std::min(kTile, s.seq - i0);
      const T* qi = q + at.q_offset + i0 * at.q_stride;
      const T* doi = dout + at.o_offset + i0 * at.o_stride;
      gemm<T>(false, true, rows, cols, d, scale, qi, at.q_stride, kj, at.kv_stride, T(0), p, kTile);
      if (j0 + cols > i0) mask_tile(p, rows, cols, i0, j0);
      for (std::int64_t r = 0; r < rows; ++r) {
        T* pr = p + r * kTile;
        const T shift = lse_bh[i0 + r];
        for (std::int64_t c = 0; c < cols; ++c) pr[c] = internal::exp_of(pr[c] - shift);
      }
      gemm<T>(true, false, cols, d, rows, T(1), p, kTile, doi, at.o_stride, T(1), dvj, at.kv_stride);
      gemm<T>(false, true, rows, cols, d, T(1), doi, at.o_stride, vj, at.kv_stride, T(0), dp, kTile);
      for (std::int64_t r = 0; r < rows; ++r) {
        const T dr = delta[i0 + r];
        for (std::int64_t c = 0; c < cols; ++c) dp[r * kTile + c] = p[r * kTile + c] * (dp[r * kTile + c] - dr) * scale;
      }
      gemm<T>(false, false, rows, d, cols, T(1), dp, kTile, kj, at.kv_stride, T(1),
              dq + at.q_offset + i0 * at.q_stride, at.q_stride);
      gemm<T>(true, false, cols, d, rows, T(1), dp, kTile, qi, at.q_stride, T(1), dkj, at.kv_stride);
    }
  }
}

}  // namespace

template <class T>
void attention_forward(const AttentionShape& s, const T* q, const T* k, const T* v, T* out,
                       T* lse) {
  check_shape(s);
  // (batch, head) pairs are independent: split them over the threads.
  parallel_for(s.batch * s.heads, 1, [&](std::int64_t first, std::int64_t end) {
    std::vector<T> scores(static_cast<std::size_t>(kTile * kTile));
    std::vector<T> acc(static_cast<std::size_t>(kTile * s.head_dim));
    for (std::int64_t bh = first; bh < end; ++bh) {
      const HeadView<T> at(s, bh / s.heads, bh % s.heads);
      T* lse_bh = lse + bh * s.seq;
      for (std::int64_t i0 = 0; i0 < s.seq; i0 += kTile) {
        forward_tile(s, at, q, k, v, out, lse_bh, i0, std::min(kTile, s.seq - i0), scores.data(),
                     acc.data());
      }
    }
  });
}

// Per key tile j and every query tile i that may see it (flash attention 2's backward), the
// scores are recomputed from lse (P = exp(S - lse)) and the gradients follow:
// dV_j += P^T dO_i, dP = dO_i V_j^T, dS = P * (dP - rowsum(dO_i * O_i)) * scale,
// dQ_i += dS K_j, dK_j += dS^T Q_i.
template <class T>
void attention_backward(const AttentionShape& s, const T* q, const T* k, const T* v, const T* out,
                        const T* dout, const T* lse, T* dq, T* dk, T* dv) {
  check_shape(s);
  const std::int64_t d = s.head_dim;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(d)));
  const HeadView<T> layout(s, 0, 0);
  for (std::int64_t t = 0; t < s.batch * s.seq; ++t) {  // row by row: the layout may be fused
    std::fill(dq + t * layout.q_stride, dq + t * layout.q_stride + s.heads * d, T(0));
    std::fill(dk + t * layout.kv_stride, dk + t * layout.kv_stride + s.kv_heads * d, T(0));
    std::fill(dv + t * layout.kv_stride, dv + t * layout.kv_stride + s.kv_heads * d, T(0));
  }
  // A key/value head and the query heads that read it write their own dk, dv and dq rows:
  // split the (batch, key/value head) pairs over the threads.
  const std::int64_t group = s.heads / s.kv_heads;
  parallel_for(s.batch * s.kv_heads, 1, [&](std::int64_t first, std::int64_t end) {
    std::vector<T> delta(static_cast<std::size_t>(s.seq));
    std::vector<T> p(static_cast<std::size_t>(kTile * kTile)), dp(p.size());
    for (std::int64_t bg = first; bg < end; ++bg) {
      for (std::int64_t h = (bg % s.kv_heads) * group; h < (bg % s.kv_heads + 1) * group; ++h) {
        backward_head(s, HeadView<T>(s, bg / s.kv_heads, h), q, k, v, out, dout,
                      lse + ((bg / s.kv_heads) * s.heads + h) * s.seq, dq, dk, dv, scale,
                      delta.data(), p.data(), dp.data());
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
                                         const double*, const double*, const double*,
                                         const double*, double*, double*, double*);

}  // namespace weft::kernels
