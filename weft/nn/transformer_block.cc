#include "weft/nn/transformer_block.h"

#include <cstring>
#include <string>

namespace weft::nn {

TransformerBlock::TransformerBlock(ParameterList& params, int layer, const BlockConfig& c)
    : dim_(c.attention.dim),
      attention_norm_(params, "layers." + std::to_string(layer) + ".attention_norm", dim_,
                      c.norm_eps),
      ffn_norm_(params, "layers." + std::to_string(layer) + ".ffn_norm", dim_, c.norm_eps),
      attention_(params, "layers." + std::to_string(layer) + ".attention", c.attention),
      feed_forward_(params, "layers." + std::to_string(layer) + ".feed_forward", dim_, c.hidden) {}

void TransformerBlock::forward(float* x, std::int64_t batch, std::int64_t seq) {
  const std::int64_t rows = batch * seq;
  std::memcpy(ensure(input_, {rows, dim_}), x,
              static_cast<std::size_t>(rows * dim_) * sizeof(float));
  run_forward(x, batch, seq);
  if (checkpointing_) release();
}

void TransformerBlock::run_forward(float* x, std::int64_t batch, std::int64_t seq) {
  const std::int64_t rows = batch * seq, n = rows * dim_;
  float* h1 = ensure(h1_, {rows, dim_});
  attention_norm_.forward(x, h1, ensure(rstd1_, {rows}), rows);
  attention_.forward(h1, x, batch, seq);  // x += attention(h1)
  std::memcpy(ensure(x2_, {rows, dim_}), x, static_cast<std::size_t>(n) * sizeof(float));
  float* h2 = ensure(h2_, {rows, dim_});
  ffn_norm_.forward(x, h2, ensure(rstd2_, {rows}), rows);
  feed_forward_.forward(h2, x, rows);  // x += ffn(h2)
}

void TransformerBlock::forward_cached(float* x, std::int64_t n, std::int64_t position,
                                      LayerCache& cache) {
  float* h = ensure(h1_, {n, dim_});
  attention_norm_.forward(x, h, ensure(rstd1_, {n}), n);
  attention_.forward_cached(h, x, n, position, cache);
  ffn_norm_.forward(x, h, ensure(rstd2_, {n}), n);
  feed_forward_.forward(h, x, n);
}

void TransformerBlock::backward(float* dx, std::int64_t batch, std::int64_t seq) {
  const std::int64_t rows = batch * seq;
  if (checkpointing_) {
    float* x = ensure(recompute_, {rows, dim_});
    std::memcpy(x, input_.data<float>(), static_cast<std::size_t>(rows * dim_) * sizeof(float));
    run_forward(x, batch, seq);
  }
  float* dh = ensure(dh_, {rows, dim_});
  // dx is the gradient of x3 = x2 + ffn(h2): it flows to x2 directly and through ffn_norm.
  feed_forward_.backward(dx, h2_.data<float>(), dh, rows);
  ffn_norm_.backward(dh, x2_.data<float>(), rstd2_.data<float>(), dx, rows, /*accumulate_dx=*/true);
  attention_.backward(dx, h1_.data<float>(), dh, batch, seq);
  attention_norm_.backward(dh, input_.data<float>(), rstd1_.data<float>(), dx, rows,
                           /*accumulate_dx=*/true);
  if (checkpointing_) {
    release();
    recompute_ = Tensor();
  }
}

void TransformerBlock::release() {
  h1_ = rstd1_ = x2_ = h2_ = rstd2_ = Tensor();
  attention_.release();
  feed_forward_.release();
}

}  // namespace weft::nn
