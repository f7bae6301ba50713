// Llama's SwiGLU feed-forward: w2(silu(w1 x) * w3 x), added to the residual stream; hidden
// size from the config.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "weft/nn/block_scratch.h"
#include "weft/nn/layers.h"

namespace weft::nn {

class FeedForward {
 public:
  // Tensor-parallel over `parts` ranks, this one `part`: hidden / parts of the hidden units
  // (w1 and w3 column-parallel, w2 row-parallel). `scratch` (shared with the model's other
  // blocks) outlives the layer.
  FeedForward(ParameterList& params, const std::string& prefix, std::int64_t dim,
              std::int64_t hidden, BlockScratch& scratch, int parts = 1, int part = 0);
  // Writes the output (this rank's share of it under tensor parallelism) to out [rows, dim],
  // or adds it inside w2's product when accumulate (the block's residual stream).
  // x is float32, or bfloat16 (the norm's output in mixed precision).
  template <ProductOperand X>
  void forward(const X* x, float* out, std::int64_t rows, bool accumulate);
  // dx overwritten (this rank's share under tensor parallelism); x is the forward's input.
  // Consumes what forward kept (in float32 w1 x | w3 x become their gradients; in mixed
  // precision the gradients go into backward's scratch): one backward per forward.
  // With `deferred`, the weight gradients are recorded there instead (DeferredWeightGrads).
  template <ProductOperand X>
  void backward(const float* dout, const X* x, float* dx, std::int64_t rows,
                DeferredWeightGrads* deferred = nullptr);
  // backward in two halves: everything but w1|w3's weight gradient (which needs x), then
  // that gradient. Between them the caller may reduce dx and fetch x (tensor parallelism),
  // but not run another block (the second half reads the shared scratch: block_scratch.h).
  // copy_x: x may change before a deferred gradient runs.
  void backward_input(const float* dout, float* dx, std::int64_t rows,
                      DeferredWeightGrads* deferred = nullptr);
  template <ProductOperand X>
  void backward_weight(const X* x, std::int64_t rows, DeferredWeightGrads* deferred = nullptr,
                       bool copy_x = false);
  std::int64_t activation_bytes() const { return bytes_of({&ab_, &g_}); }
  void append_saved(std::vector<Tensor*>& saved) { saved.insert(saved.end(), {&ab_, &g_}); }
  void release();

 private:
  template <class G>
  void w2_backward(const float* dout, const G* g, float* dg, std::int64_t rows,
                   DeferredWeightGrads* deferred);

  std::int64_t hidden_;  // this rank's
  // w1 and w3 are stacked in one weight: one product gives both halves of each row.
  Parameter w13_weight_;
  Linear w13_, w2_;
  // [w1 x | w3 x] and silu(w1 x) * w3 x (bfloat16 in mixed precision): kept by forward for
  // backward.
  Tensor ab_, g_;
  // Its hidden_grad: the gradient of g, then that of w13's output (in float32 that goes into
  // ab_ instead; in mixed precision it is bfloat16, over the same bytes).
  BlockScratch& scratch_;
};

}  // namespace weft::nn
