#include "weft/nn/layers.h"

#include <cstring>

#include "weft/kernels/blas.h"
#include "weft/kernels/embedding.h"
#include "weft/kernels/rmsnorm.h"

namespace weft::nn {

float* ensure(Tensor& t, const Shape& shape) {
  if (!t.defined() || t.shape() != shape || t.dtype() != DType::kFloat32) t = Tensor::zeros(shape);
  return t.data<float>();
}

std::int64_t bytes_of(std::initializer_list<const Tensor*> tensors) {
  std::int64_t n = 0;
  for (const Tensor* t : tensors) n += t->defined() ? static_cast<std::int64_t>(t->nbytes()) : 0;
  return n;
}

Linear::Linear(ParameterList& params, const std::string& name, std::int64_t in, std::int64_t out,
               Sharding sharding)
    : Linear(params.add(name + ".weight", {out, in}, sharding)) {}

Linear::Linear(Parameter& shared)
    : weight_(shared), in_(shared.value.size(1)), out_(shared.value.size(0)) {}

void Linear::forward(const float* x, float* y, std::int64_t rows, bool accumulate) const {
  kernels::linear_forward(x, weight_.value.data<float>(), y, rows, in_, out_, accumulate);
}

void Linear::backward(const float* dy, const float* x, float* dx, std::int64_t rows,
                      bool accumulate_dx) {
  kernels::linear_backward<float>(dy, x, weight_.value.data<float>(), dx,
                                  weight_.grad.data<float>(), rows, in_, out_, accumulate_dx);
}

void Linear::backward_input(const float* dy, float* dx, std::int64_t rows) const {
  kernels::linear_backward<float>(dy, nullptr, weight_.value.data<float>(), dx, nullptr, rows, in_,
                                  out_);
}

void Linear::backward_weight(const float* dy, const float* x, std::int64_t rows) {
  kernels::linear_backward<float>(dy, x, weight_.value.data<float>(), nullptr,
                                  weight_.grad.data<float>(), rows, in_, out_);
}

void Linear::backward_weight(const float* dy, const float* x, std::int64_t rows,
                             DeferredWeightGrads* deferred, bool copy_dy, bool copy_x) {
  if (deferred == nullptr) {
    backward_weight(dy, x, rows);
  } else {
    deferred->add(*this, dy, x, rows, copy_dy, copy_x);
  }
}

namespace {

Tensor copy_of(const float* data, std::int64_t rows, std::int64_t cols) {
  Tensor t = Tensor::zeros({rows, cols});
  std::memcpy(t.data<float>(), data, static_cast<std::size_t>(rows * cols) * sizeof(float));
  return t;
}

}  // namespace

void DeferredWeightGrads::add(Linear& layer, const float* dy, const float* x, std::int64_t rows,
                              bool copy_dy, bool copy_x) {
  Task t{&layer, dy, x, rows, {}, {}};
  if (copy_dy) {
    t.dy_copy = copy_of(dy, rows, layer.out());
    t.dy = t.dy_copy.data<float>();
  }
  if (copy_x) {
    t.x_copy = copy_of(x, rows, layer.in());
    t.x = t.x_copy.data<float>();
  }
  tasks_.push_back(std::move(t));
}

void DeferredWeightGrads::run() {
  for (const Task& t : tasks_) t.layer->backward_weight(t.dy, t.x, t.rows);
  tasks_.clear();
}

std::int64_t DeferredWeightGrads::bytes() const {
  std::int64_t n = 0;
  for (const Task& t : tasks_) n += bytes_of({&t.dy_copy, &t.x_copy});
  return n;
}

Embedding::Embedding(ParameterList& params, const std::string& name, std::int64_t vocab,
                     std::int64_t dim, Sharding sharding)
    : weight_(params.add(name + ".weight", {vocab, dim}, sharding)), vocab_(vocab), dim_(dim) {}

void Embedding::forward(const std::int32_t* tokens, std::int64_t n, float* out) const {
  kernels::embedding_forward_shard(tokens, n, weight_.value.data<float>(), vocab_,
                                   weight_.shard_offset(), weight_.value.size(0), dim_, out);
}

void Embedding::backward(const std::int32_t* tokens, std::int64_t n, const float* dout) {
  kernels::embedding_backward_shard(tokens, n, dout, vocab_, weight_.shard_offset(),
                                    weight_.value.size(0), dim_, weight_.grad.data<float>());
}

RMSNorm::RMSNorm(ParameterList& params, const std::string& name, std::int64_t dim, double eps)
    : weight_(params.add(name + ".weight", {dim})), dim_(dim), eps_(eps) {}

void RMSNorm::forward(const float* x, float* y, float* rstd, std::int64_t rows) const {
  kernels::rmsnorm_forward(x, weight_.value.data<float>(), y, rstd, rows, dim_, eps_);
}

void RMSNorm::backward(const float* dy, const float* x, const float* rstd, float* dx,
                       std::int64_t rows, bool accumulate_dx, float* dweight) {
  kernels::rmsnorm_backward(dy, x, weight_.value.data<float>(), rstd, dx,
                            dweight != nullptr ? dweight : weight_.grad.data<float>(), rows, dim_,
                            accumulate_dx);
}

}  // namespace weft::nn
