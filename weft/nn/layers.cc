#include "weft/nn/layers.h"

#include <atomic>
#include <cstring>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "weft/kernels/convert.h"
#include "weft/kernels/embedding.h"
#include "weft/kernels/matmul.h"
#include "weft/kernels/rmsnorm.h"

namespace weft::nn {

namespace {

std::atomic<DType> g_matmul_dtype{DType::kFloat32};

// What a bf16 copy is of, each kind in a buffer of its own (the products round the weights).
enum class Copy { kInput, kGradient, kWeight };

// The calling thread's bf16 copy of n floats, one buffer per role (a product reads three at most),
// each grown to the largest copy so far and reused: the copies live only for the call.
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
    throw InvalidArgument(
        "Linear's products (training.mixed_precision_param) run in float32 or bfloat16, not " +
        std::string(dtype_name(dtype)));
  }
  g_matmul_dtype.store(dtype);
}

DType matmul_dtype() { return g_matmul_dtype.load(); }

float* ensure(Tensor& t, const Shape& shape) {
  if (!t.defined() || t.shape() != shape || t.dtype() != DType::kFloat32) t = Tensor::zeros(shape);
  return t.data<float>();
}

BFloat16* ensure_bf16(Tensor& t, const Shape& shape) {
  if (!t.defined() || t.shape() != shape || t.dtype() != DType::kBFloat16) {
    t = Tensor::zeros(shape, DType::kBFloat16);
  }
  return t.data<BFloat16>();
}

void ensure_operand(Tensor& t, const Shape& shape) {
  if (matmul_dtype() == DType::kBFloat16) {
    ensure_bf16(t, shape);
  } else {
    ensure(t, shape);
  }
}

std::int64_t bytes_of(std::initializer_list<const Tensor*> tensors) {
  std::int64_t n = 0;
  for (const Tensor* t : tensors) n += t->defined() ? static_cast<std::int64_t>(t->nbytes()) : 0;
  return n;
}

Linear::Linear(ParameterList& params, const std::string& name, std::int64_t in, std::int64_t out,
               Sharding sharding)
    : Linear(params, params.add(name + ".weight", {out, in}, sharding)) {
  weight_.product_operand = true;
}

Linear::Linear(ParameterList& params, Parameter& shared)
    : weight_(shared),
      trees_(params.leaf_trees()),
      in_(shared.value.size(1)),
      out_(shared.value.size(0)),
      blocks_(shared.sharding.dim, shared.sharding.parts, shared.sharding.part, in_, out_) {}

void Linear::set_stacked(Sharding sharding, std::vector<std::int64_t> widths) {
  blocks_ = FeatureBlocks(sharding.dim, sharding.parts, sharding.part, in_, out_);
  blocks_.set_segments(std::move(widths));
}

namespace {

// The operand as bfloat16: itself when a kernel wrote it so, else the calling thread's copy.
const BFloat16* as_bf16(const float* x, std::int64_t n, Copy role) { return bf16_copy(x, n, role); }
const BFloat16* as_bf16(const BFloat16* x, std::int64_t, Copy) { return x; }

// Whether a product with these operands runs in float32: all of them float32, and so the mode.
template <class... Operands>
constexpr bool all_float32 = (std::is_same_v<Operands, float> && ...);

template <class T>
Tensor copy_of(const T* data, std::int64_t rows, std::int64_t cols) {
  Tensor t = Tensor::zeros({rows, cols}, dtype_of<T>());
  std::memcpy(t.data<T>(), data, static_cast<std::size_t>(rows * cols) * sizeof(T));
  return t;
}

}  // namespace

template <ProductOperand X>
void Linear::forward(const X* x, float* y, std::int64_t rows, bool accumulate) const {
  const float* w = weight_.value.data<float>();
  if constexpr (all_float32<X>) {
    if (matmul_dtype() == DType::kFloat32) {
      if (blocked()) {
        blocks_.forward(x, w, y, rows, accumulate, trees_);
      } else {
        kernels::linear_forward(x, w, y, rows, in_, out_, accumulate);
      }
      return;
    }
  }
  const BFloat16* x16 = as_bf16(x, rows * in_, Copy::kInput);
  if (blocked()) {
    blocks_.forward(x16, bf16_copy(w, out_ * in_, Copy::kWeight), y, rows, accumulate, trees_);
  } else {
    kernels::linear_forward(x16, w, y, rows, in_, out_, accumulate);
  }
}

