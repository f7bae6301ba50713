#include "weft/nn/feed_forward.h"

#include "weft/kernels/swiglu.h"

namespace weft::nn {

FeedForward::FeedForward(ParameterList& params, const std::string& prefix, std::int64_t dim,
                         std::int64_t hidden)
    : hidden_(hidden),
      w13_weight_(params.stack({{prefix + ".w1.weight", hidden}, {prefix + ".w3.weight", hidden}},
                               dim, prefix + ".w13.weight")),
      w13_(w13_weight_, dim, 2 * hidden),
      w2_(params, prefix + ".w2", hidden, dim) {}

void FeedForward::forward(const float* x, float* residual, std::int64_t rows) {
  float* ab = ensure(ab_, {rows, 2 * hidden_});
  float* g = ensure(g_, {rows, hidden_});
  w13_.forward(x, ab, rows);
  kernels::swiglu_forward(ab, ab + hidden_, g, rows, hidden_, 2 * hidden_);
  w2_.forward(g, residual, rows, /*accumulate=*/true);
}

void FeedForward::backward(const float* dout, const float* x, float* dx, std::int64_t rows) {
  float* dg = ensure(dg_, {rows, hidden_});
  float* ab = ab_.data<float>();
  w2_.backward(dout, g_.data<float>(), dg, rows);
  kernels::swiglu_backward(dg, ab, ab + hidden_, rows, hidden_, 2 * hidden_);  // ab becomes dab
  w13_.backward(ab, x, dx, rows);
}

void FeedForward::release() { ab_ = g_ = Tensor(); }

}  // namespace weft::nn
