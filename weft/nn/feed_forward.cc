#include "weft/nn/feed_forward.h"

#include "weft/kernels/swiglu.h"

namespace weft::nn {

FeedForward::FeedForward(ParameterList& params, const std::string& prefix, std::int64_t dim,
                         std::int64_t hidden, int parts, int part)
    : hidden_(hidden / parts),
      w13_weight_(params.stack({{prefix + ".w1.weight", hidden_}, {prefix + ".w3.weight", hidden_}},
                               dim, prefix + ".w13.weight", Sharding{0, parts, part})),
      w13_(w13_weight_),
      w2_(params, prefix + ".w2", hidden, dim, Sharding{1, parts, part}) {}

void FeedForward::forward(const float* x, float* out, std::int64_t rows, bool accumulate) {
  float* ab = ensure(ab_, {rows, 2 * hidden_});
  float* g = ensure(g_, {rows, hidden_});
  w13_.forward(x, ab, rows);
  kernels::swiglu_forward(ab, ab + hidden_, g, rows, hidden_, 2 * hidden_);
  w2_.forward(g, out, rows, accumulate);
}

void FeedForward::backward(const float* dout, const float* x, float* dx, std::int64_t rows,
                           DeferredWeightGrads* deferred) {
  backward_input(dout, dx, rows, deferred);
  backward_weight(x, rows, deferred);
}

void FeedForward::backward_input(const float* dout, float* dx, std::int64_t rows,
                                 DeferredWeightGrads* deferred) {
  float* dg = ensure(dg_, {rows, hidden_});
  float* ab = ab_.data<float>();
  if (deferred == nullptr) {
    w2_.backward(dout, g_.data<float>(), dg, rows);
  } else {  // dout is the block's gradient buffer, which backward goes on to change
    w2_.backward_input(dout, dg, rows);
    w2_.backward_weight(dout, g_.data<float>(), rows, deferred, /*copy_dy=*/true, false);
  }
  kernels::swiglu_backward(dg, ab, ab + hidden_, rows, hidden_, 2 * hidden_);  // ab becomes dab
  w13_.backward_input(ab, dx, rows);
}

void FeedForward::backward_weight(const float* x, std::int64_t rows, DeferredWeightGrads* deferred,
                                  bool copy_x) {
  // ab_ holds the gradient of w1|w3's output until the next forward.
  w13_.backward_weight(ab_.data<float>(), x, rows, deferred, /*copy_dy=*/false, copy_x);
}

void FeedForward::release() { ab_ = g_ = Tensor(); }

}  // namespace weft::nn