template <ProductOperand X>
void Linear::forward(const X* x, BFloat16* y, std::int64_t rows) const {
  if (blocked()) {
    float* wide = ensure(wide_, {rows, out_});
    forward(x, wide, rows, /*accumulate=*/false);
    kernels::to_bfloat16_threaded(wide, y, rows * out_);
    return;
  }
  kernels::linear_forward(as_bf16(x, rows * in_, Copy::kInput), weight_.value.data<float>(), y,
                          rows, in_, out_);
}

// In bfloat16, dy is made bfloat16 once for both halves.
template <ProductOperand Dy, ProductOperand X>
void Linear::backward(const Dy* dy, const X* x, float* dx, std::int64_t rows, bool accumulate_dx) {
  if constexpr (all_float32<Dy, X>) {
    if (matmul_dtype() == DType::kFloat32) {
      if (trees_.active()) {
        if (dx != nullptr) input_grad_f32(dy, dx, rows, accumulate_dx);
        weight_grad<float>(dy, x, rows);
        return;
      }
      kernels::linear_backward<float>(dy, x, weight_.value.data<float>(), dx,
                                      weight_.grad.data<float>(), rows, in_, out_, accumulate_dx);
      return;
    }
  }
  const BFloat16* dy16 = as_bf16(dy, rows * out_, Copy::kGradient);
  if (dx != nullptr) input_grad_bf16(dy16, dx, rows, accumulate_dx);
  weight_grad_bf16(dy16, as_bf16(x, rows * in_, Copy::kInput), rows);
}

void Linear::input_grad_f32(const float* dy, float* dx, std::int64_t rows, bool accumulate) const {
  const float* w = weight_.value.data<float>();
  if (blocked()) {
    blocks_.input_grad(dy, w, dx, rows, accumulate, trees_);
  } else {
    kernels::linear_backward<float>(dy, nullptr, w, dx, nullptr, rows, in_, out_, accumulate);
  }
}

template <ProductOperand Dy>
void Linear::backward_input(const Dy* dy, float* dx, std::int64_t rows) const {
  if constexpr (all_float32<Dy>) {
    if (matmul_dtype() == DType::kFloat32) {
      input_grad_f32(dy, dx, rows, false);
      return;
    }
  }
  input_grad_bf16(as_bf16(dy, rows * out_, Copy::kGradient), dx, rows, false);
}

template <ProductOperand Dy, ProductOperand X>
void Linear::backward_weight(const Dy* dy, const X* x, std::int64_t rows) {
  if constexpr (all_float32<Dy, X>) {
    if (matmul_dtype() == DType::kFloat32) {
      weight_grad<float>(dy, x, rows);
      return;
    }
  }
  weight_grad_bf16(as_bf16(dy, rows * out_, Copy::kGradient), as_bf16(x, rows * in_, Copy::kInput),
                   rows);
}

void Linear::input_grad_bf16(const BFloat16* dy, float* dx, std::int64_t rows,
                             bool accumulate) const {
  const float* w = weight_.value.data<float>();
  if (blocked()) {
    blocks_.input_grad(dy, bf16_copy(w, out_ * in_, Copy::kWeight), dx, rows, accumulate, trees_);
  } else {
    kernels::linear_backward_input(dy, w, dx, rows, in_, out_, accumulate);
  }
}

void Linear::weight_grad_bf16(const BFloat16* dy, const BFloat16* x, std::int64_t rows) {
  weight_grad<BFloat16>(dy, x, rows);
}

