// The building blocks with parameters: Linear (no bias, as Llama's), Embedding and RMSNorm.
// Each works on row-major float32 rows (Linear's inputs may be bfloat16 in mixed precision,
// and RMSNorm writes them so); forward reads its input, backward gets the input
// back from the caller (the caller keeps what it saved) and accumulates parameter gradients.
#pragma once

#include <concepts>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <variant>
#include <vector>

#include "weft/nn/feature_blocks.h"
#include "weft/nn/parameter.h"

namespace weft::nn {

// The operand type of every Linear's matrix products, process-wide: kFloat32 (the default),
// or kBFloat16 for mixed precision (TorchTitan's mixed_precision_param = "bfloat16"): each
// product reads bfloat16 weights and inputs and accumulates and writes float32. The weight is
// rounded to nearest even as the product runs; an input is read as it is when a kernel wrote
// it in bfloat16 (the norms, SwiGLU and its backward, in mixed precision), else rounded too.
// Weights, gradients, the optimizer's state and the residual stream stay float32. Set it
// before a model runs, not while one does; anything but those two dtypes throws
// InvalidArgument.
void set_matmul_dtype(DType dtype);
DType matmul_dtype();

// The rows a product reads: float32, or bfloat16 that a kernel wrote for it. A bfloat16
// operand makes the product a bfloat16 one whatever matmul_dtype() says.
template <class T>
concept ProductOperand = std::same_as<T, float> || std::same_as<T, BFloat16>;

// Makes `t` a zero-filled float32 tensor of `shape` unless it already is one of that shape
// (activation buffers reused across steps).
float* ensure(Tensor& t, const Shape& shape);
// The same for a bfloat16 tensor.
BFloat16* ensure_bf16(Tensor& t, const Shape& shape);
// ensure() or ensure_bf16() of n elements, by T.
template <ProductOperand T>
T* ensure_as(Tensor& t, std::int64_t n) {
  if constexpr (std::same_as<T, BFloat16>) {
    return ensure_bf16(t, {n});
  } else {
    return ensure(t, {n});
  }
}
// ensure() in float32, or ensure_bf16() when matmul_dtype() is bfloat16: a kernel's output that
// only products read.
void ensure_operand(Tensor& t, const Shape& shape);
// f(t's elements) for a float32 or bfloat16 tensor (a product's operand made by ensure_operand).
template <class F>
decltype(auto) visit_operand(const Tensor& t, F&& f) {
  if (t.dtype() == DType::kBFloat16) return f(static_cast<const BFloat16*>(t.data<BFloat16>()));
  return f(static_cast<const float*>(t.data<float>()));
}
// Bytes of the tensors that are defined (activation memory).
std::int64_t bytes_of(std::initializer_list<const Tensor*> tensors);

class Linear;

// Weight gradients put off for later. A zero-bubble pipeline schedule splits a stage's backward
// into I (the input gradients, which the previous stage waits for) and W (the weight
// gradients, run when the rank would otherwise be idle): during I the linear layers record
// their dW += dy^T x here, and W runs them, in the order recorded. An operand a later backward
// overwrites (a scratch buffer) is copied; the others must stay unchanged until run() (the
// micro-batch's saved activations, which the pipeline keeps until its W).
class DeferredWeightGrads {
 public:
  template <ProductOperand Dy, ProductOperand X>
  void add(Linear& layer, const Dy* dy, const X* x, std::int64_t rows, bool copy_dy, bool copy_x);
  void run();  // computes every recorded product and forgets them
  bool empty() const { return tasks_.empty(); }
  std::int64_t bytes() const;  // of the copies

