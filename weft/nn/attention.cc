#include "weft/nn/attention.h"

#include "weft/kernels/attention.h"
#include "weft/kernels/rope.h"

namespace weft::nn {

Attention::Attention(ParameterList& params, const std::string& prefix, const AttentionConfig& c)
    : config_(c),
      wq_(params, prefix + ".wq", c.dim, c.n_heads * c.head_dim()),
      wk_(params, prefix + ".wk", c.dim, c.n_kv_heads * c.head_dim()),
      wv_(params, prefix + ".wv", c.dim, c.n_kv_heads * c.head_dim()),
      wo_(params, prefix + ".wo", c.n_heads * c.head_dim(), c.dim) {}

void Attention::forward(const float* x, float* out, std::int64_t batch, std::int64_t seq) {
  const std::int64_t rows = batch * seq, hd = config_.head_dim();
  const kernels::AttentionShape shape{batch, seq, config_.n_heads, config_.n_kv_heads, hd};
  float* q = ensure(q_, {rows, config_.n_heads * hd});
  float* k = ensure(k_, {rows, config_.n_kv_heads * hd});
  float* v = ensure(v_, {rows, config_.n_kv_heads * hd});
  float* att = ensure(att_, {rows, config_.n_heads * hd});
  float* lse = ensure(lse_, {batch, config_.n_heads, seq});
  wq_.forward(x, q, rows);
  wk_.forward(x, k, rows);
  wv_.forward(x, v, rows);
  kernels::rope_forward(q, batch, seq, config_.n_heads, hd, config_.rope_theta);
  kernels::rope_forward(k, batch, seq, config_.n_kv_heads, hd, config_.rope_theta);
  kernels::attention_forward(shape, q, k, v, att, lse);
  wo_.forward(att, out, rows);
}

void Attention::backward(const float* dout, const float* x, float* dx, std::int64_t batch,
                         std::int64_t seq) {
  const std::int64_t rows = batch * seq, hd = config_.head_dim();
  const kernels::AttentionShape shape{batch, seq, config_.n_heads, config_.n_kv_heads, hd};
  float* datt = ensure(datt_, {rows, config_.n_heads * hd});
  float* dq = ensure(dq_, {rows, config_.n_heads * hd});
  float* dk = ensure(dk_, {rows, config_.n_kv_heads * hd});
  float* dv = ensure(dv_, {rows, config_.n_kv_heads * hd});
  wo_.backward(dout, att_.data<float>(), datt, rows);
  kernels::attention_backward(shape, q_.data<float>(), k_.data<float>(), v_.data<float>(),
                              att_.data<float>(), datt, lse_.data<float>(), dq, dk, dv);
  kernels::rope_backward(dq, batch, seq, config_.n_heads, hd, config_.rope_theta);
  kernels::rope_backward(dk, batch, seq, config_.n_kv_heads, hd, config_.rope_theta);
  wq_.backward(dq, x, dx, rows);
  wk_.backward(dk, x, dx, rows, /*accumulate_dx=*/true);
  wv_.backward(dv, x, dx, rows, /*accumulate_dx=*/true);
}

void Attention::release() { q_ = k_ = v_ = att_ = lse_ = Tensor(); }

}  // namespace weft::nn