template <class T>
void Linear::weight_grad(const T* dy, const T* x, std::int64_t rows) {
  float* dw = weight_.grad.data<float>();
  if (!trees_.active()) {
    kernels::linear_backward<T>(dy, x, nullptr, nullptr, dw, rows, in_, out_);
    return;
  }
  LeafSums<float>& sums = trees_.of(this, dw, weight_.grad.numel());
  trees_.for_each_leaf(rows, [&](std::int64_t leaf, std::int64_t first) {
    float* leaf_dw = sums.open(/*zeroed=*/false);
    if (blocked()) {
      blocks_.weight_grad(dy + first * out_, x + first * in_, leaf_dw, trees_.leaf_rows(),
                          trees_.feature_blocks());
    } else {
      kernels::linear_backward<T>(dy + first * out_, x + first * in_, nullptr, nullptr, leaf_dw,
                                  trees_.leaf_rows(), in_, out_, /*accumulate_dx=*/false,
                                  /*accumulate_dw=*/false);
    }
    sums.add(leaf);
  });
}

template <ProductOperand Dy, ProductOperand X>
void Linear::backward_weight(const Dy* dy, const X* x, std::int64_t rows,
                             DeferredWeightGrads* deferred, bool copy_dy, bool copy_x) {
  if (deferred == nullptr) {
    backward_weight(dy, x, rows);
  } else {
    deferred->add(*this, dy, x, rows, copy_dy, copy_x);
  }
}

template <ProductOperand Dy, ProductOperand X>
void DeferredWeightGrads::add(Linear& layer, const Dy* dy, const X* x, std::int64_t rows,
                              bool copy_dy, bool copy_x) {
  Task t{&layer, dy, x, rows, {}, {}};
  if (copy_dy) {
    t.dy_copy = copy_of(dy, rows, layer.out());
    t.dy = t.dy_copy.data<Dy>();
  }
  if (copy_x) {
    t.x_copy = copy_of(x, rows, layer.in());
    t.x = t.x_copy.data<X>();
  }
  tasks_.push_back(std::move(t));
}

void DeferredWeightGrads::run() {
  for (const Task& t : tasks_) {
    std::visit([&](auto dy, auto x) { t.layer->backward_weight(dy, x, t.rows); }, t.dy, t.x);
  }
  tasks_.clear();
}

std::int64_t DeferredWeightGrads::bytes() const {
  std::int64_t n = 0;
  for (const Task& t : tasks_) n += bytes_of({&t.dy_copy, &t.x_copy});
  return n;
}

#define WEFT_LINEAR_OPERANDS(Dy, X)                                                               \
  template void Linear::backward<Dy, X>(const Dy*, const X*, float*, std::int64_t, bool);         \
  template void Linear::backward_weight<Dy, X>(const Dy*, const X*, std::int64_t);                \
  template void Linear::backward_weight<Dy, X>(const Dy*, const X*, std::int64_t,                 \
                                               DeferredWeightGrads*, bool, bool);                 \
  template void DeferredWeightGrads::add<Dy, X>(Linear&, const Dy*, const X*, std::int64_t, bool, \
                                                bool);
WEFT_LINEAR_OPERANDS(float, float)
WEFT_LINEAR_OPERANDS(float, BFloat16)
WEFT_LINEAR_OPERANDS(BFloat16, float)
WEFT_LINEAR_OPERANDS(BFloat16, BFloat16)
#undef WEFT_LINEAR_OPERANDS
template void Linear::forward<float>(const float*, float*, std::int64_t, bool) const;
template void Linear::forward<BFloat16>(const BFloat16*, float*, std::int64_t, bool) const;
template void Linear::forward<float>(const float*, BFloat16*, std::int64_t) const;
template void Linear::forward<BFloat16>(const BFloat16*, BFloat16*, std::int64_t) const;
template void Linear::backward_input<float>(const float*, float*, std::int64_t) const;
template void Linear::backward_input<BFloat16>(const BFloat16*, float*, std::int64_t) const;

Embedding::Embedding(ParameterList& params, const std::string& name, std::int64_t vocab,
                     std::int64_t dim, Sharding sharding)
    : weight_(params.add(name + ".weight", {vocab, dim}, sharding)),
      trees_(params.leaf_trees()),
      vocab_(vocab),
      dim_(dim) {}

void Embedding::forward(const std::int32_t* tokens, std::int64_t n, float* out) const {
  kernels::embedding_forward_shard(tokens, n, weight_.value.data<float>(), vocab_,
                                   weight_.shard_offset(), weight_.value.size(0), dim_, out);
}

