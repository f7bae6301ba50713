// The building blocks with parameters: Linear (no bias, as Llama's), Embedding and RMSNorm.
// Each works on row-major float32 rows; forward reads its input, backward gets the input
// back from the caller (the caller keeps what it saved) and accumulates parameter gradients.
#pragma once

#include <cstdint>
#include <string>

#include "weft/nn/parameter.h"

namespace weft::nn {

// Makes `t` a zero-filled float32 tensor of `shape` unless it already is one of that shape
// (activation buffers reused across steps).
float* ensure(Tensor& t, const Shape& shape);

class Linear {
 public:
  Linear(ParameterList& params, const std::string& name, std::int64_t in, std::int64_t out);
  // Over an existing [out, in] parameter (tied weights: the output layer reuses the token
  // embedding); gradients from both uses add up in its grad.
  Linear(Parameter& shared, std::int64_t in, std::int64_t out);
  // y[rows, out] = x[rows, in] W^T, or y += x W^T when accumulate.
  void forward(const float* x, float* y, std::int64_t rows, bool accumulate = false) const;
  // dx[rows, in] = dy W (skipped when dx is null; accumulated when accumulate_dx), dW += dy^T x.
  void backward(const float* dy, const float* x, float* dx, std::int64_t rows,
                bool accumulate_dx = false);
  Parameter& weight() const { return weight_; }
  std::int64_t in() const { return in_; }
  std::int64_t out() const { return out_; }

 private:
  Parameter& weight_;
  std::int64_t in_, out_;
};

class Embedding {
 public:
  Embedding(ParameterList& params, const std::string& name, std::int64_t vocab, std::int64_t dim);
  void forward(const std::int32_t* tokens, std::int64_t n, float* out) const;
  void backward(const std::int32_t* tokens, std::int64_t n, const float* dout);
  Parameter& weight() const { return weight_; }

 private:
  Parameter& weight_;
  std::int64_t vocab_, dim_;
};

class RMSNorm {
 public:
  RMSNorm(ParameterList& params, const std::string& name, std::int64_t dim, double eps);
  // Saves rstd[rows] for backward.
  void forward(const float* x, float* y, float* rstd, std::int64_t rows) const;
  // dx overwritten, or added to when accumulate_dx.
  void backward(const float* dy, const float* x, const float* rstd, float* dx, std::int64_t rows,
                bool accumulate_dx = false);
  Parameter& weight() const { return weight_; }

 private:
  Parameter& weight_;
  std::int64_t dim_;
  double eps_;
};

}  // namespace weft::nn
