#include "weft/nn/attention.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "weft/base/error.h"
#include "weft/kernels/attention.h"
#include "weft/kernels/convert.h"
#include "weft/kernels/rope.h"

namespace weft::nn {

namespace {

AttentionConfig local_heads(AttentionConfig c, int parts) {
  c.n_heads /= parts;
  c.n_kv_heads /= parts;
  return c;
}

}  // namespace

// Rank `part` holds query heads [part * n_heads / parts, ...) and key/value heads
// [part * n_kv_heads / parts, ...): exactly the groups its query heads read.
Attention::Attention(ParameterList& params, const std::string& prefix, const AttentionConfig& c,
                     BlockScratch& scratch, int parts, int part, const ContextParallel* cp)
    : config_(local_heads(c, parts)),
      hd_(c.head_dim()),
      qkv_weight_(params.stack({{prefix + ".wq.weight", config_.n_heads * hd_},
                                {prefix + ".wk.weight", config_.n_kv_heads * hd_},
                                {prefix + ".wv.weight", config_.n_kv_heads * hd_}},
                               c.dim, prefix + ".wqkv.weight", Sharding{0, parts, part})),
      wqkv_(params, qkv_weight_),
      wq_(params, params.at(prefix + ".wq.weight")),
      wk_(params, params.at(prefix + ".wk.weight")),
      wv_(params, params.at(prefix + ".wv.weight")),
      wo_(params, prefix + ".wo", c.n_heads * hd_, c.dim, Sharding{1, parts, part}),
      scratch_(scratch),
      cp_(cp),
      trees_(params.leaf_trees()) {
  for (Linear* l : {&wq_, &wk_, &wv_}) l->weight().product_operand = true;
  wqkv_.set_stacked(Sharding{0, parts, part},
                    {config_.n_heads * hd_, config_.n_kv_heads * hd_, config_.n_kv_heads * hd_});
}

std::int64_t Attention::qkv_width() const {
  return (config_.n_heads + 2 * config_.n_kv_heads) * hd_;
}

kernels::AttentionShape Attention::attention_shape(std::int64_t batch, std::int64_t seq) const {
  return {.batch = batch,
          .seq = seq,
          .heads = config_.n_heads,
          .kv_heads = config_.n_kv_heads,
          .head_dim = hd_,
          .q_stride = qkv_width(),
          .kv_stride = qkv_width()};
}

RingShape Attention::ring_shape(std::int64_t batch, std::int64_t seq) const {
  if (seq % 2 != 0) {
    const std::string rows = std::to_string(seq);
    throw InvalidArgument(
        "under context parallelism a rank holds two equal chunks of each "
        "sequence; got " +
        rows + " rows per sequence");
  }
  return {batch, seq / 2, config_.n_heads, config_.n_kv_heads, hd_};
}

BlockedShape Attention::blocked_shape(std::int64_t batch, std::int64_t seq) const {
  return {.batch = batch,
          .sequence_rows = seq,
          .blocks = trees_.sequence_blocks(),
          .heads = config_.n_heads,
          .kv_heads = config_.n_kv_heads,
          .head_dim = hd_};
}

// In mixed precision the projection's float32 output is scratch (the backward's q|k|v
// gradient, which the backward overwrites) and qkv_ keeps it rotated and rounded to bfloat16, which
// the attention kernels read: half the bytes kept, and under context parallelism sent. The
// attention's output is rounded once too (into att_, through the scratch of the output's gradient),
// for the output projection's two products and the backward's delta.
template <ProductOperand X>
void Attention::forward(const X* x, float* out, std::int64_t batch, std::int64_t seq,
                        bool accumulate) {
  const std::int64_t rows = batch * seq, width = qkv_width(), att_width = config_.n_heads * hd_;
  float* lse = ensure(lse_, {batch, config_.n_heads, seq});
  const bool mixed = matmul_dtype() == DType::kBFloat16;
  float* qkv = ensure(mixed ? scratch_.qkv_grad : qkv_, {rows, width});
  float* att = ensure(mixed ? scratch_.attention_grad : att_, {rows, att_width});
  wqkv_.forward(x, qkv, rows);
  if (!mixed) {
    rotate(qkv, batch, seq, /*backward=*/false);
    attend(qkv, att, lse, batch, seq);
    wo_.forward(att, out, rows, accumulate);
    return;
  }
  BFloat16* rounded = ensure_bf16(qkv_, {rows, width});
  rotate(qkv, rounded, batch, seq, /*backward=*/false);
  attend(static_cast<const BFloat16*>(rounded), att, lse, batch, seq);
  BFloat16* att16 = ensure_bf16(att_, {rows, att_width});
  kernels::to_bfloat16_threaded(att, att16, rows * att_width);
  wo_.forward(static_cast<const BFloat16*>(att16), out, rows, accumulate);
}

// RoPE on q's and k's heads (k's follow q's in each fused row: one pass rotates both), each
// context-parallel chunk at its own position.
void Attention::rotate(float* qkv, std::int64_t batch, std::int64_t seq, bool backward) {
  const std::int64_t heads = config_.n_heads + config_.n_kv_heads;
  if (ring()) {
    rope_chunks(*cp_, ring_shape(batch, seq), config_.rope_theta, qkv, backward);
  } else if (backward) {
    kernels::rope_backward(qkv, batch, seq, heads, hd_, config_.rope_theta, 0, qkv_width());
  } else {
    kernels::rope_forward(qkv, batch, seq, heads, hd_, config_.rope_theta, 0, qkv_width());
  }
}

// rotate() and the rounding to bfloat16 of every column in one pass, x unchanged.
void Attention::rotate(const float* x, BFloat16* y, std::int64_t batch, std::int64_t seq,
                       bool backward) {
  const std::int64_t heads = config_.n_heads + config_.n_kv_heads;
  if (ring()) {
    rope_chunks_bf16(*cp_, ring_shape(batch, seq), config_.rope_theta, x, y, backward);
  } else if (backward) {
    kernels::rope_backward_bf16(x, y, batch, seq, heads, hd_, config_.rope_theta, 0, qkv_width());
  } else {
    kernels::rope_forward_bf16(x, y, batch, seq, heads, hd_, config_.rope_theta, 0, qkv_width());
  }
}

template <class T>
void Attention::attend(const T* qkv, float* att, float* lse, std::int64_t batch, std::int64_t seq) {
  if (trees_.sequence_blocked()) {
    blocked_attention_forward(cp_, blocked_shape(batch, seq), qkv, att, lse, scratch_.blocked);
    return;
  }
  if (ring()) {
    ring_attention_forward(*cp_, ring_shape(batch, seq), qkv, att, lse, scratch_.ring);
    return;
  }
  const T* k = qkv + config_.n_heads * hd_;
  kernels::attention_forward(attention_shape(batch, seq), qkv, k, k + config_.n_kv_heads * hd_, att,
                             lse);
}

template <class T>
void Attention::attend_backward(const T* qkv, const float* datt, float* dqkv, std::int64_t batch,
                                std::int64_t seq) {
  const T* att = att_.data<T>();
  const float* lse = lse_.data<float>();
  if (trees_.sequence_blocked()) {
    blocked_attention_backward(cp_, blocked_shape(batch, seq), qkv, att, datt, lse, dqkv,
                               scratch_.blocked);
    return;
  }
  if (ring()) {
    ring_attention_backward(*cp_, ring_shape(batch, seq), qkv, att, datt, lse, dqkv, scratch_.ring);
    return;
  }
  const T* k = qkv + config_.n_heads * hd_;
  float* dk = dqkv + config_.n_heads * hd_;
  kernels::attention_backward(attention_shape(batch, seq), qkv, k, k + config_.n_kv_heads * hd_,
                              att, datt, lse, dqkv, dk, dk + config_.n_kv_heads * hd_);
}

template <ProductOperand X>
void Attention::backward(const float* dout, const X* x, float* dx, std::int64_t batch,
                         std::int64_t seq, DeferredWeightGrads* deferred) {
  backward_input(dout, dx, batch, seq, deferred);
  backward_weight(x, batch * seq, deferred);
}

// In mixed precision qkv_ is spent once attention's backward has read it: it becomes the
// bfloat16 gradient of the projection's output, rounded once for both halves of its backward.
void Attention::backward_input(const float* dout, float* dx, std::int64_t batch, std::int64_t seq,
                               DeferredWeightGrads* deferred) {
  const std::int64_t rows = batch * seq, width = qkv_width();
  float* datt = ensure(scratch_.attention_grad, {rows, config_.n_heads * hd_});
  float* dqkv = ensure(scratch_.qkv_grad, {rows, width});
  visit_operand(att_, [&](auto* att) {
    if (deferred == nullptr) {
      wo_.backward(dout, att, datt, rows);
    } else {  // dout is the block's gradient buffer, which backward goes on to change
      wo_.backward_input(dout, datt, rows);
      wo_.backward_weight(dout, att, rows, deferred, /*copy_dy=*/true, false);
    }
  });
  if (qkv_.dtype() != DType::kBFloat16) {
    attend_backward(qkv_.data<float>(), datt, dqkv, batch, seq);
    rotate(dqkv, batch, seq, /*backward=*/true);
    wqkv_.backward_input(dqkv, dx, rows);
    return;
  }
  attend_backward(static_cast<const BFloat16*>(qkv_.data<BFloat16>()), datt, dqkv, batch, seq);
  BFloat16* dqkv16 = qkv_.data<BFloat16>();
  rotate(dqkv, dqkv16, batch, seq, /*backward=*/true);
  wqkv_.backward_input(static_cast<const BFloat16*>(dqkv16), dx, rows);
}

template <ProductOperand X>
void Attention::backward_weight(const X* x, std::int64_t rows, DeferredWeightGrads* deferred,
                                bool copy_x) {
  // The gradient of the projection's output: the scratch's (float32) or qkv_ (bfloat16), that
  // any block's next forward or backward overwrites.
  if (qkv_.dtype() == DType::kBFloat16) {
    const BFloat16* dqkv = qkv_.data<BFloat16>();
    wqkv_.backward_weight(dqkv, x, rows, deferred, /*copy_dy=*/true, copy_x);
  } else {
    const float* dqkv = scratch_.qkv_grad.data<float>();
    wqkv_.backward_weight(dqkv, x, rows, deferred, /*copy_dy=*/true, copy_x);
  }
}

#define WEFT_ATTENTION_INPUT(X)                                                                 \
  template void Attention::forward(const X*, float*, std::int64_t, std::int64_t, bool);         \
  template void Attention::backward(const float*, const X*, float*, std::int64_t, std::int64_t, \
                                    DeferredWeightGrads*);                                      \
  template void Attention::backward_weight(const X*, std::int64_t, DeferredWeightGrads*, bool);
WEFT_ATTENTION_INPUT(float)
WEFT_ATTENTION_INPUT(BFloat16)
#undef WEFT_ATTENTION_INPUT

void Attention::forward_cached(const float* x, float* residual, std::int64_t n,
                               std::int64_t position, LayerCache& cache) {
  const std::int64_t hd = hd_, heads = config_.n_heads, kv = config_.n_kv_heads;
  float* q = ensure(q_, {n, heads * hd});
  float* att = ensure(att_, {n, heads * hd});
  float* k = cache.k.data<float>() + position * kv * hd;
  float* v = cache.v.data<float>() + position * kv * hd;
  wq_.forward(x, q, n);
  wk_.forward(x, k, n);
  wv_.forward(x, v, n);
  kernels::rope_forward(q, 1, n, heads, hd, config_.rope_theta, position);
  kernels::rope_forward(k, 1, n, kv, hd, config_.rope_theta, position);
  const float* keys = cache.k.data<float>();
  const float* values = cache.v.data<float>();
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  std::vector<float> p(static_cast<std::size_t>(position + n));
  for (std::int64_t i = 0; i < n; ++i) {
    for (std::int64_t h = 0; h < heads; ++h) {
      const std::int64_t g = h / (heads / kv), visible = position + i + 1;
      const float* qi = q + (i * heads + h) * hd;
      float max = -INFINITY, sum = 0;
      for (std::int64_t j = 0; j < visible; ++j) {
        const float* kj = keys + (j * kv + g) * hd;
        float s = 0;
        for (std::int64_t x2 = 0; x2 < hd; ++x2) s += qi[x2] * kj[x2];
        p[static_cast<std::size_t>(j)] = s * scale;
        max = std::max(max, p[static_cast<std::size_t>(j)]);
      }
      for (std::int64_t j = 0; j < visible; ++j)
        sum += (p[static_cast<std::size_t>(j)] = std::exp(p[static_cast<std::size_t>(j)] - max));
      float* o = att + (i * heads + h) * hd;
      std::fill(o, o + hd, 0.0f);
      for (std::int64_t j = 0; j < visible; ++j) {
        const float w = p[static_cast<std::size_t>(j)] / sum;
        const float* vj = values + (j * kv + g) * hd;
        for (std::int64_t x2 = 0; x2 < hd; ++x2) o[x2] += w * vj[x2];
      }
    }
  }
  wo_.forward(att, residual, n, /*accumulate=*/true);
}

void Attention::release() { qkv_ = att_ = lse_ = Tensor(); }

}  // namespace weft::nn