// In the invariant mode each leaf's rows of the table are summed apart (a dense table a leaf:
// the byte-level vocabularies' 256 rows are cheap; a large vocabulary's are not).
void Embedding::backward(const std::int32_t* tokens, std::int64_t n, const float* dout) {
  float* grad = weight_.grad.data<float>();
  const auto backward = [&](const std::int32_t* t, std::int64_t rows, const float* d, float* g) {
    kernels::embedding_backward_shard(t, rows, d, vocab_, weight_.shard_offset(),
                                      weight_.value.size(0), dim_, g);
  };
  if (!trees_.active()) return backward(tokens, n, dout, grad);
  LeafSums<float>& sums = trees_.of(this, grad, weight_.grad.numel());
  trees_.for_each_leaf(n, [&](std::int64_t leaf, std::int64_t first) {
    backward(tokens + first, trees_.leaf_rows(), dout + first * dim_, sums.open());
    sums.add(leaf);
  });
}

RMSNorm::RMSNorm(ParameterList& params, const std::string& name, std::int64_t dim, double eps)
    : weight_(params.add(name + ".weight", {dim})),
      trees_(params.leaf_trees()),
      dim_(dim),
      eps_(eps) {}

void RMSNorm::forward(const float* x, float* y, float* rstd, std::int64_t rows) const {
  kernels::rmsnorm_forward(x, weight_.value.data<float>(), y, rstd, rows, dim_, eps_);
}

void RMSNorm::forward(const float* x, BFloat16* y, float* rstd, std::int64_t rows) const {
  kernels::rmsnorm_forward(x, weight_.value.data<float>(), y, rstd, rows, dim_, eps_);
}

void RMSNorm::backward(const float* dy, const float* x, const float* rstd, float* dx,
                       std::int64_t rows, bool accumulate_dx, float* dweight) {
  const float* w = weight_.value.data<float>();
  if (dweight == nullptr) dweight = weight_.grad.data<float>();
  if (!trees_.active()) {
    kernels::rmsnorm_backward(dy, x, w, rstd, dx, dweight, rows, dim_, accumulate_dx);
    return;
  }
  LeafSums<float>& sums = trees_.of(this, dweight, dim_);
  trees_.for_each_leaf(rows, [&](std::int64_t leaf, std::int64_t first) {
    kernels::rmsnorm_backward(dy + first * dim_, x + first * dim_, w, rstd + first,
                              dx + first * dim_, sums.open(), trees_.leaf_rows(), dim_,
                              accumulate_dx);
    sums.add(leaf);
  });
}

void RMSNorm::backward_sequence_sharded(const float* dy, const float* x, const float* rstd,
                                        float* dx, std::int64_t rows, bool accumulate_dx, int ranks,
                                        const AllGather& all_gather) {
  const std::int64_t leaf_rows = trees_.leaf_rows(), leaves = rows / leaf_rows;
  if (rows % leaf_rows != 0) {
    throw InvalidArgument(
        "layout-invariant training with sequence parallelism needs whole leaves (sequences, "
        "or blocks of them) on each tensor-parallel rank: a batch_size (per micro-batch) or "
        "training.deterministic_sequence_blocks that the tensor_parallel_degree divides");
  }
  const float* w = weight_.value.data<float>();
  float* mine = ensure(leaf_grads_[0], {leaves, dim_});
  std::fill(mine, mine + leaves * dim_, 0.0f);
  for (std::int64_t i = 0; i < leaves; ++i) {
    const std::int64_t first = i * leaf_rows;
    kernels::rmsnorm_backward(dy + first * dim_, x + first * dim_, w, rstd + first,
                              dx + first * dim_, mine + i * dim_, leaf_rows, dim_, accumulate_dx);
  }
  float* all = ensure(leaf_grads_[1], {ranks * leaves, dim_});
  all_gather(mine, all, leaves * dim_);
  LeafSums<float>& sums = trees_.of(this, weight_.grad.data<float>(), dim_);
  for (const auto& [leaf, i] : trees_.leaves_of(ranks * rows)) {
    std::copy_n(all + i * dim_, dim_, sums.open(/*zeroed=*/false));
    sums.add(leaf);
  }
}

}  // namespace weft::nn