 private:
  using Rows = std::variant<const float*, const BFloat16*>;
  struct Task {
    Linear* layer;
    Rows dy, x;
    std::int64_t rows;
    Tensor dy_copy, x_copy;
  };
  std::vector<Task> tasks_;
};

class Linear {
 public:
  // A [out, in] weight, of which this rank holds the slice `sharding` says (dimension 0:
  // column-parallel, a slice of the outputs; 1: row-parallel, a slice of the inputs).
  Linear(ParameterList& params, const std::string& name, std::int64_t in, std::int64_t out,
         Sharding sharding = {});
  // Over an existing [out, in] parameter of `params` (this rank's slice of it; tied weights:
  // the output layer reuses the token embedding); gradients from both uses add up in its grad.
  Linear(ParameterList& params, Parameter& shared);
  // y[rows, out] = x[rows, in] W^T, or y += x W^T when accumulate.
  template <ProductOperand X>
  void forward(const X* x, float* y, std::int64_t rows, bool accumulate = false) const;
  // Mixed precision: y written as bfloat16, the float32 sums rounded (an output that only
  // bfloat16 readers take).
  template <ProductOperand X>
  void forward(const X* x, BFloat16* y, std::int64_t rows) const;
  // dx[rows, in] = dy W (skipped when dx is null; accumulated when accumulate_dx), dW += dy^T x.
  template <ProductOperand Dy, ProductOperand X>
  void backward(const Dy* dy, const X* x, float* dx, std::int64_t rows, bool accumulate_dx = false);
  // The two halves of backward, dx and then dW, for callers that move dx between them.
  template <ProductOperand Dy>
  void backward_input(const Dy* dy, float* dx, std::int64_t rows) const;
  template <ProductOperand Dy, ProductOperand X>
  void backward_weight(const Dy* dy, const X* x, std::int64_t rows);
  // backward_weight now, or recorded in `deferred` when it is not null (copy_dy, copy_x: the
  // operands that may change before it runs).
  template <ProductOperand Dy, ProductOperand X>
  void backward_weight(const Dy* dy, const X* x, std::int64_t rows, DeferredWeightGrads* deferred,
                       bool copy_dy, bool copy_x);
  Parameter& weight() const { return weight_; }
  std::int64_t in() const { return in_; }    // this rank's
  std::int64_t out() const { return out_; }  // this rank's
  // Over a stacked weight (ParameterList::stack: q|k|v, w1|w3) sharded as `sharding`: its
  // parts' widths along the sharded dimension, this rank's, for layout-invariant tensor
  // parallelism (FeatureBlocks::set_segments).
  void set_stacked(Sharding sharding, std::vector<std::int64_t> widths);

 private:
  // Whether the products run in fixed feature blocks now (LeafTrees::set_feature_blocks).
  bool blocked() const { return trees_.blocked() && blocks_.splits(); }
  // dx (+)= dy W in float32, in feature blocks when blocked().
  void input_grad_f32(const float* dy, float* dx, std::int64_t rows, bool accumulate) const;
  // The bfloat16 products, dy already bfloat16.
  void input_grad_bf16(const BFloat16* dy, float* dx, std::int64_t rows, bool accumulate) const;
  void weight_grad_bf16(const BFloat16* dy, const BFloat16* x, std::int64_t rows);
  // dW += dy^T x in one product, or leaf by leaf into the layout-invariant sums.
  template <class T>
  void weight_grad(const T* dy, const T* x, std::int64_t rows);

  Parameter& weight_;
  LeafTrees& trees_;
  std::int64_t in_, out_;
  FeatureBlocks blocks_;
  mutable Tensor wide_;  // a blocked product's float32 output, rounded to bfloat16 after
};

class Embedding {
 public:
  // With a sharding along dimension 0 this rank holds vocab / parts rows of the table: a
  // token outside them embeds as zeros (the sum over the ranks is the lookup) and its
  // gradient goes to the rank that holds it.
  Embedding(ParameterList& params, const std::string& name, std::int64_t vocab, std::int64_t dim,
            Sharding sharding = {});
  void forward(const std::int32_t* tokens, std::int64_t n, float* out) const;
  void backward(const std::int32_t* tokens, std::int64_t n, const float* dout);
  Parameter& weight() const { return weight_; }

 private:
  Parameter& weight_;
  LeafTrees& trees_;
  std::int64_t vocab_, dim_;
};

class RMSNorm {
 public:
  RMSNorm(ParameterList& params, const std::string& name, std::int64_t dim, double eps);
  // Saves rstd[rows] for backward. y in bfloat16: for a product that reads it (mixed
  // precision), computed in float32.
  void forward(const float* x, float* y, float* rstd, std::int64_t rows) const;
  void forward(const float* x, BFloat16* y, float* rstd, std::int64_t rows) const;
  // dx overwritten, or added to when accumulate_dx; the weight's gradient is added to dweight
  // (the weight's grad when null).
  void backward(const float* dy, const float* x, const float* rstd, float* dx, std::int64_t rows,
                bool accumulate_dx = false, float* dweight = nullptr);
  // The layout-invariant mode under sequence parallelism: dy, x and rstd are this rank's
  // `rows` rows of the micro-batch, whole leaves, rank r of `ranks` holding the r-th run of
  // them. Each leaf's weight gradient is computed here, all_gather(mine, all, n) collects
  // every rank's (rank-major), and every leaf is added to the weight's leaf sums, as without
  // sequence parallelism. InvalidArgument when the rows are not whole leaves.
  using AllGather = std::function<void(const float* mine, float* all, std::int64_t n)>;
  void backward_sequence_sharded(const float* dy, const float* x, const float* rstd, float* dx,
                                 std::int64_t rows, bool accumulate_dx, int ranks,
                                 const AllGather& all_gather);
  // Whether backward sums the weight's gradient per leaf now (the layout-invariant mode).
  bool sums_leaves() const { return trees_.active(); }
  Parameter& weight() const { return weight_; }

 private:
  Parameter& weight_;
  LeafTrees& trees_;
  std::int64_t dim_;
  double eps_;
  Tensor leaf_grads_[2];  // backward_sequence_sharded's: this rank's leaves, every rank's
};

}  // namespace weft::nn
