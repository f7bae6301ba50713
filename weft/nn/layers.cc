#include "weft/nn/layers.h"

#include <atomic>
#include <cstring>
#include <string>
#include <vector>

#include "weft/kernels/convert.h"
#include "weft/kernels/embedding.h"
#include "weft/kernels/matmul.h"
#include "weft/kernels/rmsnorm.h"

namespace weft::nn {

namespace {

std::atomic<DType> g_matmul_dtype{DType::kFloat32};

// What a bf16 copy is of, each kind in a buffer of its own.
enum class Copy { kInput, kWeight, kGradient };

// The calling thread's bf16 copy of n floats, one buffer per role (a product reads three at
// most), each grown to the largest copy so far and reused: the copies live only for the call.
const BFloat16* bf16_copy(const float* x, std::int64_t n, Copy role) {
  thread_local std::vector<BFloat16> copies[3];
  std::vector<BFloat16>& into = copies[static_cast<int>(role)];
  if (into.size() < static_cast<std::size_t>(n)) into.resize(static_cast<std::size_t>(n));
  kernels::to_bfloat16_threaded(x, into.data(), n);
  return into.data();
}

}  // namespace

void set_matmul_dtype(DType dtype) {
  if (dtype != DType::kFloat32 && dtype != DType::kBFloat16) {
    throw InvalidArgument("Linear's products run in float32 or bfloat16, not " +
                          std::string(dtype_name(dtype)));
  }
  g_matmul_dtype.store(dtype);
}

DType matmul_dtype() { return g_matmul_dtype.load(); }

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
  if (matmul_dtype() == DType::kBFloat16) {
    kernels::linear_forward(bf16_copy(x, rows * in_, Copy::kInput),
                            bf16_copy(weight_.value.data<float>(), out_ * in_, Copy::kWeight), y,
                            rows, in_, out_, accumulate);
    return;
  }
  kernels::linear_forward(x, weight_.value.data<float>(), y, rows, in_, out_, accumulate);
}

void Linear::backward(const float* dy, const float* x, float* dx, std::int64_t rows,
                      bool accumulate_dx) {
  if (matmul_dtype() == DType::kBFloat16) {
    backward_bf16(dy, x, dx, rows, accumulate_dx, true);
    return;
  }
  kernels::linear_backward<float>(dy, x, weight_.value.data<float>(), dx,
                                  weight_.grad.data<float>(), rows, in_, out_, accumulate_dx);
}

void Linear::backward_input(const float* dy, float* dx, std::int64_t rows) const {
  if (matmul_dtype() == DType::kBFloat16) {
    backward_bf16(dy, nullptr, dx, rows, false, false);
    return;
  }
  kernels::linear_backward<float>(dy, nullptr, weight_.value.data<float>(), dx, nullptr, rows, in_,
                                  out_);
}

void Linear::backward_weight(const float* dy, const float* x, std::int64_t rows) {
  if (matmul_dtype() == DType::kBFloat16) {
    backward_bf16(dy, x, nullptr, rows, false, true);
    return;
  }
  kernels::linear_backward<float>(dy, x, weight_.value.data<float>(), nullptr,
                                  weight_.grad.data<float>(), rows, in_, out_);
}

// dy is made bf16 once for both halves; W only for dx, x only for dW.
void Linear::backward_bf16(const float* dy, const float* x, float* dx, std::int64_t rows,
                           bool accumulate_dx, bool weight_grad) const {
  const BFloat16* dy16 = bf16_copy(dy, rows * out_, Copy::kGradient);
  if (dx != nullptr) {
    kernels::linear_backward<BFloat16>(
        dy16, nullptr, bf16_copy(weight_.value.data<float>(), out_ * in_, Copy::kWeight), dx,
        nullptr, rows, in_, out_, accumulate_dx);
  }
  if (weight_grad) {
    kernels::linear_backward<BFloat16>(dy16, bf16_copy(x, rows * in_, Copy::kInput), nullptr,
                                       nullptr, weight_.grad.data<float>(), rows, in_, out_);
  }
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
