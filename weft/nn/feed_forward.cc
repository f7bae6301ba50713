#include "weft/nn/feed_forward.h"

#include "weft/kernels/swiglu.h"

namespace weft::nn {

FeedForward::FeedForward(ParameterList& params, const std::string& prefix, std::int64_t dim,
                         std::int64_t hidden)
    : hidden_(hidden),
      w1_(params, prefix + ".w1", dim, hidden),
      w2_(params, prefix + ".w2", hidden, dim),
      w3_(params, prefix + ".w3", dim, hidden) {}

void FeedForward::forward(const float* x, float* out, std::int64_t rows) {
  float* a = ensure(a_, {rows, hidden_});
  float* b = ensure(b_, {rows, hidden_});
  float* g = ensure(g_, {rows, hidden_});
  w1_.forward(x, a, rows);
  w3_.forward(x, b, rows);
  kernels::swiglu_forward(a, b, g, rows * hidden_);
  w2_.forward(g, out, rows);
}

void FeedForward::backward(const float* dout, const float* x, float* dx, std::int64_t rows) {
  float* dg = ensure(dg_, {rows, hidden_});
  float* da = ensure(da_, {rows, hidden_});
  float* db = ensure(db_, {rows, hidden_});
  w2_.backward(dout, g_.data<float>(), dg, rows);
  kernels::swiglu_backward(dg, a_.data<float>(), b_.data<float>(), da, db, rows * hidden_);
  w1_.backward(da, x, dx, rows);
  w3_.backward(db, x, dx, rows, /*accumulate_dx=*/true);
}

void FeedForward::release() { a_ = b_ = g_ = Tensor(); }

}  // namespace weft::nn
