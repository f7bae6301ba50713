#include "weft/nn/feed_forward.h"

#include "weft/kernels/swiglu.h"

namespace weft::nn {

FeedForward::FeedForward(ParameterList& params, const std::string& prefix, std::int64_t dim,
                         std::int64_t hidden, BlockScratch& scratch, int parts, int part)
    : hidden_(hidden / parts),
      w13_weight_(params.stack({{prefix + ".w1.weight", hidden_}, {prefix + ".w3.weight", hidden_}},
                               dim, prefix + ".w13.weight", Sharding{0, parts, part})),
      w13_(params, w13_weight_),
      w2_(params, prefix + ".w2", hidden, dim, Sharding{1, parts, part}),
      scratch_(scratch) {
  for (const char* part_name : {".w1.weight", ".w3.weight"})
    params.at(prefix + part_name).product_operand = true;
  w13_.set_stacked(Sharding{0, parts, part}, {hidden_, hidden_});
}

// In mixed precision w1|w3's product writes its output as bfloat16 (as PyTorch's autocast
// does), SwiGLU its output, and its backward the gradient of w1|w3's output: the products read
// them as they are, and SwiGLU reads half the bytes.
template <ProductOperand X>
void FeedForward::forward(const X* x, float* out, std::int64_t rows, bool accumulate) {
  if (matmul_dtype() == DType::kBFloat16) {
    BFloat16* ab = ensure_bf16(ab_, {rows, 2 * hidden_});
    BFloat16* g = ensure_bf16(g_, {rows, hidden_});
    w13_.forward(x, ab, rows);
    kernels::swiglu_forward(ab, ab + hidden_, g, rows, hidden_, 2 * hidden_);
    w2_.forward(g, out, rows, accumulate);
  } else {
    float* ab = ensure(ab_, {rows, 2 * hidden_});
    float* g = ensure(g_, {rows, hidden_});
    w13_.forward(x, ab, rows);
    kernels::swiglu_forward(ab, ab + hidden_, g, rows, hidden_, 2 * hidden_);
    w2_.forward(g, out, rows, accumulate);
  }
}

template <ProductOperand X>
void FeedForward::backward(const float* dout, const X* x, float* dx, std::int64_t rows,
                           DeferredWeightGrads* deferred) {
  backward_input(dout, dx, rows, deferred);
  backward_weight(x, rows, deferred);
}

void FeedForward::backward_input(const float* dout, float* dx, std::int64_t rows,
                                 DeferredWeightGrads* deferred) {
  float* dg = ensure(scratch_.hidden_grad, {rows, hidden_});
  if (g_.dtype() == DType::kBFloat16) {
    w2_backward(dout, g_.data<BFloat16>(), dg, rows, deferred);
    // The scratch becomes the bfloat16 gradient of w1|w3's output; ab_ is left as it is.
    const BFloat16* ab = ab_.data<BFloat16>();
    const BFloat16* dab =
        kernels::swiglu_backward_bf16(dg, ab, ab + hidden_, rows, hidden_, 2 * hidden_);
    w13_.backward_input(dab, dx, rows);
  } else {
    w2_backward(dout, g_.data<float>(), dg, rows, deferred);
    float* ab = ab_.data<float>();
    kernels::swiglu_backward(dg, ab, ab + hidden_, rows, hidden_, 2 * hidden_);  // ab becomes dab
    w13_.backward_input(ab, dx, rows);
  }
}

template <class G>
void FeedForward::w2_backward(const float* dout, const G* g, float* dg, std::int64_t rows,
                              DeferredWeightGrads* deferred) {
  if (deferred == nullptr) {
    w2_.backward(dout, g, dg, rows);
  } else {  // dout is the block's gradient buffer, which backward goes on to change
    w2_.backward_input(dout, dg, rows);
    w2_.backward_weight(dout, g, rows, deferred, /*copy_dy=*/true, false);
  }
}

template <ProductOperand X>
void FeedForward::backward_weight(const X* x, std::int64_t rows, DeferredWeightGrads* deferred,
                                  bool copy_x) {
  // The gradient of w1|w3's output stays in ab_ (float32) until this block's next forward, or
  // in the scratch (bfloat16) until any block's next forward or backward.
  if (g_.dtype() == DType::kBFloat16) {
    const auto* dab = reinterpret_cast<const BFloat16*>(scratch_.hidden_grad.data<float>());
    w13_.backward_weight(dab, x, rows, deferred, /*copy_dy=*/deferred != nullptr, copy_x);
  } else {
    w13_.backward_weight(ab_.data<float>(), x, rows, deferred, /*copy_dy=*/false, copy_x);
  }
}

#define WEFT_FEED_FORWARD_INPUT(X)                                                  \
  template void FeedForward::forward(const X*, float*, std::int64_t, bool);         \
  template void FeedForward::backward(const float*, const X*, float*, std::int64_t, \
                                      DeferredWeightGrads*);                        \
  template void FeedForward::backward_weight(const X*, std::int64_t, DeferredWeightGrads*, bool);
WEFT_FEED_FORWARD_INPUT(float)
WEFT_FEED_FORWARD_INPUT(BFloat16)
#undef WEFT_FEED_FORWARD_INPUT

void FeedForward::release() { ab_ = g_ = Tensor(); }

}  // namespace weft::nn
