#include "weft/kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "weft/base/check.h"

namespace weft::kernels {
namespace {

constexpr std::int64_t kQueryTile = 32;
constexpr std::int64_t kKeyTile = 32;

template <class T>
T dot(const T* a, const T* b, std::int64_t n) {
  T sum = 0;
  for (std::int64_t i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

template <class T>
void axpy(T* y, T alpha, const T* x, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

// Row pointers of one (batch, head) pair.
struct Rows {
  std::int64_t stride;  // elements between consecutive positions
  template <class T>
  T* at(T* base, std::int64_t t) const { return base + t * stride; }
};

void check_shape(const AttentionShape& s) {
  WEFT_CHECK_GT(s.kv_heads, 0);
  WEFT_CHECK_EQ(s.heads % s.kv_heads, 0);
}

// One query tile [i0, i0 + rows) of one head against every key tile it may see.
template <class T>
void forward_tile(const AttentionShape& s, const T* q, const T* k, const T* v, T* out, T* lse,
                  std::int64_t i0, std::int64_t rows, std::vector<T>& acc) {
  const std::int64_t d = s.head_dim;
  const Rows qrows{s.heads * d}, kvrows{s.kv_heads * d};
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(d)));
  T m[kQueryTile], l[kQueryTile], scores[kKeyTile];
  std::fill(m, m + rows, -std::numeric_limits<T>::infinity());
  std::fill(l, l + rows, T(0));
  std::fill(acc.begin(), acc.begin() + rows * d, T(0));
  const std::int64_t last_key = i0 + rows - 1;
  for (std::int64_t j0 = 0; j0 <= last_key; j0 += kKeyTile) {
    const std::int64_t cols = std::min(kKeyTile, last_key + 1 - j0);
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int64_t i = i0 + r;
      const std::int64_t visible = std::min(cols, i - j0 + 1);  // causal: keys j <= i
      if (visible <= 0) continue;
      const T* qi = qrows.at(q, i);
      T row_max = -std::numeric_limits<T>::infinity();
      for (std::int64_t c = 0; c < visible; ++c) {
        scores[c] = dot(qi, kvrows.at(k, j0 + c), d) * scale;
        row_max = std::max(row_max, scores[c]);
      }
      const T m_new = std::max(m[r], row_max);
      const T correction = std::exp(m[r] - m_new);
      T* a = acc.data() + r * d;
      if (correction != T(1)) {
        for (std::int64_t x = 0; x < d; ++x) a[x] *= correction;
      }
      T sum = 0;
      for (std::int64_t c = 0; c < visible; ++c) {
        const T p = std::exp(scores[c] - m_new);
        sum += p;
        axpy(a, p, kvrows.at(v, j0 + c), d);
      }
      l[r] = l[r] * correction + sum;
      m[r] = m_new;
    }
  }
  for (std::int64_t r = 0; r < rows; ++r) {
    T* o = qrows.at(out, i0 + r);
    const T inv = T(1) / l[r];
    for (std::int64_t x = 0; x < d; ++x) o[x] = acc[static_cast<std::size_t>(r * d + x)] * inv;
    lse[i0 + r] = m[r] + std::log(l[r]);
  }
}

}  // namespace

template <class T>
void attention_forward(const AttentionShape& s, const T* q, const T* k, const T* v, T* out,
                       T* lse) {
  check_shape(s);
  const std::int64_t d = s.head_dim, group = s.heads / s.kv_heads;
  std::vector<T> acc(static_cast<std::size_t>(kQueryTile * d));
  for (std::int64_t b = 0; b < s.batch; ++b) {
    for (std::int64_t h = 0; h < s.heads; ++h) {
      const std::int64_t g = h / group;
      const std::int64_t q_off = b * s.seq * s.heads * d + h * d;
      const std::int64_t kv_off = b * s.seq * s.kv_heads * d + g * d;
      T* lse_bh = lse + (b * s.heads + h) * s.seq;
      for (std::int64_t i0 = 0; i0 < s.seq; i0 += kQueryTile) {
        forward_tile(s, q + q_off, k + kv_off, v + kv_off, out + q_off, lse_bh, i0,
                     std::min(kQueryTile, s.seq - i0), acc);
      }
    }
  }
}

// Per key tile, every query row that may see it: the tile's keys and values stay in cache
// while the scores are recomputed from lse (P = exp(S - lse)) and the gradients follow:
// dV += P^T dO, dP = dO V^T, dS = P * (dP - rowsum(dO * O)), dQ += dS K scale,
// dK += dS^T Q scale.
template <class T>
void attention_backward(const AttentionShape& s, const T* q, const T* k, const T* v, const T* out,
                        const T* dout, const T* lse, T* dq, T* dk, T* dv) {
  check_shape(s);
  const std::int64_t d = s.head_dim, group = s.heads / s.kv_heads;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(d)));
  const Rows qrows{s.heads * d}, kvrows{s.kv_heads * d};
  std::fill(dq, dq + s.batch * s.seq * s.heads * d, T(0));
  std::fill(dk, dk + s.batch * s.seq * s.kv_heads * d, T(0));
  std::fill(dv, dv + s.batch * s.seq * s.kv_heads * d, T(0));
  std::vector<T> delta(static_cast<std::size_t>(s.seq));
  for (std::int64_t b = 0; b < s.batch; ++b) {
    for (std::int64_t h = 0; h < s.heads; ++h) {
      const std::int64_t q_off = b * s.seq * s.heads * d + h * d;
      const std::int64_t kv_off = b * s.seq * s.kv_heads * d + (h / group) * d;
      const T* lse_bh = lse + (b * s.heads + h) * s.seq;
      for (std::int64_t i = 0; i < s.seq; ++i) {
        delta[static_cast<std::size_t>(i)] = dot(qrows.at(dout + q_off, i), qrows.at(out + q_off, i), d);
      }
      for (std::int64_t j0 = 0; j0 < s.seq; j0 += kKeyTile) {
        const std::int64_t cols = std::min(kKeyTile, s.seq - j0);
        for (std::int64_t i = j0; i < s.seq; ++i) {
          const T* qi = qrows.at(q + q_off, i);
          const T* doi = qrows.at(dout + q_off, i);
          T* dqi = qrows.at(dq + q_off, i);
          const std::int64_t visible = std::min(cols, i - j0 + 1);
          for (std::int64_t c = 0; c < visible; ++c) {
            const std::int64_t j = j0 + c;
            const T p = std::exp(dot(qi, kvrows.at(k + kv_off, j), d) * scale - lse_bh[i]);
            axpy(kvrows.at(dv + kv_off, j), p, doi, d);
            const T dp = dot(doi, kvrows.at(v + kv_off, j), d);
            const T ds = p * (dp - delta[static_cast<std::size_t>(i)]) * scale;
            axpy(dqi, ds, kvrows.at(k + kv_off, j), d);
            axpy(kvrows.at(dk + kv_off, j), ds, qi, d);
          }
        }
      }
    }
  }
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
