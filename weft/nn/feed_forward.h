// Llama's SwiGLU feed-forward: out = w2(silu(w1 x) * w3 x), hidden size from the config.
#pragma once

#include <cstdint>
#include <string>

#include "weft/nn/layers.h"

namespace weft::nn {

class FeedForward {
 public:
  FeedForward(ParameterList& params, const std::string& prefix, std::int64_t dim,
              std::int64_t hidden);
  void forward(const float* x, float* out, std::int64_t rows);
  // dx overwritten; x is the forward's input.
  void backward(const float* dout, const float* x, float* dx, std::int64_t rows);
  void release();

 private:
  std::int64_t hidden_;
  Linear w1_, w2_, w3_;
  Tensor a_, b_, g_;     // w1 x, w3 x, silu(a) * b: kept by forward
  Tensor dg_, da_, db_;  // backward's scratch
};

}  // namespace weft::nn
